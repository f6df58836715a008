//! One optimizer step's gradients, computed over micro-batches.

use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::{GradientsAccumulator, GradientsParams};
use burn::prelude::*;

use super::config::Precision;
use super::{precision, tensors};
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
///
/// Under f16 the forward and backward passes run on a half copy of `model` with the loss
/// multiplied by `loss_scale`; the gradients come back as f32, unscaled, under the master
/// weights' ids.
#[allow(clippy::too_many_arguments)]
pub fn accumulate_gradients(
    model: &Model,
    batch: &Batch,
    micro_batch: usize,
    precision: Precision,
    loss_scale: f32,
    input: &InputShape,
    device: &Device,
    mut tracker: Option<&mut MemoryTracker>,
) -> StepGradients {
    let total = batch.len();
    let half = (precision == Precision::F16).then(|| precision::half_copy(model));
    let loss_fn = CrossEntropyLossConfig::new().init(device);
    let mut accumulator = GradientsAccumulator::<Model>::new();
    let mut loss_sum: Option<Tensor<1>> = None;
    for start in (0..total).step_by(micro_batch.max(1)) {
        let end = (start + micro_batch).min(total);
        let images = tensors::images(
            &batch.features[start * batch.sample_bytes..end * batch.sample_bytes],
            input,
            precision,
            device,
        );
        let targets = tensors::targets(&batch.labels[start..end], device);
        let share = (end - start) as f32 / total as f32;
        let (loss, grads) = match &half {
            None => {
                let loss = loss_fn.forward(model.forward(images), targets).mul_scalar(share);
                let grads = GradientsParams::from_grads(loss.backward(), model);
                (loss, grads)
            }
            Some(half) => {
                // The loss and its softmax stay in f32: they need the range.
                let logits = half
                    .forward(images.cast(precision.dtype()))
                    .cast(Precision::F32.dtype());
                let loss = loss_fn.forward(logits, targets).mul_scalar(share);
                let grads = GradientsParams::from_grads(loss.clone().mul_scalar(loss_scale).backward(), half);
                (loss, precision::to_master(model, grads, loss_scale))
            }
        };
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
