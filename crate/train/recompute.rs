//! Activation checkpointing by recomputation. The forward pass runs without autodiff and
//! keeps only each segment's input. Backward then visits the segments last to first: it
//! runs the segment again under autodiff from its saved input and pulls the upstream
//! gradient through it (a vector-Jacobian product: the gradient of `sum(output *
//! upstream)`). One segment's activations are alive at a time, for one extra forward pass.
//!
//! burn's own checkpointing (its balanced strategy) keeps the outputs of compute-bound ops,
//! which on these models are most of the memory.

use burn::optim::GradientsParams;
use burn::prelude::*;

use crate::model::Model;

/// The loss, as reported, and the objective backward starts from (the loss times the loss
/// scale, under f16).
pub struct Objective {
    pub loss: Tensor<1>,
    pub backward_from: Tensor<1>,
}

/// Backward through `model` from `objective(logits)`, one segment at a time.
///
/// `upload` puts the micro-batch's images on the device; it is called twice, so that not
/// even the input stays on the device between the forward pass and the first segment's
/// backward (the bytes are on the host anyway). `model`'s parameters must be autodiff
/// leaves. Each segment's parameter gradients go to `on_gradients` as soon as they exist
/// (the last segment's first), so the caller can sum them away; `on_peak` is called where
/// the activations peak. Returns the loss, detached.
pub fn backward_by_segments(
    model: &Model,
    upload: impl Fn() -> Tensor<4>,
    objective: impl FnOnce(Tensor<2>) -> Objective,
    mut on_gradients: impl FnMut(GradientsParams),
    mut on_peak: impl FnMut(),
) -> Tensor<1> {
    let count = model.segment_count();
    let mut inputs = segment_inputs(model, upload().flatten(1, 3).inner());
    on_peak();
    let mut objective = Some(objective);
    let mut upstream: Option<Tensor<2>> = None;
    let mut loss = None;
    for index in (0..count).rev() {
        // The first segment's input is the batch: uploaded again, and no gradient is
        // needed for it.
        let input = match inputs.pop() {
            Some(saved) => saved.autodiff().require_grad(),
            None => upload().flatten(1, 3),
        };
        let output = model.segment(index, input.clone());
        on_peak();
        let backward_from = match (upstream.take(), objective.take()) {
            (Some(upstream), _) => (output * upstream.autodiff()).sum(),
            (None, Some(objective)) => {
                let last = objective(output);
                loss = Some(last.loss.detach());
                last.backward_from
            }
            (None, None) => unreachable!("every segment but the last has an upstream gradient"),
        };
        let mut grads = backward_from.backward();
        upstream = input.grad_remove(&mut grads);
        on_gradients(GradientsParams::from_grads(grads, model));
    }
    loss.expect("a model has at least one segment")
}

/// The inputs of segments 1 and on, computed without autodiff: nothing else of the
/// forward pass stays alive.
fn segment_inputs(model: &Model, flat_images: Tensor<2>) -> Vec<Tensor<2>> {
    let constant = model.valid();
    let count = model.segment_count();
    let mut inputs = Vec::with_capacity(count);
    let mut x = flat_images;
    for index in 0..count - 1 {
        x = constant.segment(index, x);
        inputs.push(x.clone());
    }
    inputs
}
