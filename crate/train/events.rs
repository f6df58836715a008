//! What a run reports, as it happens: the CLI writes these as JSON lines, the page plots them.

use serde::{Deserialize, Serialize};

use super::config::{Moments, Precision};
use super::probe::ProbeReport;
use crate::data::Split;
use crate::memory::{Breakdown, Calibration, DataSettings, Enforcement, MemorySample, PhaseSample};

#[derive(Clone, Debug, Serialize)]
pub struct RunStarted {
    pub model: String,
    pub parameters: usize,
    pub backend: String,
    pub total_steps: u64,
    pub steps_per_epoch: u64,
    pub effective_batch: usize,
    pub micro_batch: usize,
    pub accumulation_steps: usize,
    pub checkpointing: bool,
    /// Each step's update runs inside backward, segment by segment, one segment's
    /// gradients alive at a time: checkpointing in f32 at one pass a step.
    pub updates_in_backward: bool,
    /// The precision the run uses, which may differ from the one asked for.
    pub precision: Precision,
    /// How Adam keeps its moments.
    pub moments: Moments,
    /// Why the asked-for precision was not used.
    pub precision_note: Option<String>,
    /// Why the planner picked the precision, checkpointing and micro-batch it did, where
    /// the cap left them to it (`None` where they were fixed).
    pub levers_reason: Option<String>,
    pub cap: Option<u64>,
    /// The census's peak for the setting the run starts with (device plus data).
    pub predicted_peak: u64,
    pub predicted: Breakdown,
    /// The same from the probe steps' measured line (device plus data): what the pick
    /// rested on. `None` without calibration or a device pool.
    pub calibrated_peak: Option<u64>,
    pub calibration: Option<Calibration>,
    /// How the data pipeline runs: the planner's pick.
    pub data: DataSettings,
    /// Text: the positions a sample trains (the context), so tokens/s = samples/s times
    /// this. `None` for images.
    pub tokens_per_sample: Option<usize>,
    /// The step a resumed run goes on from (`None`: a fresh run).
    pub resumed_at: Option<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct StepRecord {
    pub step: u64,
    pub epoch: u64,
    pub samples_seen: u64,
    pub loss: f32,
    pub learning_rate: f64,
    pub samples_per_sec: f64,
    pub micro_batch: usize,
    /// f16 only: the loss scale this step used.
    pub loss_scale: Option<f32>,
    /// f16 only: the gradients overflowed, so the update was skipped.
    pub skipped: bool,
    /// The step's peak, sampled after each forward and backward pass and after the update.
    pub memory: MemorySample,
    /// Each of those samples with its phase, in order, when the run records them
    /// (`headroom train --memory-phases`); empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub memory_phases: Vec<PhaseSample>,
    /// The enforcer shrank the micro-batch after this step (also sent as its own event).
    #[serde(skip)]
    pub enforcement: Option<Enforcement>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EvalRecord {
    pub step: u64,
    pub epoch: u64,
    pub split: Split,
    pub samples: usize,
    /// Mean cross-entropy per prediction (nats; per token for text).
    #[serde(deserialize_with = "float_or_nan")]
    pub loss: f32,
    /// Right predictions: images classified, or next tokens guessed.
    #[serde(deserialize_with = "float_or_nan")]
    pub accuracy: f32,
    /// e^loss: how many symbols the model is choosing among, on average.
    #[serde(deserialize_with = "float_or_nan")]
    pub perplexity: f32,
    /// The peak while evaluating.
    pub memory: MemorySample,
}

/// JSON has no NaN or infinity: serde_json writes them as `null`, read back here as NaN
/// (a saved run whose loss overflowed still loads).
pub fn float_or_nan<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<f32, D::Error> {
    Ok(Option::<f32>::deserialize(deserializer)?.unwrap_or(f32::NAN))
}

/// [`float_or_nan`] for each of a list.
pub fn floats_or_nan<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<f32>, D::Error> {
    let values = Vec::<Option<f32>>::deserialize(deserializer)?;
    Ok(values.into_iter().map(|v| v.unwrap_or(f32::NAN)).collect())
}

#[derive(Clone, Debug, Serialize)]
pub struct RunSummary {
    pub steps: u64,
    pub samples_seen: u64,
    /// Time spent training, pauses excluded.
    pub seconds: f64,
    pub samples_per_sec: f64,
    pub final_loss: f32,
    pub eval: Option<EvalRecord>,
    /// The peak over the whole run, sampled where steps peak.
    pub peak_memory: MemorySample,
    /// The most the data pipeline held at any moment (its gauge's own peak, which sees
    /// the moments between samples).
    pub data_peak_bytes: u64,
    pub skipped_steps: u64,
    pub enforcements: Vec<Enforcement>,
    /// The micro-batch at the end of the run.
    pub micro_batch: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct TextSample {
    pub step: u64,
    pub prompt: String,
    pub text: String,
}

#[derive(Clone, Debug, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum TrainEvent {
    /// A probe step before step 1 started or ended; reported while the trainer is made
    /// (`Trainer::reporting_probes`), so always before `Started`.
    Probe(ProbeReport),
    Started(RunStarted),
    Step(StepRecord),
    Eval(EvalRecord),
    /// The enforcer changed the micro-batch.
    Enforced(Enforcement),
    /// Text the GPT generated (every `sample_every` steps and at the end).
    Sample(TextSample),
    Finished(RunSummary),
}
