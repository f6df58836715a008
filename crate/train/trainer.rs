use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::ModuleOptimizer;
use burn::prelude::*;
use web_time::Instant;

use super::config::TrainConfig;
use super::error::TrainError;
use super::events::{EvalRecord, RunStarted, RunSummary, StepRecord, TrainEvent};
use super::schedule::Schedule;
use super::step::accumulate_gradients;
use super::{optimizer, tensors};
use crate::data::{Batch, BatchReader, DataSource, Manifest, Split};
use crate::memory::{MemorySample, MemoryTracker};
use crate::model::{InputShape, Model};

const EVAL_BATCH: usize = 1000;

fn readback(error: impl std::fmt::Display) -> TrainError {
    TrainError::Readback(error.to_string())
}

/// What the trainer needs to know about a dataset: images of one channel, u8 labels.
pub fn input_shape(manifest: &Manifest) -> Result<InputShape, TrainError> {
    match manifest.sample_shape[..] {
        [height, width] => Ok(InputShape {
            height,
            width,
            classes: manifest.class_names.len(),
        }),
        ref other => Err(TrainError::Dataset(format!(
            "samples of shape {other:?}; expected [height, width] images"
        ))),
    }
}

pub struct Trainer {
    config: TrainConfig,
    input: InputShape,
    /// Evaluation runs here, without autodiff.
    device: Device,
    train_device: Device,
    backend: String,
    model: Option<Model>,
    optimizer: ModuleOptimizer,
    schedule: Schedule,
    tracker: MemoryTracker,
    step: u64,
    epoch: u64,
    samples_seen: u64,
    run_peak: MemorySample,
}

impl Trainer {
    pub fn new(
        config: TrainConfig,
        source: &DataSource,
        device: Device,
        backend: &str,
    ) -> Result<Self, TrainError> {
        let manifest = source.manifest();
        let input = input_shape(manifest)?;
        config.validate(&input).map_err(TrainError::Config)?;
        let train_samples = manifest.count(Split::Train);
        if train_samples == 0 {
            return Err(TrainError::Dataset("the training split is empty".into()));
        }
        let schedule = Schedule {
            base_lr: config.optimizer.learning_rate,
            warmup_steps: config.optimizer.warmup_steps,
            total_steps: config.total_steps(train_samples),
            final_fraction: config.optimizer.final_lr_fraction,
        };
        let train_device = if config.checkpointing {
            device.clone().autodiff().gradient_checkpointing()
        } else {
            device.clone().autodiff()
        };
        // Seeded so the same config starts from the same weights.
        train_device.seed(config.seed);
        let model = config.model.init(&input, &train_device);
        Ok(Trainer {
            optimizer: optimizer::build(&config.optimizer),
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
        })
    }

    pub fn model(&self) -> &Model {
        self.model
            .as_ref()
            .expect("the model is only taken during a step")
    }

    /// One optimizer step over `batch` (at most one effective batch).
    pub async fn train_step(&mut self, batch: &Batch) -> Result<StepRecord, TrainError> {
        let started = Instant::now();
        let learning_rate = self.schedule.lr_at(self.step);
        let model = self.model.take().expect("the model is only taken during a step");
        let step = accumulate_gradients(
            &model,
            batch,
            self.config.micro_batch,
            &self.input,
            &self.train_device,
            Some(&mut self.tracker),
        );
        self.model = Some(self.optimizer.step(learning_rate, model, step.grads));
        let loss: f32 = step.loss.into_scalar_async().await.map_err(readback)?;
        if !loss.is_finite() {
            return Err(TrainError::Diverged {
                step: self.step,
                loss,
            });
        }
        self.tracker.sample();
        let memory = self.tracker.take_step_peak();
        self.run_peak = self.run_peak.max(memory);
        self.step += 1;
        self.samples_seen += batch.len() as u64;
        Ok(StepRecord {
            step: self.step,
            epoch: self.epoch,
            samples_seen: self.samples_seen,
            loss,
            learning_rate,
            samples_per_sec: batch.len() as f64 / started.elapsed().as_secs_f64().max(1e-9),
            memory,
        })
    }

