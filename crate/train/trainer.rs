//! The trainer: a model, its optimizer and the enforcer, one optimizer step at a time
//! (micro-batches accumulated, f16 loss scaling, evaluation, text samples).

use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::prelude::*;
use web_time::Instant;

use super::config::{Precision, TrainConfig};
use super::error::TrainError;
use super::events::{EvalRecord, RunStarted, StepRecord, TextSample};
use super::optimizer::Optimizer;
use super::precision::{self, LossScaler};
use super::probe::{ReportProbe, probed_plan};
use super::schedule::Schedule;
use super::step::{MicroSteps, accumulate_gradients, update_in_backward};
use super::{plan, tensors};
use crate::data::text::CharTokenizer;
use crate::data::{Batch, BatchReader, DataSource, Split, Window};
use crate::memory::{
    Calibration, Candidate, DataSettings, Enforcement, Enforcer, MemorySample, MemoryTracker, Phase, Plan,
    Verdict, recomputed_inputs,
};
use crate::model::generate::{SampleSettings, generate};
use crate::model::{InputShape, Model};
use crate::ops::backend::free_pages;

/// Steps a loss scale of 1 may still overflow in a row before the run counts as diverged.
const MAX_SKIPPED_IN_A_ROW: u32 = 30;
/// Clean f16 steps before the loss scale doubles.
const SCALE_GROWTH_INTERVAL: u32 = 200;

fn readback(error: impl std::fmt::Display) -> TrainError {
    TrainError::Readback(error.to_string())
}

/// Device reservation plus data pipeline: what the cap counts. `None` without a device pool.
fn capped_bytes(memory: &MemorySample) -> Option<u64> {
    memory
        .gpu_bytes_reserved
        .map(|reserved| reserved + memory.data_bytes_held)
}

pub struct Trainer {
    pub(super) config: TrainConfig,
    input: InputShape,
    /// Evaluation runs here, without autodiff.
    pub(super) device: Device,
    train_device: Device,
    backend: String,
    pub(super) model: Option<Model>,
    pub(super) optimizer: Optimizer,
    schedule: Schedule,
    tracker: MemoryTracker,
    pub(super) step: u64,
    pub(super) epoch: u64,
    pub(super) samples_seen: u64,
    pub(super) run_peak: MemorySample,
    pub(super) micro_batch: usize,
    precision: Precision,
    precision_note: Option<String>,
    /// Why the planner picked the levers it did, where the cap left them to it.
    levers_reason: Option<String>,
    pub(super) scaler: Option<LossScaler>,
    pub(super) skipped_in_a_row: u32,
    pub(super) skipped_steps: u64,
    pub(super) enforcer: Option<Enforcer>,
    pub(super) enforcements: Vec<Enforcement>,
    /// The setting the run starts with, as the plan judged it.
    pub(super) planned: Candidate,
    pub(super) calibration: Option<Calibration>,
}

/// The shrink the plan made before step 1: only where a micro-batch was asked for (without
/// one, the planner's pick is a choice, not an enforcement).
fn planned_enforcement(config: &TrainConfig, plan: &Plan, chosen: &Candidate) -> Option<Enforcement> {
    let (cap, asked) = (config.cap?, config.micro_batch?);
    (chosen.micro_batch < asked).then(|| Enforcement {
        step: 0,
        from_micro_batch: asked,
        to_micro_batch: chosen.micro_batch,
        accumulation_steps: chosen.accumulation_steps,
        peak_bytes: plan
            .candidates
            .iter()
            .find(|c| c.micro_batch == asked)
            .map_or(0, Candidate::peak),
        cap,
        predicted: true,
    })
}

impl Trainer {
    pub async fn new(
        config: TrainConfig,
        source: &DataSource,
        device: Device,
        backend: &str,
    ) -> Result<Self, TrainError> {
        Self::reporting_probes(config, source, device, backend, &mut |_| {}).await
    }

