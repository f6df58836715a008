//! Explicit gradient accumulation: micro-batch x steps = effective batch, same math.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::prelude::*;
use headroom::model::{GptShape, ModelConfig};
use headroom::train::step::{MicroSteps, StepGradients, accumulate_gradients};
use headroom::train::{BackendKind, Precision};

/// Every parameter's gradient, flattened, in the module's order.
struct CollectGrads<'a> {
    grads: &'a GradientsParams,
    out: Vec<Vec<f32>>,
}

impl ModuleVisitor for CollectGrads<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let grad = self
            .grads
            .get::<D>(param.id)
            .expect("every parameter has a gradient");
        self.out
            .push(grad.into_data().convert::<f32>().try_to_vec::<f32>().unwrap());
    }
}

fn collect(model: &headroom::model::Model, grads: &GradientsParams) -> Vec<Vec<f32>> {
    let mut visitor = CollectGrads {
        grads,
        out: Vec::new(),
    };
    model.visit(&mut visitor);
    visitor.out
}

fn norm(values: &[f32]) -> f64 {
    values.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>().sqrt()
}

/// `a - b` against `b`'s size, where that size is at least `floor`.
fn relative_difference(a: &[f32], b: &[f32], floor: f64) -> f64 {
    let diff: Vec<f32> = a.iter().zip(b).map(|(x, y)| x - y).collect();
    norm(&diff) / norm(b).max(floor)
}

async fn accumulation_matches_one_pass(backend: BackendKind, model: ModelConfig) {
    let (batch, input) = common::one_batch(256).await;
    let device = backend.device().autodiff();
    let model = model.init(&input, &device);
    let whole = accumulate_gradients(&model, &batch, MicroSteps::f32(256), &input, &device, None).await;
    let accumulated = accumulate_gradients(&model, &batch, MicroSteps::f32(64), &input, &device, None).await;
    assert_same_gradients(backend, &model, whole, accumulated, 1e-5);
}

fn assert_same_gradients(
    backend: BackendKind,
    model: &headroom::model::Model,
    whole: StepGradients,
    accumulated: StepGradients,
    tolerance: f64,
) {
    let whole_loss: f32 = whole.loss.into_scalar();
    let accumulated_loss: f32 = accumulated.loss.into_scalar();
    assert!(
        f64::from((whole_loss - accumulated_loss).abs()) <= tolerance * f64::from(whole_loss.abs()),
        "{whole_loss} vs {accumulated_loss}"
    );
    let whole = collect(model, &whole.grads);
    let accumulated = collect(model, &accumulated.grads);
    assert_eq!(whole.len(), accumulated.len());
    // Some gradients are zero in exact arithmetic, such as the GPT's key bias (softmax
    // ignores a shift shared by all of a query's scores): what is computed is rounding
    // noise (norm ~1e-11 where others are ~1e-1), which two correct summation orders do
    // not share. Such a gradient is judged against a thousandth of the largest one.
    let floor = 1e-3 * whole.iter().map(|g| norm(g)).fold(0.0, f64::max);
    for (i, (a, b)) in accumulated.iter().zip(&whole).enumerate() {
        let difference = relative_difference(a, b, floor);
        assert!(
            difference <= tolerance,
            "{backend:?} parameter {i}: relative difference {difference:e}"
        );
    }
}

#[tokio::test]
async fn four_micro_batches_of_64_give_the_gradients_of_one_batch_of_256_on_flex() {
    accumulation_matches_one_pass(
        BackendKind::Flex,
        ModelConfig::Mlp {
            hidden: vec![128, 64],
        },
    )
    .await;
    accumulation_matches_one_pass(BackendKind::Flex, ModelConfig::Cnn { channels: vec![4, 8] }).await;
}

