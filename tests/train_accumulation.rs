//! Explicit gradient accumulation: micro-batch x steps = effective batch, same math.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::prelude::*;
use headroom::data::{Batch, Codec, DataSource, Split, StreamOptions};
use headroom::model::{InputShape, ModelConfig};
use headroom::train::step::{StepGradients, accumulate_gradients};
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

fn relative_difference(a: &[f32], b: &[f32]) -> f64 {
    let diff: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(x - y).powi(2))
        .sum::<f64>()
        .sqrt();
    let norm: f64 = b.iter().map(|y| f64::from(*y).powi(2)).sum::<f64>().sqrt();
    diff / norm.max(1e-30)
}

async fn one_batch(samples: usize) -> (Batch, InputShape) {
    let dataset = common::synthetic_dataset(samples, samples, Codec::Lz4);
    let source = DataSource::open(dataset.dir.to_str().unwrap(), StreamOptions::default())
        .await
        .unwrap();
    let mut reader = headroom::data::BatchReader::new(
        source.epoch(Split::Train, 0).unwrap(),
        source.manifest().sample_bytes(),
    );
    let batch = reader.next_batch(samples).await.unwrap().unwrap();
    let input = headroom::train::trainer::input_shape(source.manifest()).unwrap();
    (batch, input)
}

async fn accumulation_matches_one_pass(backend: BackendKind, model: ModelConfig) {
    let (batch, input) = one_batch(256).await;
    let device = backend.device().autodiff();
    let model = model.init(&input, &device);
    let whole = accumulate_gradients(&model, &batch, 256, Precision::F32, 1.0, &input, &device, None);
    let accumulated = accumulate_gradients(&model, &batch, 64, Precision::F32, 1.0, &input, &device, None);
    assert_same_gradients(backend, &model, whole, accumulated);
}

fn assert_same_gradients(
    backend: BackendKind,
    model: &headroom::model::Model,
    whole: StepGradients,
    accumulated: StepGradients,
) {
    let whole_loss: f32 = whole.loss.into_scalar();
    let accumulated_loss: f32 = accumulated.loss.into_scalar();
    assert!(
        (whole_loss - accumulated_loss).abs() <= 1e-5 * whole_loss.abs(),
        "{whole_loss} vs {accumulated_loss}"
    );
    let whole = collect(model, &whole.grads);
    let accumulated = collect(model, &accumulated.grads);
    assert_eq!(whole.len(), accumulated.len());
    for (i, (a, b)) in accumulated.iter().zip(&whole).enumerate() {
        let difference = relative_difference(a, b);
        assert!(
            difference <= 1e-5,
            "{backend:?} parameter {i}: relative difference {difference:e}"
        );
    }
}

#[tokio::test]
async fn four_micro_batches_of_64_give_the_gradients_of_one_batch_of_256_on_ndarray() {
    accumulation_matches_one_pass(
        BackendKind::Ndarray,
        ModelConfig::Mlp {
            hidden: vec![128, 64],
        },
    )
    .await;
    accumulation_matches_one_pass(BackendKind::Ndarray, ModelConfig::Cnn { channels: vec![4, 8] }).await;
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

#[tokio::test]
async fn checkpointing_recomputes_activations_without_changing_the_gradients() {
    let (batch, input) = one_batch(128).await;
    for config in [
        ModelConfig::Mlp { hidden: vec![64] },
        ModelConfig::Cnn { channels: vec![4, 8] },
    ] {
        let plain = BackendKind::Ndarray.device().autodiff();
        let checkpointed = BackendKind::Ndarray.device().autodiff().gradient_checkpointing();
        let model = config.init(&input, &plain);
        // The same weights on a device that checkpoints.
        let model_checkpointed = config
            .init(&input, &checkpointed)
            .load_record(model.clone().into_record());
        let reference = accumulate_gradients(&model, &batch, 64, Precision::F32, 1.0, &input, &plain, None);
        let recomputed = accumulate_gradients(
            &model_checkpointed,
            &batch,
            64,
            Precision::F32,
            1.0,
            &input,
            &checkpointed,
            None,
        );
        let reference = collect(&model, &reference.grads);
        let recomputed = collect(&model_checkpointed, &recomputed.grads);
        for (i, (a, b)) in recomputed.iter().zip(&reference).enumerate() {
            let difference = relative_difference(a, b);
            assert!(
                difference <= 1e-6,
                "{config:?} parameter {i}: relative difference {difference:e}"
            );
        }
    }
}