    /// [`Trainer::new`], each probe step reported to `report` as it starts and ends.
    pub async fn reporting_probes(
        mut config: TrainConfig,
        source: &DataSource,
        device: Device,
        backend: &str,
        report: ReportProbe<'_>,
    ) -> Result<Self, TrainError> {
        let train_device = device.clone().autodiff();
        let (run_plan, model) = probed_plan(&config, source, &train_device, backend, report).await?;
        let input = run_plan.input;
        let precision_note = run_plan.precision_note.clone();
        let levers_reason = super::advice::pick_reason(&run_plan);
        let train_samples = source.sample_count(Split::Train);
        let schedule = Schedule {
            base_lr: config.optimizer.learning_rate,
            warmup_steps: config.optimizer.warmup_steps,
            total_steps: config.total_steps(train_samples),
            final_fraction: config.optimizer.final_lr_fraction,
        };
        let chosen = run_plan.pick(&config)?;
        let enforcements = Vec::from_iter(planned_enforcement(&config, &run_plan.plan, chosen));
        let (micro_batch, planned) = (chosen.micro_batch, chosen.clone());
        let precision = chosen.precision;
        // f16-pure: the f16 parameters are the only ones from here on.
        let model = match precision {
            Precision::F16Pure => precision::half_copy(&model),
            _ => model,
        };
        // The levers the planner picked are the run's from here on: a saved run resumes
        // with them, whatever a later plan would pick.
        config.precision = Some(chosen.precision);
        config.checkpointing = Some(chosen.checkpointing);
        config.moments = Some(chosen.moments);
        let calibration = run_plan.plan.calibration.clone();
        Ok(Trainer {
            enforcer: config.cap.map(Enforcer::new),
            optimizer: Optimizer::new(&config.optimizer, chosen.moments),
            tracker: MemoryTracker::new(device.clone(), source.gauge().clone()),
            config,
            input,
            device,
            train_device,
            backend: backend.to_string(),
            model: Some(model),
            schedule,
            step: 0,
            epoch: 0,
            samples_seen: 0,
            run_peak: MemorySample::default(),
            micro_batch,
            precision,
            precision_note,
            levers_reason,
            scaler: precision
                .is_half()
                .then(|| LossScaler::new(SCALE_GROWTH_INTERVAL)),
            skipped_in_a_row: 0,
            skipped_steps: 0,
            enforcements,
            planned,
            calibration,
        })
    }

    /// Starts from the parameters of a safetensors file in PyTorch's names and layouts
    /// (see [`super::safetensors`]) instead of fresh ones, before the first step. A file that
    /// does not fit the model is refused by the first mismatch, and the model is kept.
    pub fn load_weights(&mut self, bytes: &[u8]) -> Result<(), TrainError> {
        if self.step > 0 {
            return Err(TrainError::Weights(
                "a run takes initial weights only before its first step".into(),
            ));
        }
        // f16-pure's parameters are f16: the file's values land in an f32 copy first, so
        // that each is rounded once, as a fresh f16-pure run rounds its initial weights.
        let model = match self.precision {
            Precision::F16Pure => precision::full_copy(self.model()),
            _ => self.model().clone(),
        };
        let loaded = super::safetensors::import(model, &self.config.model, bytes)?;
        self.model = Some(match self.precision {
            Precision::F16Pure => precision::half_copy(&loaded),
            _ => loaded,
        });
        Ok(())
    }

    /// How the data pipeline runs, as planned.
    pub fn data_settings(&self) -> DataSettings {
        self.planned.data
    }

    /// Optimizer steps done.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// The micro-batch the next step uses.
    pub fn micro_batch(&self) -> usize {
        self.micro_batch
    }

    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Whether the run recomputes its activations (fixed in the config once planned).
    pub fn checkpointing(&self) -> bool {
        self.config.checkpointing.unwrap_or(false)
    }

    /// Changes the enforcer made, including the one before training (step 0).
    pub fn enforcements(&self) -> &[Enforcement] {
        &self.enforcements
    }

    /// Shrinks the micro-batch when the step's peak came too close to the cap.
    async fn enforce(&mut self, memory: &MemorySample) -> Result<Option<Enforcement>, TrainError> {
        let (Some(enforcer), Some(peak)) = (self.enforcer.as_mut(), capped_bytes(memory)) else {
            return Ok(None);
        };
        match enforcer.check(peak, self.micro_batch, self.config.effective_batch) {
            Verdict::Within => Ok(None),
            Verdict::Exhausted => Err(TrainError::CapExceeded {
                step: self.step,
                peak_bytes: peak,
                cap_bytes: enforcer.cap,
            }),
            Verdict::Shrink(smaller) => {
                let cap = enforcer.cap;
                // Cached pages of the larger shapes would otherwise stay reserved. In the
                // page the update may still be queued on them (after the f16 loss's read).
                free_pages(&self.device).await;
                let enforcement = Enforcement {
                    step: self.step,
                    from_micro_batch: self.micro_batch,
                    to_micro_batch: smaller,
                    accumulation_steps: self.config.effective_batch / smaller,
                    peak_bytes: peak,
                    cap,
                    predicted: false,
                };
                self.micro_batch = smaller;
                self.enforcements.push(enforcement.clone());
                Ok(Some(enforcement))
            }
        }
    }

