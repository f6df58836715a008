//! A run one step at a time, so that its driver decides when the next step happens: the
//! CLI loops without pause, the page pauses, resumes and stops between steps.

use serde::{Deserialize, Serialize};
use web_time::Instant;

use super::error::TrainError;
use super::events::{EvalRecord, RunSummary, TrainEvent};
use super::trainer::Trainer;
use crate::data::{BatchReader, DataSource, ReaderPosition, Split};

/// Losses and evaluations so far, for the curves of a resumed run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct History {
    /// The loss of step `i + 1` at `losses[i]` (an f16 step that overflowed has an
    /// infinite one, which comes back as NaN).
    #[serde(deserialize_with = "super::events::floats_or_nan")]
    pub losses: Vec<f32>,
    pub evals: Vec<EvalRecord>,
}

/// Where a run is between two calls of [`Progress::advance`].
pub struct Progress {
    started: bool,
    /// Time spent inside `advance`: a paused run is not slower.
    busy: std::time::Duration,
    /// Time spent writing text samples, which is not training time.
    sampling: std::time::Duration,
    /// The training epoch being read; `None` between epochs.
    reader: Option<BatchReader>,
    last_loss: f32,
    last_eval: Option<EvalRecord>,
    summary: Option<RunSummary>,
    history: History,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            started: false,
            busy: std::time::Duration::ZERO,
            sampling: std::time::Duration::ZERO,
            reader: None,
            last_loss: f32::NAN,
            last_eval: None,
            summary: None,
            history: History::default(),
        }
    }
}

impl Progress {
    /// A run picked up where a checkpoint left it (see [`super::saved_run`]): the reader
    /// goes on from `reader`, the curves and the time so far are `history` and `busy`.
    pub(super) fn resumed(reader: Option<BatchReader>, history: History, busy: std::time::Duration) -> Self {
        Progress {
            reader,
            last_loss: history.losses.last().copied().unwrap_or(f32::NAN),
            last_eval: history.evals.last().cloned(),
            busy,
            history,
            ..Progress::default()
        }
    }

    /// Where the training stream is (`None` between epochs), the curves so far and the
    /// training time: what a checkpoint keeps of the run's progress.
    pub(super) fn snapshot(&self) -> (Option<ReaderPosition>, History, std::time::Duration) {
        let reader = self.reader.as_ref().and_then(BatchReader::position);
        (reader, self.history.clone(), self.busy)
    }

    /// Losses and evaluations so far.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// The run's summary, once it finished.
    pub fn summary(&self) -> Option<&RunSummary> {
        self.summary.as_ref()
    }

    /// The next piece of the run and what it reported: first the start, then one optimizer
    /// step each call (with its enforcement and evaluation), then the final evaluation and
    /// summary. Nothing once finished.
    pub async fn advance(
        &mut self,
        trainer: &mut Trainer,
        source: &DataSource,
    ) -> Result<Vec<TrainEvent>, TrainError> {
        let entered = Instant::now();
        let sampling_before = self.sampling;
        let events = self.next_events(trainer, source).await;
        self.busy += entered.elapsed().saturating_sub(self.sampling - sampling_before);
        let mut events = events?;
        if let Some(TrainEvent::Finished(summary)) = events.last_mut() {
            summary.seconds = self.busy.as_secs_f64();
            summary.samples_per_sec = summary.samples_seen as f64 / summary.seconds.max(1e-9);
            self.summary = Some(summary.clone());
        }
        Ok(events)
    }