#[tokio::test]
async fn four_micro_batches_of_64_give_the_gradients_of_one_batch_of_256_on_wgpu() {
    accumulation_matches_one_pass(
        BackendKind::Wgpu,
        ModelConfig::Mlp {
            hidden: vec![128, 64],
        },
    )
    .await;
    accumulation_matches_one_pass(BackendKind::Wgpu, ModelConfig::Cnn { channels: vec![4, 8] }).await;
}

/// Plain passes against recomputed segments, on the same weights and batch: the MLP, the
/// CNN, and the GPT (whose embeddings are recomputed with its first block).
async fn recomputation_matches_keeping(backend: BackendKind, precision: Precision, tolerance: f64) {
    let images = common::one_batch(128).await;
    let text = common::one_text_batch(128, 16).await;
    let device = backend.device().autodiff();
    let gpt = ModelConfig::Gpt(GptShape {
        layers: 2,
        heads: 2,
        width: 32,
        context: 16,
    });
    let mut dropped_any = false;
    for (config, (batch, input)) in [
        (ModelConfig::Mlp { hidden: vec![96, 64] }, &images),
        // Equal layers wider than the images: the planner has segment 1's input
        // recomputed from the batch instead of kept.
        (ModelConfig::Mlp { hidden: vec![512; 4] }, &images),
        (ModelConfig::Cnn { channels: vec![4, 8] }, &images),
        (gpt, &text),
    ] {
        let recomputed_inputs = headroom::memory::recomputed_inputs(&config.census(input).segments);
        dropped_any |= recomputed_inputs != 0;
        let model = config.init(input, &device);
        let steps = MicroSteps {
            precision,
            // Under f16 the scale must be divided out of every segment's gradients.
            loss_scale: if precision == Precision::F16 { 1024.0 } else { 1.0 },
            ..MicroSteps::f32(64)
        };
        let kept = accumulate_gradients(&model, batch, steps, input, &device, None).await;
        let recomputed = accumulate_gradients(
            &model,
            batch,
            MicroSteps {
                recompute: true,
                recomputed_inputs,
                ..steps
            },
            input,
            &device,
            None,
        )
        .await;
        assert_same_gradients(backend, &model, kept, recomputed, tolerance);
    }
    assert!(dropped_any, "no case recomputes an input it could keep");
}

#[tokio::test]
async fn recomputed_segments_give_the_gradients_of_kept_activations_on_flex() {
    recomputation_matches_keeping(BackendKind::Flex, Precision::F32, 1e-5).await;
}

#[tokio::test]
async fn recomputed_segments_give_the_gradients_of_kept_activations_on_wgpu() {
    recomputation_matches_keeping(BackendKind::Wgpu, Precision::F32, 1e-5).await;
    // f16 rounds each recomputed segment as the kept pass did: the same ops, the same
    // inputs.
    recomputation_matches_keeping(BackendKind::Wgpu, Precision::F16, 1e-3).await;
}

#[tokio::test]
async fn f16_gradients_recomputed_by_segments_come_close_to_f32_on_wgpu() {
    // Half precision rounds, but the master gradients must be those of the same loss: a
    // batch or a copy of the weights in the wrong type gives gradients of another one.
    let (batch, input) = common::one_batch(128).await;
    let device = BackendKind::Wgpu.device().autodiff();
    // Fixed weights: how far f16 rounding moves a gradient depends on them.
    device.seed(5);
    let model = ModelConfig::Mlp { hidden: vec![96, 64] }.init(&input, &device);
    let f32 = accumulate_gradients(&model, &batch, MicroSteps::f32(64), &input, &device, None).await;
    let f16 = MicroSteps {
        precision: Precision::F16,
        loss_scale: 1024.0,
        recompute: true,
        ..MicroSteps::f32(64)
    };
    let f16 = accumulate_gradients(&model, &batch, f16, &input, &device, None).await;
    // With these weights f16 rounding moves no gradient by more than 0.05% (other draws
    // moved a small bias's by up to 3%); a batch in the wrong type moves every gradient by
    // its own size.
    assert_same_gradients(BackendKind::Wgpu, &model, f32, f16, 1e-2);
}
