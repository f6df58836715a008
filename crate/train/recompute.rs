//! Activation checkpointing by recomputation. The forward pass runs without autodiff and
//! keeps only each segment's input. Backward then visits the segments last to first: it
//! runs the segment again under autodiff from its saved input and pulls the upstream
//! gradient through it (a vector-Jacobian product, seeded by [`vjp_seed`] so that no
//! tensor of the output's size is built for it). One segment's activations are alive at a
//! time, for one extra forward pass.
//!
//! burn's own checkpointing (its balanced strategy) keeps the outputs of compute-bound ops,
//! which on these models are most of the memory.

use burn::optim::GradientsParams;
use burn::prelude::*;

use crate::memory::{Phase, is_recomputed_input};
use crate::model::{Model, ModelInput};
use crate::ops::backend::{exclusive_pages, free_pages};
use crate::ops::vjp::vjp_seed;

/// With `HEADROOM_SEGMENT_SYNC` set (natively), waits for the device after each segment,
/// forward and backward: a measurement switch, off by default. cubecl returns a tensor's
/// memory to its pool only once the work that read it has run, so on a device far behind
/// the program a dropped activation stays reserved; on lavapipe a sync after each forward
/// segment freed the batch before the third layer's output was made, though the MLP's peak,
/// in backward, did not move (docs/benchmarks.md, "what checkpointing's peak is made of").
/// Where the GPU runs further behind, this says whether waiting lowers the reservation.
fn settle(device: &Device) {
    #[cfg(not(target_arch = "wasm32"))]
    {
        static SYNC: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        if *SYNC.get_or_init(|| std::env::var_os("HEADROOM_SEGMENT_SYNC").is_some()) {
            // A failed wait shows in the next operation that reads the device.
            let _ = device.sync();
        }
    }
    #[cfg(target_arch = "wasm32")]
    let _ = device;
}

/// Where each allocation has a page of its own (WebGPU: [`exclusive_pages`]), gives the
/// pages the segment just done freed back to the device before the next is recomputed.
/// Kept, they serve the next segment's tensors only where those fit them, and a tensor
/// takes any free page large enough: the 12x768 GPT reserved 1009 MiB at step 2 with them
/// kept, 1.6x what it had in use, against a census of 920 (docs/benchmarks.md, "the page's
/// pool under checkpointing"). Once the device has run the segment ([`free_pages`]): in the
/// page a page given back while queued work reads it is freed only after that work, beside
/// the pages made in its place. The sliced pools pack the next segment's tensors into the
/// same pages: nothing to release there.
async fn release_free_pages(device: &Device) {
    if exclusive_pages() {
        free_pages(device).await;
    }
}

/// The loss, as reported, and the objective backward starts from (the loss times the loss
/// scale, under f16).
pub struct Objective {
    pub loss: Tensor<1>,
    pub backward_from: Tensor<1>,
}

/// Backward through `model` from `objective(logits)`, one segment at a time.
///
/// `dropped` names the segments whose inputs are not kept but computed again from the
/// input below (bit `i` for segment `i`; see [`crate::memory::recomputed_inputs`]).
///
/// `upload` puts the micro-batch (images or tokens) on the device; it is called twice, so
/// that not even the input stays on the device between the forward pass and the first
/// segment's backward (the bytes are on the host anyway). The model's stem (the GPT's
/// embeddings) is recomputed with the first segment. `model`'s parameters must be autodiff
/// leaves. Each segment's parameter gradients go to `on_gradients` as soon as they exist
/// (the last segment's first), with the model, which it hands back: summed away, or the
/// segment's parameters updated with them ([`crate::train::step`]'s update in backward).
/// Segments below the one just yielded are unchanged by then, so the ones still to be
/// recomputed read the weights the forward pass read. `on_peak` is called where the
/// activations peak. Returns the model and the loss, detached.
pub async fn backward_by_segments(
    mut model: Model,
    dropped: u64,
    upload: impl Fn() -> ModelInput,
    objective: impl FnOnce(Tensor<2>) -> Objective,
    mut on_gradients: impl FnMut(Model, GradientsParams) -> Model,
    mut on_peak: impl FnMut(Phase),
) -> (Model, Tensor<1>) {
    let last = model.segment_count() - 1;
    let mut inputs = segment_inputs(&model, upload().inner(), dropped);
    on_peak(Phase::Forward);
    // Backward from `from`, handing on the parameters' gradients; returns the model and
    // the gradient of the segment's input (none for the batch).
    let mut backward = |model: Model, input: Tensor<2>, from: Tensor<1>| {
        let mut grads = from.backward();
        let upstream = input.grad_remove(&mut grads);
        let grads = GradientsParams::from_grads(grads, &model);
        (on_gradients(model, grads), upstream)
    };
    let input = segment_input(&model, &mut inputs, last, &upload);
    let output = model.segment(last, input.clone());
    on_peak(Phase::Recomputed { segment: last });
    let Objective { loss, backward_from } = objective(output);
    let (updated, mut upstream) = backward(model, input, backward_from);
    model = updated;
    release_free_pages(&loss.device()).await;
    for index in (0..last).rev() {
        let input = segment_input(&model, &mut inputs, index, &upload);
        let output = model.segment(index, input.clone());
        on_peak(Phase::Recomputed { segment: index });
        // Every input but the batch requires its gradient, so only segment 0 has none to
        // hand on.
        let Some(gradient) = upstream.take() else { break };
        let device = gradient.device();
        let (updated, next) = backward(model, input, vjp_seed(output, gradient.autodiff()));
        (model, upstream) = (updated, next);
        settle(&device);
        release_free_pages(&device).await;
    }
    (model, loss.detach())
}

