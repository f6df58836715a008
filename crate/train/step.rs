//! One optimizer step's gradients, computed over micro-batches.

use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::{GradientsAccumulator, GradientsParams};
use burn::prelude::*;

use super::tensors;
use crate::data::Batch;
use crate::memory::MemoryTracker;
use crate::model::{InputShape, Model};

pub struct StepGradients {
    pub grads: GradientsParams,
    /// The mean loss over the whole batch, still on the device.
    pub loss: Tensor<1>,
}

/// Forward and backward over `batch` in micro-batches of at most `micro_batch` samples.
///
/// Each micro-batch's mean loss is weighted by its share of the batch (n_i / N) before
/// backward, so the accumulated gradients equal those of one pass over all N samples:
/// burn's accumulator only sums.
pub fn accumulate_gradients(
    model: &Model,
    batch: &Batch,
    micro_batch: usize,
    input: &InputShape,
    device: &Device,
    mut tracker: Option<&mut MemoryTracker>,
) -> StepGradients {
    let total = batch.len();
    let loss_fn = CrossEntropyLossConfig::new().init(device);
    let mut accumulator = GradientsAccumulator::<Model>::new();
    let mut loss_sum: Option<Tensor<1>> = None;
    for start in (0..total).step_by(micro_batch.max(1)) {
        let end = (start + micro_batch).min(total);
        let images = tensors::images(
            &batch.features[start * batch.sample_bytes..end * batch.sample_bytes],
            input,
            device,
        );
        let targets = tensors::targets(&batch.labels[start..end], device);
        let share = (end - start) as f32 / total as f32;
        let loss = loss_fn.forward(model.forward(images), targets).mul_scalar(share);
        let grads = GradientsParams::from_grads(loss.backward(), model);
        if let Some(tracker) = tracker.as_deref_mut() {
            tracker.sample();
        }
        accumulator.accumulate(model, grads);
        let loss = loss.detach();
        loss_sum = Some(match loss_sum {
            Some(sum) => sum + loss,
            None => loss,
        });
    }
    StepGradients {
        grads: accumulator.grads(),
        loss: loss_sum.expect("a batch holds at least one sample"),
    }
}
