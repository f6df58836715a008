//! wgpu (Mesa's lavapipe here) against flex, the CPU backend (and ndarray against flex in
//! builds with the `ndarray` feature), started from the same weights and fed the same
//! batches, give the same losses for 20 steps: a kernel that computed garbage without an
//! error would show here, and so would the GPU's conv (burn's conv2d with the bias through
//! a matmul, where flex's conv2d adds its bias itself; ndarray runs the im2col conv). Each
//! backend draws its initial weights from its own generator, so the flex run's step-0
//! checkpoint starts both.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use headroom::data::{Codec, DataSource};
use headroom::model::ModelConfig;
use headroom::train::saved_run;
use headroom::train::{BackendKind, Duration, Progress, TrainConfig, TrainEvent, Trainer};

const STEPS: u64 = 20;
/// Float sums run in another order on each backend: agreement to 1e-3 of the loss, not
/// bit for bit.
const TOLERANCE: f32 = 1e-3;

async fn losses(mut trainer: Trainer, mut progress: Progress, source: &DataSource) -> Vec<f32> {
    let mut losses = Vec::new();
    while progress.summary().is_none() {
        for event in progress.advance(&mut trainer, source).await.unwrap() {
            if let TrainEvent::Step(step) = event {
                losses.push(step.loss);
            }
        }
    }
    losses
}

async fn agree(model: ModelConfig, other: BackendKind) {
    let dataset = common::synthetic_dataset(2000, 250, Codec::Lz4);
    let mut config = TrainConfig {
        model,
        effective_batch: 64,
        micro_batch: Some(32),
        duration: Duration::Steps(STEPS),
        evaluate: false,
        calibrate: false,
        seed: 9,
        ..TrainConfig::default()
    };
    config.optimizer.learning_rate = 3e-3;
    let source = DataSource::open(dataset.dir.to_str().unwrap(), config.stream_options())
        .await
        .unwrap();
    let cpu = BackendKind::Flex;
    let trainer = Trainer::new(config, &source, cpu.device(), cpu.name())
        .await
        .unwrap();
    let start = saved_run::capture(&trainer, &Progress::default(), &source)
        .await
        .unwrap();
    let (on_other, other_progress) =
        saved_run::restore(&start, |_| {}, &source, other.device(), other.name())
            .await
            .unwrap();
    let other_losses = losses(on_other, other_progress, &source).await;
    let cpu_losses = losses(trainer, Progress::default(), &source).await;
    assert_eq!(cpu_losses.len() as u64, STEPS);
    assert_eq!(other_losses.len() as u64, STEPS);
    let name = other.name();
    for (step, (cpu, theirs)) in cpu_losses.iter().zip(&other_losses).enumerate() {
        assert!(
            (cpu - theirs).abs() <= TOLERANCE * cpu.abs().max(1.0),
            "step {}: flex {cpu}, {name} {theirs}\nflex {cpu_losses:?}\n{name} {other_losses:?}",
            step + 1
        );
    }
    assert!(
        cpu_losses[STEPS as usize - 1] < cpu_losses[0],
        "the run learns: {cpu_losses:?}"
    );
}

#[tokio::test]
async fn the_mlp_trains_alike_on_wgpu_and_flex_from_the_same_weights() {
    agree(ModelConfig::Mlp { hidden: vec![64, 32] }, BackendKind::Wgpu).await;
}

#[tokio::test]
async fn the_cnn_trains_alike_on_wgpu_and_flex_from_the_same_weights() {
    agree(ModelConfig::Cnn { channels: vec![4, 8] }, BackendKind::Wgpu).await;
}

#[cfg(feature = "ndarray")]
#[tokio::test]
async fn the_mlp_trains_alike_on_ndarray_and_flex_from_the_same_weights() {
    agree(ModelConfig::Mlp { hidden: vec![64, 32] }, BackendKind::Ndarray).await;
}

#[cfg(feature = "ndarray")]
#[tokio::test]
async fn the_cnn_trains_alike_on_ndarray_and_flex_from_the_same_weights() {
    agree(ModelConfig::Cnn { channels: vec![4, 8] }, BackendKind::Ndarray).await;
}