    pub fn config(&self) -> &TrainConfig {
        &self.config
    }

    pub fn input(&self) -> InputShape {
        self.input
    }

    pub fn model(&self) -> &Model {
        self.model
            .as_ref()
            .expect("the model is only taken during a step")
    }

    /// How this run's passes go, under `loss_scale`.
    fn micro_steps(&self, loss_scale: f32) -> MicroSteps {
        MicroSteps {
            micro_batch: self.micro_batch,
            precision: self.precision,
            loss_scale,
            recompute: self.checkpointing(),
            recomputed_inputs: recomputed_inputs(&self.config.model.census(&self.input).segments),
        }
    }

    /// One optimizer step over `batch` (at most one effective batch).
    pub async fn train_step(&mut self, batch: &Batch) -> Result<StepRecord, TrainError> {
        if batch.is_empty() {
            return Err(TrainError::Dataset(
                "a training step needs at least one sample".into(),
            ));
        }
        let started = Instant::now();
        let learning_rate = self.schedule.lr_at(self.step);
        let model = self.model.take().expect("the model is only taken during a step");
        let loss_scale = self.scaler.as_ref().map(LossScaler::scale);
        let steps = self.micro_steps(loss_scale.unwrap_or(1.0));
        // f32 only, so no loss scaler to consult.
        if steps.updates_in_backward(batch.len()) {
            let optimizer = &mut self.optimizer;
            let (model, loss) = update_in_backward(
                model,
                batch,
                steps,
                &self.input,
                &self.train_device,
                Some(&mut self.tracker),
                |model, grads| optimizer.step(learning_rate, model, grads),
            )
            .await;
            self.model = Some(model);
            let loss = loss.into_scalar_async().await.map_err(readback)?;
            return self
                .end_step(started, batch, learning_rate, loss, loss_scale, false)
                .await;
        }
        let step = accumulate_gradients(
            &model,
            batch,
            steps,
            &self.input,
            &self.train_device,
            Some(&mut self.tracker),
        )
        .await;
        let (loss, skipped) = match self.scaler.as_mut() {
            None => {
                // Queue the update before waiting for the loss: the device works meanwhile.
                self.model = Some(self.optimizer.step(learning_rate, model, step.grads));
                (step.loss.into_scalar_async().await.map_err(readback)?, false)
            }
            Some(scaler) => {
                let read = async {
                    let loss: f32 = step.loss.into_scalar_async().await.map_err(readback)?;
                    let magnitude: f32 = match precision::gradient_magnitude(&model, &step.grads) {
                        Some(sum) => sum.into_scalar_async().await.map_err(readback)?,
                        None => 0.0,
                    };
                    Ok::<_, TrainError>((loss, magnitude))
                };
                let (loss, magnitude) = match read.await {
                    Ok(read) => read,
                    Err(error) => {
                        // The model stays, unchanged, for an export or a retry.
                        self.model = Some(model);
                        return Err(error);
                    }
                };
                let applied = scaler.update(!(loss.is_finite() && magnitude.is_finite()));
                self.model = Some(if applied {
                    // The scale the gradients were computed with: the update above may
                    // have changed it for the next step.
                    let scale = loss_scale.unwrap_or(1.0);
                    self.optimizer
                        .step_unscaling(learning_rate, model, step.grads, scale)
                } else {
                    model
                });
                (loss, !applied)
            }
        };
        self.end_step(started, batch, learning_rate, loss, loss_scale, skipped)
            .await
    }

