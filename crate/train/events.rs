//! What a run reports, as it happens: the CLI writes these as JSON lines, the page plots them.

use serde::Serialize;

use crate::data::Split;
use crate::memory::MemorySample;

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
}

#[derive(Clone, Debug, Serialize)]
pub struct StepRecord {
    pub step: u64,
    pub epoch: u64,
    pub samples_seen: u64,
    pub loss: f32,
    pub learning_rate: f64,
    pub samples_per_sec: f64,
    /// The step's peak, sampled after each backward pass and after the update.
    pub memory: MemorySample,
}

#[derive(Clone, Debug, Serialize)]
pub struct EvalRecord {
    pub step: u64,
    pub epoch: u64,
    pub split: Split,
    pub samples: usize,
    pub loss: f32,
    pub accuracy: f32,
}

#[derive(Clone, Debug, Serialize)]
pub struct RunSummary {
    pub steps: u64,
    pub samples_seen: u64,
    pub seconds: f64,
    pub samples_per_sec: f64,
    pub final_loss: f32,
    pub eval: Option<EvalRecord>,
    /// The peak over the whole run.
    pub peak_memory: MemorySample,
}

#[derive(Clone, Debug, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum TrainEvent {
    Started(RunStarted),
    Step(StepRecord),
    Eval(EvalRecord),
    Finished(RunSummary),
}
