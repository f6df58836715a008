//! The planner's view of a training config.

use burn::prelude::Device;

use super::config::{OptimizerKind, Precision, TrainConfig};
use super::error::TrainError;
use crate::data::{DataSource, Manifest, Split};
use crate::memory::planner::predict;
use crate::memory::{Candidate, Plan, PlanRequest, PoolModel};
use crate::model::InputShape;
use crate::units::format_bytes;

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

/// The precision a device can run: f16 only where it stores and computes half floats.
pub fn effective_precision(asked: Precision, device: &Device, backend: &str) -> (Precision, Option<String>) {
    if asked == Precision::F16 && !device.supports_dtype(Precision::F16.dtype()) {
        let note = format!("the {backend} device does not support f16 (shader-f16); training in f32");
        return (Precision::F32, Some(note));
    }
    (asked, None)
}

/// A config checked against its dataset and device, and the planner's answer for it.
#[derive(Clone, Debug)]
pub struct RunPlan {
    pub input: InputShape,
    pub plan: Plan,
    /// The precision the device runs, which may differ from the one asked for.
    pub precision: Precision,
    /// Why the asked-for precision was not used.
    pub precision_note: Option<String>,
    /// What the plan was made for.
    pub request: PlanRequest,
}

impl RunPlan {
    /// The setting the run starts with, or why none fits the cap, in words that say what
    /// would.
    pub fn pick(&self, config: &TrainConfig) -> Result<&Candidate, TrainError> {
        if let Some(chosen) = self.plan.chosen() {
            return Ok(chosen);
        }
        let smallest = self
            .plan
            .candidates
            .iter()
            .min_by_key(|c| c.peak())
            .expect("every effective batch has the divisor 1");
        let needed = self.plan.smallest_fitting_cap().unwrap_or(smallest.peak());
        let hint = match (self.precision, config.checkpointing) {
            (Precision::F32, false) => ", or try f16 storage and checkpointing",
            (Precision::F32, true) => ", or try f16 storage",
            (Precision::F16, false) => ", or try checkpointing",
            (Precision::F16, true) => ", or choose a smaller model",
        };
        Err(TrainError::CapTooSmall {
            cap: format_bytes(config.cap.unwrap_or(0) as usize),
            needed: format_bytes(needed as usize),
            micro_batch: smallest.micro_batch,
            hint: hint.into(),
        })
    }

    /// The census's device reservation for a probe step of `micro_batch`, accumulating two
    /// micro-batches or not, as the probe ran.
    pub fn probe_census(&self, micro_batch: usize, accumulating: bool, checkpointing: bool) -> u64 {
        let probe = PlanRequest {
            effective_batch: micro_batch * if accumulating { 2 } else { 1 },
            ..self.request.clone()
        };
        predict(&probe, micro_batch, self.precision, checkpointing).device()
    }
}

/// Validates `config` for `source` and plans it for `device`: what the trainer does before
/// step 1, and what the page previews before Start.
pub fn for_run(
    config: &TrainConfig,
    source: &DataSource,
    device: &Device,
    backend: &str,
) -> Result<RunPlan, TrainError> {
    let manifest = source.manifest();
    let input = input_shape(manifest)?;
    config.validate(&input).map_err(TrainError::Config)?;
    if manifest.count(Split::Train) == 0 {
        return Err(TrainError::Dataset("the training split is empty".into()));
    }
    let (precision, precision_note) = effective_precision(config.precision, device, backend);
    let request = request(
        config,
        &input,
        precision,
        source.bound_bytes() as u64,
        PoolModel::for_backend(backend),
    );
    Ok(RunPlan {
        input,
        plan: crate::memory::plan(&request, config.cap),
        precision,
        precision_note,
        request,
    })
}

/// The micro-batches a run may use: divisors of the effective batch, up to the one asked
/// for (all of them when the planner picks).
pub fn micro_batch_choices(config: &TrainConfig) -> Vec<usize> {
    let largest = config.micro_batch.unwrap_or(config.effective_batch);
    (1..=largest)
        .rev()
        .filter(|m| config.effective_batch % m == 0)
        .collect()
}

/// A plan request for `config` as it will run: its precision and checkpointing fixed, the
/// micro-batch open up to the one asked for. `data_bound_bytes` is what one data stream
/// may hold (`DataSource::bound_bytes`).
pub fn request(
    config: &TrainConfig,
    input: &InputShape,
    precision: Precision,
    data_bound_bytes: u64,
    pool: PoolModel,
) -> PlanRequest {
    PlanRequest {
        model: config.model.clone(),
        input: *input,
        effective_batch: config.effective_batch,
        optimizer: config.optimizer.kind,
        momentum: config.optimizer.kind == OptimizerKind::Sgd && config.optimizer.momentum > 0.0,
        // Training and evaluation streams can both hold chunks at once.
        data_bytes: if config.evaluate { 2 } else { 1 } * data_bound_bytes,
        pool,
        micro_batches: micro_batch_choices(config),
        precisions: vec![precision],
        checkpointing: vec![config.checkpointing],
    }
}
