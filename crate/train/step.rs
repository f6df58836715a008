//! One optimizer step's gradients, computed over micro-batches.

use burn::module::{ModuleVisitor, Param};
use burn::nn::loss::{CrossEntropyLoss, CrossEntropyLossConfig};
use burn::optim::{GradientsAccumulator, GradientsParams};
use burn::prelude::*;

use super::config::Precision;
use super::recompute::{Objective, backward_by_segments};
use super::{precision, tensors};
use crate::data::Batch;
use crate::memory::{MemoryTracker, Phase};
use crate::model::{InputShape, Model};
use crate::ops::backend::{exclusive_pages, lasting};

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
    /// Whether a step over `samples` updates each segment's parameters inside backward
    /// ([`update_in_backward`]): under checkpointing, in one pass (nothing to accumulate)
    /// and in f32 (no loss scale whose overflow would have to void updates already made).
    pub fn updates_in_backward(&self, samples: usize) -> bool {
        Self::levers_update_in_backward(self.recompute, self.precision) && self.micro_batch >= samples
    }

    /// Whether these levers update inside backward at one pass a step.
    pub fn levers_update_in_backward(checkpointing: bool, precision: Precision) -> bool {
        checkpointing && precision == Precision::F32
    }

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
pub async fn accumulate_gradients(
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
        let objective = |logits| objective(&loss_fn, logits, targets, share, steps.loss_scale);
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
            let summed = |forward: Model, grads| {
                sum_into(&mut accumulator, model, to_master(grads), start == 0, device);
                forward
            };
            // The clone shares the weights: nothing is copied.
            let (_, loss) = backward_by_segments(
                forward_model.clone(),
                steps.recomputed_inputs,
                &upload,
                objective,
                summed,
                &mut sample,
            )
            .await;
            loss
        } else {
            let Objective { loss, backward_from } = objective(forward_model.forward(upload()));
            sample(Phase::Forward);
            let grads = GradientsParams::from_grads(backward_from.backward(), forward_model);
            sum_into(&mut accumulator, model, to_master(grads), start == 0, device);
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

/// Adds `grads` to the step's sums, which outlive the micro-batch's activations: see
/// [`lasting`]. A sum is added to in place, so only the first micro-batch's gradients,
/// made during backward and taken over as the sums, are copied there first.
fn sum_into(
    accumulator: &mut GradientsAccumulator<Model>,
    model: &Model,
    grads: GradientsParams,
    first: bool,
    device: &Device,
) {
    lasting(device, (accumulator, grads), |(accumulator, grads)| {
        let grads = match first && exclusive_pages() {
            true => copied(model, grads),
            false => grads,
        };
        accumulator.accumulate(model, grads)
    });
}

/// `grads` on new memory: each a fresh zero tensor that the gradient is added to in place.
fn copied(model: &Model, mut grads: GradientsParams) -> GradientsParams {
    struct Copy<'a>(&'a mut GradientsParams, GradientsParams);
    impl ModuleVisitor for Copy<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if let Some(grad) = self.0.remove::<D>(param.id) {
                self.1.register(param.id, grad.zeros_like().add(grad));
            }
        }
    }
    let mut copy = Copy(&mut grads, GradientsParams::new());
    model.visit(&mut copy);
    copy.1
}

/// The loss of `logits` against `targets`, weighted by `share` of the batch, and what
/// backward starts from (times `loss_scale`). The loss and its softmax stay in f32: they
/// need the range.
fn objective(
    loss_fn: &CrossEntropyLoss,
    logits: Tensor<2>,
    targets: Tensor<1, Int>,
    share: f32,
    loss_scale: f32,
) -> Objective {
    let loss = loss_fn
        .forward(logits.cast(Precision::F32.dtype()), targets)
        .mul_scalar(share);
    let backward_from = if loss_scale == 1.0 {
        loss.clone()
    } else {
        loss.clone().mul_scalar(loss_scale)
    };
    Objective { loss, backward_from }
}

