//! The planner's view of a training config.

use super::config::{OptimizerKind, Precision, TrainConfig};
use crate::memory::{PlanRequest, PoolModel};
use crate::model::InputShape;

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