    async fn next_events(
        &mut self,
        trainer: &mut Trainer,
        source: &DataSource,
    ) -> Result<Vec<TrainEvent>, TrainError> {
        let mut events = Vec::new();
        if self.summary.is_some() {
            return Ok(events);
        }
        if !self.started {
            self.started = true;
            events.push(TrainEvent::Started(trainer.run_started(source)));
            // A resumed run reported its enforcements before it was saved.
            if trainer.step == 0 {
                events.extend(trainer.enforcements().iter().cloned().map(TrainEvent::Enforced));
            }
            return Ok(events);
        }
        let total_steps = trainer.config().total_steps(source.sample_count(Split::Train));
        let every = trainer.config().eval_every;
        while trainer.step < total_steps {
            let reader = match &mut self.reader {
                Some(reader) => reader,
                None => self.reader.insert(BatchReader::suspendable(
                    source,
                    Split::Train,
                    trainer.epoch,
                    trainer.data_settings().prefetch,
                )),
            };
            let Some(batch) = reader.next_batch(trainer.config().effective_batch).await? else {
                self.end_epoch(trainer, source, &mut events).await?;
                continue;
            };
            let mut record = trainer.train_step(&batch).await?;
            self.last_loss = record.loss;
            self.history.losses.push(record.loss);
            let enforcement = record.enforcement.take();
            events.push(TrainEvent::Step(record));
            events.extend(enforcement.map(TrainEvent::Enforced));
            if every > 0 && trainer.step.is_multiple_of(every) {
                self.evaluate_once(trainer, source, &mut events).await?;
            }
            let sample_every = trainer.config().sample_every;
            if sample_every > 0 && trainer.step.is_multiple_of(sample_every) && trainer.step < total_steps {
                self.sample(trainer, source, &mut events).await?;
            }
            return Ok(events);
        }
        if self.reader.is_some() {
            self.end_epoch(trainer, source, &mut events).await?;
        }
        self.evaluate_once(trainer, source, &mut events).await?;
        self.sample(trainer, source, &mut events).await?;
        // Timing is filled in by `advance`, which sees this call's time too.
        events.push(TrainEvent::Finished(RunSummary {
            steps: trainer.step,
            samples_seen: trainer.samples_seen,
            seconds: 0.0,
            samples_per_sec: 0.0,
            final_loss: self.last_loss,
            eval: self.last_eval.clone(),
            peak_memory: trainer.run_peak,
            data_peak_bytes: source.memory().peak_bytes_held as u64,
            skipped_steps: trainer.skipped_steps,
            enforcements: trainer.enforcements().to_vec(),
            micro_batch: trainer.micro_batch(),
        }));
        Ok(events)
    }

    async fn end_epoch(
        &mut self,
        trainer: &mut Trainer,
        source: &DataSource,
        events: &mut Vec<TrainEvent>,
    ) -> Result<(), TrainError> {
        self.reader = None;
        if trainer.config().eval_every == 0 {
            self.evaluate_once(trainer, source, events).await?;
        }
        trainer.epoch += 1;
        Ok(())
    }

    async fn sample(
        &mut self,
        trainer: &Trainer,
        source: &DataSource,
        events: &mut Vec<TrainEvent>,
    ) -> Result<(), TrainError> {
        let started = Instant::now();
        let sample = trainer.sample_text(source).await?;
        self.sampling += started.elapsed();
        events.extend(sample.map(TrainEvent::Sample));
        Ok(())
    }

    /// Evaluates on the test split and reports it, unless the split is empty or this step
    /// was already evaluated.
    async fn evaluate_once(
        &mut self,
        trainer: &mut Trainer,
        source: &DataSource,
        events: &mut Vec<TrainEvent>,
    ) -> Result<(), TrainError> {
        let evaluated = self.last_eval.as_ref().is_some_and(|e| e.step == trainer.step);
        if evaluated || !trainer.config().evaluate || source.sample_count(Split::Test) == 0 {
            return Ok(());
        }
        if trainer.data_settings().pause_training_for_eval
            && let Some(reader) = self.reader.as_mut()
        {
            reader.suspend();
        }
        let eval = trainer.evaluate(source, Split::Test).await?;
        events.push(TrainEvent::Eval(eval.clone()));
        self.history.evals.push(eval.clone());
        self.last_eval = Some(eval);
        Ok(())
    }
}

impl Trainer {
    /// Trains for the configured duration, evaluating on the test split as configured.
    pub async fn run(
        &mut self,
        source: &DataSource,
        mut on_event: impl FnMut(&TrainEvent),
    ) -> Result<RunSummary, TrainError> {
        let mut progress = Progress::default();
        loop {
            for event in progress.advance(self, source).await? {
                on_event(&event);
            }
            if let Some(summary) = progress.summary() {
                return Ok(summary.clone());
            }
        }
    }
}