/// Segment `index`'s input, as an autodiff leaf. The first segment's comes from the batch:
/// uploaded again for its turn and passed through the stem, whose parameters get their
/// gradients with the segment's. A dropped one is computed again from the nearest kept
/// input below it (or the batch), by segments not yet updated. The constant copy of the
/// model is made here, for this use alone: kept across segments, it would hold the weights
/// an update in backward has replaced.
fn segment_input(
    model: &Model,
    inputs: &mut [Option<Tensor<2>>],
    index: usize,
    upload: &impl Fn() -> ModelInput,
) -> Tensor<2> {
    if index == 0 {
        return model.stem(upload());
    }
    let input = inputs[index].take().unwrap_or_else(|| {
        let constant = model.valid();
        // From the nearest kept input below (the planner keeps the one just below).
        let (start, below) = (1..index)
            .rev()
            .find_map(|j| inputs[j].clone().map(|kept| (j, kept)))
            .unwrap_or_else(|| (0, constant.stem(upload().inner())));
        (start..index).fold(below, |x, k| constant.segment(k, x))
    });
    input.autodiff().require_grad()
}

/// The inputs backward keeps, indexed by segment, computed without autodiff: none for
/// segment 0 (the batch) or for a segment in `dropped`, nothing else of the forward pass
/// alive. A dropped input is let go as soon as the next segment has read it, so the forward
/// pass never holds more than the kept ones and the one in hand.
fn segment_inputs(model: &Model, batch: ModelInput, dropped: u64) -> Vec<Option<Tensor<2>>> {
    let constant = model.valid();
    let count = model.segment_count();
    let mut inputs = Vec::with_capacity(count);
    inputs.push(None);
    let mut x = constant.stem(batch);
    for index in 0..count - 1 {
        x = constant.segment(index, x);
        settle(&x.device());
        inputs.push((!is_recomputed_input(dropped, index + 1)).then(|| x.clone()));
    }
    inputs
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use crate::model::{GptShape, InputKind, InputShape, ModelConfig};

    /// The planner counts, under checkpointing, one segment's gradients beside their sum, by
    /// the census's share of parameters per segment: each segment's backward must yield
    /// the gradients of exactly those (the stem's with segment 0).
    #[tokio::test]
    async fn each_segment_yields_the_gradients_the_census_gives_it() {
        let images = InputShape::images(8, 8, 3);
        let tokens = InputShape::tokens(7);
        let gpt = GptShape {
            layers: 3,
            heads: 2,
            width: 8,
            context: 5,
        };
        let device = Device::flex().autodiff();
        for (config, input) in [
            (ModelConfig::Mlp { hidden: vec![6, 4] }, images),
            (ModelConfig::Cnn { channels: vec![2, 3] }, images),
            (ModelConfig::Gpt(gpt), tokens),
        ] {
            let model = config.init(&input, &device);
            let batch = || match input.kind {
                InputKind::Images => ModelInput::Images(Tensor::ones([2, 1, 8, 8], &device)),
                InputKind::Tokens => {
                    ModelInput::Tokens(Tensor::from_ints([[1, 2, 3, 4, 5], [6, 5, 4, 3, 2]], &device))
                }
            };
            let mut yielded = Vec::new();
            backward_by_segments(
                model,
                0,
                batch,
                |logits| {
                    let loss = logits.sum();
                    Objective {
                        loss: loss.clone(),
                        backward_from: loss,
                    }
                },
                |model, grads| {
                    yielded.push(grads.len());
                    model
                },
                |_| {},
            )
            .await;
            yielded.reverse();
            let census: Vec<usize> = config
                .census(&input)
                .segments
                .iter()
                .map(|s| s.parameters)
                .collect();
            assert_eq!(yielded, census, "{config:?}");
        }
    }
}