    /// The step's bookkeeping once its update is made (or skipped): divergence, memory,
    /// the enforcer, and the record.
    async fn end_step(
        &mut self,
        started: Instant,
        batch: &Batch,
        learning_rate: f64,
        loss: f32,
        loss_scale: Option<f32>,
        skipped: bool,
    ) -> Result<StepRecord, TrainError> {
        self.skipped_in_a_row = if skipped { self.skipped_in_a_row + 1 } else { 0 };
        self.skipped_steps += u64::from(skipped);
        if (!skipped && !loss.is_finite()) || self.skipped_in_a_row > MAX_SKIPPED_IN_A_ROW {
            return Err(TrainError::Diverged {
                step: self.step,
                loss,
            });
        }
        self.tracker.sample_at(Phase::Update);
        let memory = self.tracker.take_step_peak();
        let memory_phases = self.tracker.take_phases();
        self.run_peak = self.run_peak.max(memory);
        let micro_batch = self.micro_batch;
        self.step += 1;
        self.samples_seen += batch.len() as u64;
        let enforcement = self.enforce(&memory).await?;
        Ok(StepRecord {
            step: self.step,
            epoch: self.epoch,
            samples_seen: self.samples_seen,
            loss,
            learning_rate,
            samples_per_sec: batch.len() as f64 / started.elapsed().as_secs_f64().max(1e-9),
            micro_batch,
            loss_scale,
            skipped,
            memory,
            memory_phases,
            enforcement,
        })
    }

    /// Report, with each step, every memory sample it took and the phase it took it at
    /// ([`StepRecord::memory_phases`]).
    pub fn record_memory_phases(&mut self) {
        self.tracker.record_phases();
    }

    /// Loss and accuracy over a split (or its first `eval_samples`), without gradients.
    ///
    /// Runs in micro-batches, at the training precision: a batch the training step fits
    /// in fits here too, without its gradients.
    pub async fn evaluate(&mut self, source: &DataSource, split: Split) -> Result<EvalRecord, TrainError> {
        self.evaluate_keeping(source, split, None).await
    }

    /// [`evaluate`](Self::evaluate), also handing back the logits (one row of `classes`
    /// per prediction, in the order the split streams them).
    pub async fn evaluate_logits(
        &mut self,
        source: &DataSource,
        split: Split,
    ) -> Result<(EvalRecord, Vec<f32>), TrainError> {
        let mut kept = Vec::new();
        let record = self.evaluate_keeping(source, split, Some(&mut kept)).await?;
        Ok((record, kept))
    }

    async fn evaluate_keeping(
        &mut self,
        source: &DataSource,
        split: Split,
        mut kept: Option<&mut Vec<f32>>,
    ) -> Result<EvalRecord, TrainError> {
        let model = match self.precision {
            // f16-pure's parameters are f16 already.
            Precision::F32 | Precision::F16Pure => self.model().valid(),
            Precision::F16 => precision::half_copy(&self.model().valid()),
        };
        let loss_fn = CrossEntropyLossConfig::new().init(&self.device);
        // Only the chunks the evaluation reads are fetched.
        let window = Window {
            prefetch: self.data_settings().prefetch,
            chunks: Some(plan::eval_chunks(&self.config, source)),
            ..Window::default()
        };
        let mut reader = BatchReader::new(source.stream(split, 0, window)?, source.sample_bytes());
        let mut loss_sum: Option<Tensor<1>> = None;
        let mut correct: Option<Tensor<1, Int>> = None;
        // Predictions made: one per image, one per token position of text.
        let (mut samples, mut predictions) = (0, 0);
        self.tracker.take_step_peak();
        let limit = self.config.eval_samples.unwrap_or(usize::MAX);
        while samples < limit {
            let Some(batch) = reader.next_batch(self.micro_batch.min(limit - samples)).await? else {
                break;
            };
            let (upload, targets) =
                tensors::micro_batch(&batch, 0..batch.len(), &self.input, self.precision, &self.device);
            let logits = model.forward(upload()).cast(Precision::F32.dtype());
            if let Some(kept) = kept.as_deref_mut() {
                let values = logits.clone().into_data_async().await.map_err(readback)?;
                kept.extend(
                    values
                        .try_into_vec::<f32>()
                        .map_err(|e| TrainError::Readback(e.to_string()))?,
                );
            }
            let [rows] = targets.dims();
            let hits = logits
                .clone()
                .argmax(1)
                .flatten::<1>(0, 1)
                .equal(targets.clone())
                .int()
                .sum();
            let loss = loss_fn.forward(logits, targets).mul_scalar(rows as f32);
            loss_sum = Some(loss_sum.map_or(loss.clone(), |sum| sum + loss));
            correct = Some(correct.map_or(hits.clone(), |sum| sum + hits));
            samples += batch.len();
            predictions += rows;
            self.tracker.sample();
        }
        let (Some(loss_sum), Some(correct)) = (loss_sum, correct) else {
            return Err(TrainError::Dataset(format!("the {split} split is empty")));
        };
        let loss_sum: f32 = loss_sum.into_scalar_async().await.map_err(readback)?;
        let correct: i64 = correct.into_scalar_async().await.map_err(readback)?;
        let memory = self.tracker.take_step_peak();
        self.run_peak = self.run_peak.max(memory);
        Ok(EvalRecord {
            step: self.step,
            epoch: self.epoch,
            split,
            samples,
            loss: loss_sum / predictions as f32,
            accuracy: correct as f32 / predictions as f32,
            perplexity: (loss_sum / predictions as f32).exp(),
            memory,
        })
    }