/// One step over `batch` whose update runs inside backward: each segment's parameters are
/// handed to `update` with their gradients as soon as the segment's backward yields them,
/// so one segment's gradients are alive at a time and never a whole set (the census counts
/// so). Only where [`MicroSteps::updates_in_backward`] holds. The gradients are those
/// [`accumulate_gradients`] gives and each parameter's update reads only its own, so the
/// model comes out as the two-phase step's, bit for bit (tested). Returns the updated
/// model and the loss, still on the device.
pub async fn update_in_backward(
    model: Model,
    batch: &Batch,
    steps: MicroSteps,
    input: &InputShape,
    device: &Device,
    mut tracker: Option<&mut MemoryTracker>,
    update: impl FnMut(Model, GradientsParams) -> Model,
) -> (Model, Tensor<1>) {
    debug_assert!(steps.updates_in_backward(batch.len()));
    let loss_fn = CrossEntropyLossConfig::new().init(device);
    let (upload, targets) = tensors::micro_batch(batch, 0..batch.len(), input, steps.precision, device);
    let mut sample = |phase| {
        if let Some(tracker) = tracker.as_deref_mut() {
            tracker.sample_at(phase);
        }
    };
    let objective = |logits| objective(&loss_fn, logits, targets, 1.0, steps.loss_scale);
    let (model, loss) = backward_by_segments(
        model,
        steps.recomputed_inputs,
        &upload,
        objective,
        update,
        &mut sample,
    )
    .await;
    sample(Phase::Backward);
    (model, loss)
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use crate::memory::recomputed_inputs;
    use crate::model::{GptShape, InputKind, ModelConfig};
    use crate::train::config::{Moments, OptimizerConfig, OptimizerKind};
    use crate::train::optimizer::Optimizer;
    use crate::train::optimizer::tests::parameters;

    /// Bytes spread over 0..modulo, another run of them for every `phase`.
    fn spread(count: usize, modulo: usize, phase: usize) -> Vec<u8> {
        (0..count)
            .map(|i| ((i * 7 + phase * 3 + i / 5) % modulo) as u8)
            .collect()
    }

    /// Three steps of the MLP and of a 3-block GPT (its middle input recomputed), under
    /// checkpointing in one pass, with f32 and 8-bit moments, norm clipping and weight
    /// decay: the update made inside backward leaves every parameter and loss on the bits
    /// of the two-phase step (gradients, then the update). An update that changed a
    /// segment before the segments below it were recomputed, or that read another
    /// segment's gradients, would not.
    #[tokio::test]
    async fn the_update_in_backward_equals_the_two_phase_step_bit_for_bit() {
        let device = Device::flex().autodiff();
        let images = InputShape::images(8, 8, 4);
        let tokens = InputShape::tokens(7);
        let gpt = ModelConfig::Gpt(GptShape {
            layers: 3,
            heads: 2,
            width: 8,
            context: 6,
        });
        let optimizer = OptimizerConfig {
            kind: OptimizerKind::AdamW,
            learning_rate: 1e-2,
            weight_decay: 1e-2,
            clip_norm: Some(0.5),
            ..OptimizerConfig::default()
        };
        for (config, input) in [(ModelConfig::Mlp { hidden: vec![12, 6] }, images), (gpt, tokens)] {
            let census = config.census(&input);
            let recomputed = recomputed_inputs(&census.segments);
            let sample_bytes = config.text_window().unwrap_or(64);
            let batch = |step: usize| Batch {
                labels: match input.kind {
                    InputKind::Images => spread(6, 4, step),
                    InputKind::Tokens => Vec::new(),
                },
                features: spread(6 * sample_bytes, input.classes.min(256), step),
                sample_bytes,
            };
            let steps = MicroSteps {
                recompute: true,
                recomputed_inputs: recomputed,
                ..MicroSteps::f32(6)
            };
            assert!(steps.updates_in_backward(6));
            for moments in [Moments::F32, Moments::Q8] {
                let start = config.init(&input, &device);
                let (mut two_phase, mut fused) = (start.clone(), start.clone());
                let mut theirs = Optimizer::new(&optimizer, moments);
                let mut ours = Optimizer::new(&optimizer, moments);
                for step in 0..3 {
                    let batch = batch(step);
                    let gradients =
                        accumulate_gradients(&two_phase, &batch, steps, &input, &device, None).await;
                    two_phase = theirs.step(1e-2, two_phase, gradients.grads);
                    let update = |model, grads| ours.step(1e-2, model, grads);
                    let (model, loss) =
                        update_in_backward(fused, &batch, steps, &input, &device, None, update).await;
                    fused = model;
                    let bits = |loss: Tensor<1>| loss.into_scalar::<f32>().to_bits();
                    assert_eq!(
                        bits(loss),
                        bits(gradients.loss),
                        "{config:?} {moments:?} step {step}"
                    );
                    assert_eq!(
                        parameters(&fused),
                        parameters(&two_phase),
                        "{config:?} {moments:?} step {step}"
                    );
                }
                assert_ne!(parameters(&fused), parameters(&start), "the steps moved nothing");
            }
        }
    }
}
