//! One optimizer step's gradients, computed over micro-batches.

use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::{GradientsAccumulator, GradientsParams};
use burn::prelude::*;

use super::config::Precision;
use super::recompute::{Objective, backward_by_segments};
use super::{precision, tensors};
use crate::data::Batch;
use crate::memory::{MemoryTracker, Phase};
use crate::model::{InputShape, Model};

pub struct StepGradients {
    pub grads: GradientsParams,
    /// The mean loss over the whole batch, still on the device.
    pub loss: Tensor<1>,
}

/// How a step's forward and backward passes run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MicroSteps {
    /// Samples per forward/backward pass.
    pub micro_batch: usize,
    pub precision: Precision,
    /// The factor the loss is multiplied by before backward (f16), divided out after.
    pub loss_scale: f32,
    /// Keep only each segment's input and recompute the segment in backward.
    pub recompute: bool,
    /// With `recompute`: the segments whose inputs are not kept either, but computed
    /// again from the input below (bit `i` for segment `i`; see
    /// [`crate::memory::recomputed_inputs`]).
    pub recomputed_inputs: u64,
}

impl MicroSteps {
    /// Plain f32 passes of `micro_batch` samples.
    pub fn f32(micro_batch: usize) -> Self {
        MicroSteps {
            micro_batch,
            precision: Precision::F32,
            loss_scale: 1.0,
            recompute: false,
            recomputed_inputs: 0,
        }
    }
}

/// Forward and backward over `batch` in micro-batches of at most `steps.micro_batch`
/// samples.
///
/// Each micro-batch's mean loss is weighted by its share of the batch (n_i / N) before
/// backward, so the accumulated gradients equal those of one pass over all N samples:
/// burn's accumulator only sums.
///
/// Under f16 the forward and backward passes run on a half copy of `model` with the loss
/// multiplied by the loss scale; the gradients come back as f32, unscaled, under the master
/// weights' ids.
///
/// `tracker` is sampled where the activations peak: after each forward pass (each
/// recomputed segment's, with recomputation) and after each backward pass.
pub fn accumulate_gradients(
    model: &Model,
    batch: &Batch,
    steps: MicroSteps,
    input: &InputShape,
    device: &Device,
    mut tracker: Option<&mut MemoryTracker>,
) -> StepGradients {
    let total = batch.len();
    // f16-pure's model is f16 already, and its own parameters take the gradients.
    let half = (steps.precision == Precision::F16).then(|| precision::half_copy(model));
    let forward_model = half.as_ref().unwrap_or(model);
    let loss_fn = CrossEntropyLossConfig::new().init(device);
    let mut accumulator = GradientsAccumulator::<Model>::new();
    let mut loss_sum: Option<Tensor<1>> = None;
    for start in (0..total).step_by(steps.micro_batch.max(1)) {
        let end = (start + steps.micro_batch).min(total);
        let (upload, targets) = tensors::micro_batch(batch, start..end, input, steps.precision, device);
        let share = (end - start) as f32 / total as f32;
        let objective = |logits: Tensor<2>| {
            // The loss and its softmax stay in f32: they need the range.
            let loss = loss_fn
                .forward(logits.cast(Precision::F32.dtype()), targets)
                .mul_scalar(share);
            let backward_from = if steps.loss_scale == 1.0 {
                loss.clone()
            } else {
                loss.clone().mul_scalar(steps.loss_scale)
            };
            Objective { loss, backward_from }
        };
        // f16-pure keeps its gradients in f16, summed in f16 (the optimizer unscales each
        // in its update; an overflowed sum skips the step as an overflowed gradient does).
        let to_master = |grads: GradientsParams| match steps.precision {
            Precision::F32 | Precision::F16Pure => grads,
            Precision::F16 => precision::to_master(model, grads, steps.loss_scale),
        };
        let mut sample = |phase| {
            if let Some(tracker) = tracker.as_deref_mut() {
                tracker.sample_at(phase);
            }
        };
        let loss = if steps.recompute {
            backward_by_segments(
                forward_model,
                steps.recomputed_inputs,
                &upload,
                objective,
                |grads| accumulator.accumulate(model, to_master(grads)),
                &mut sample,
            )
        } else {
            let Objective { loss, backward_from } = objective(forward_model.forward(upload()));
            sample(Phase::Forward);
            let grads = GradientsParams::from_grads(backward_from.backward(), forward_model);
            accumulator.accumulate(model, to_master(grads));
            loss.detach()
        };
        sample(Phase::Backward);
        loss_sum = Some(match loss_sum {
            Some(sum) => sum + loss,
            None => loss,
        });
    }
    StepGradients {
        grads: accumulator.grads(),
        // An empty batch has no loss to speak of: zero, and no gradients.
        loss: loss_sum.unwrap_or_else(|| Tensor::zeros([1], device)),
    }
}