    /// Text the GPT writes now from `settings.prompt` (`None` for the image models).
    pub async fn sample_text(&self, source: &DataSource) -> Result<Option<TextSample>, TrainError> {
        let (Model::Gpt(model), Some(vocabulary)) = (self.model().valid(), &source.manifest().vocabulary)
        else {
            return Ok(None);
        };
        let settings = &self.config.sample;
        if settings.generation.tokens == 0 {
            return Ok(None);
        }
        self.generate_with(&model, vocabulary, &settings.prompt, &settings.generation)
            .await
            .map(Some)
    }

    /// Text the GPT writes now from `prompt`, as `settings` say (the page's Generate box).
    pub async fn generate_text(
        &self,
        source: &DataSource,
        prompt: &str,
        settings: &SampleSettings,
    ) -> Result<TextSample, TrainError> {
        let (Model::Gpt(model), Some(vocabulary)) = (self.model().valid(), &source.manifest().vocabulary)
        else {
            return Err(TrainError::Config(
                "only the GPT on a text dataset writes text".into(),
            ));
        };
        self.generate_with(&model, vocabulary, prompt, settings).await
    }

    async fn generate_with(
        &self,
        model: &crate::model::Gpt,
        vocabulary: &[String],
        prompt: &str,
        settings: &SampleSettings,
    ) -> Result<TextSample, TrainError> {
        let tokenizer = CharTokenizer::from_vocabulary(vocabulary).map_err(TrainError::Dataset)?;
        let encoded = tokenizer
            .encode(prompt)
            .filter(|p| !p.is_empty())
            .ok_or_else(|| {
                TrainError::Config(format!(
                    "the prompt {prompt:?} is empty or has characters outside the corpus"
                ))
            })?;
        let tokens = generate(model, &encoded, settings, &self.device)
            .await
            .map_err(readback)?;
        Ok(TextSample {
            step: self.step,
            prompt: prompt.to_string(),
            text: tokenizer.decode(&tokens),
        })
    }

    /// What the run starts with, as reported before step 1.
    pub(super) fn run_started(&self, source: &DataSource) -> RunStarted {
        let train_samples = source.sample_count(Split::Train);
        RunStarted {
            model: self.config.model.name().into(),
            parameters: self.model().num_params(),
            backend: self.backend.clone(),
            total_steps: self.config.total_steps(train_samples),
            steps_per_epoch: self.config.steps_per_epoch(train_samples),
            effective_batch: self.config.effective_batch,
            micro_batch: self.micro_batch,
            accumulation_steps: self.config.effective_batch / self.micro_batch,
            checkpointing: self.checkpointing(),
            updates_in_backward: self
                .micro_steps(1.0)
                .updates_in_backward(self.config.effective_batch),
            precision: self.precision,
            moments: self.config.moments.unwrap_or_default(),
            precision_note: self.precision_note.clone(),
            levers_reason: self.levers_reason.clone(),
            cap: self.config.cap,
            predicted_peak: self.planned.predicted_peak,
            predicted: self.planned.breakdown,
            calibrated_peak: self.planned.calibrated_peak,
            calibration: self.calibration.clone(),
            data: self.planned.data,
            tokens_per_sample: self.config.model.text_window().map(|w| w - 1),
            resumed_at: (self.step > 0).then_some(self.step),
        }
    }
}