    /// Loss and accuracy over a whole split, without gradients.
    pub async fn evaluate(&self, source: &DataSource, split: Split) -> Result<EvalRecord, TrainError> {
        let model = self.model().valid();
        let loss_fn = CrossEntropyLossConfig::new().init(&self.device);
        let mut reader = BatchReader::new(source.epoch(split, 0)?, source.manifest().sample_bytes());
        let mut loss_sum: Option<Tensor<1>> = None;
        let mut correct: Option<Tensor<1, Int>> = None;
        let mut samples = 0;
        while let Some(batch) = reader.next_batch(EVAL_BATCH).await? {
            let images = tensors::images(&batch.features, &self.input, &self.device);
            let targets = tensors::targets(&batch.labels, &self.device);
            let logits = model.forward(images);
            let hits = logits
                .clone()
                .argmax(1)
                .flatten::<1>(0, 1)
                .equal(targets.clone())
                .int()
                .sum();
            let loss = loss_fn.forward(logits, targets).mul_scalar(batch.len() as f32);
            loss_sum = Some(loss_sum.map_or(loss.clone(), |sum| sum + loss));
            correct = Some(correct.map_or(hits.clone(), |sum| sum + hits));
            samples += batch.len();
        }
        let (Some(loss_sum), Some(correct)) = (loss_sum, correct) else {
            return Err(TrainError::Dataset(format!("the {split} split is empty")));
        };
        let loss_sum: f32 = loss_sum.into_scalar_async().await.map_err(readback)?;
        let correct: i64 = correct.into_scalar_async().await.map_err(readback)?;
        Ok(EvalRecord {
            step: self.step,
            epoch: self.epoch,
            split,
            samples,
            loss: loss_sum / samples as f32,
            accuracy: correct as f32 / samples as f32,
        })
    }

    /// Evaluates on the test split and reports it, unless the split is empty or this step
    /// was already evaluated.
    async fn evaluate_once(
        &self,
        source: &DataSource,
        last_eval: &mut Option<EvalRecord>,
        on_event: &mut impl FnMut(&TrainEvent),
    ) -> Result<(), TrainError> {
        let evaluated = last_eval.as_ref().is_some_and(|e| e.step == self.step);
        if evaluated || source.manifest().count(Split::Test) == 0 {
            return Ok(());
        }
        let eval = self.evaluate(source, Split::Test).await?;
        on_event(&TrainEvent::Eval(eval.clone()));
        *last_eval = Some(eval);
        Ok(())
    }

    /// Trains for the configured duration, evaluating on the test split as configured.
    pub async fn run(
        &mut self,
        source: &DataSource,
        mut on_event: impl FnMut(&TrainEvent),
    ) -> Result<RunSummary, TrainError> {
        let started = Instant::now();
        let train_samples = source.manifest().count(Split::Train);
        let total_steps = self.config.total_steps(train_samples);
        on_event(&TrainEvent::Started(RunStarted {
            model: self.config.model.name().into(),
            parameters: self.model().num_params(),
            backend: self.backend.clone(),
            total_steps,
            steps_per_epoch: self.config.steps_per_epoch(train_samples),
            effective_batch: self.config.effective_batch,
            micro_batch: self.config.micro_batch,
            accumulation_steps: self.config.accumulation_steps(),
            checkpointing: self.config.checkpointing,
        }));
        let mut last_loss = f32::NAN;
        let mut last_eval: Option<EvalRecord> = None;
        let every = self.config.eval_every;
        while self.step < total_steps {
            let mut reader = BatchReader::new(
                source.epoch(Split::Train, self.epoch)?,
                source.manifest().sample_bytes(),
            );
            while self.step < total_steps {
                let Some(batch) = reader.next_batch(self.config.effective_batch).await? else {
                    break;
                };
                let record = self.train_step(&batch).await?;
                last_loss = record.loss;
                on_event(&TrainEvent::Step(record));
                if every > 0 && self.step % every == 0 {
                    self.evaluate_once(source, &mut last_eval, &mut on_event).await?;
                }
            }
            if every == 0 {
                self.evaluate_once(source, &mut last_eval, &mut on_event).await?;
            }
            self.epoch += 1;
        }
        self.evaluate_once(source, &mut last_eval, &mut on_event).await?;
        let seconds = started.elapsed().as_secs_f64();
        let summary = RunSummary {
            steps: self.step,
            samples_seen: self.samples_seen,
            seconds,
            samples_per_sec: self.samples_seen as f64 / seconds.max(1e-9),
            final_loss: last_loss,
            eval: last_eval,
            peak_memory: self.run_peak,
        };
        on_event(&TrainEvent::Finished(summary.clone()));
        Ok(summary)
    }
}
