//! Runs from the same seed start from the same weights. Alone in its binary: burn seeds
//! the CPU backend's generator globally, so tests running beside it would draw from it.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use headroom::data::{Codec, DataSource};
use headroom::model::ModelConfig;
use headroom::train::{
    BackendKind, Duration, OptimizerConfig, OptimizerKind, TrainConfig, TrainEvent, Trainer,
};

async fn losses(config: TrainConfig) -> Vec<f32> {
    let dataset = common::synthetic_dataset(1000, 500, Codec::Lz4);
    let source = DataSource::open(dataset.dir.to_str().unwrap(), config.stream_options())
        .await
        .unwrap();
    let backend = BackendKind::Flex;
    let mut trainer = Trainer::new(config, &source, backend.device(), backend.name())
        .await
        .unwrap();
    let mut losses = Vec::new();
    trainer
        .run(&source, |event| {
            if let TrainEvent::Step(step) = event {
                losses.push(step.loss);
            }
        })
        .await
        .unwrap();
    losses
}

#[tokio::test]
async fn the_same_seed_trains_alike_with_or_without_checkpointing() {
    let plain = TrainConfig {
        model: ModelConfig::Cnn { channels: vec![4, 8] },
        optimizer: OptimizerConfig {
            kind: OptimizerKind::Adam,
            learning_rate: 3e-3,
            ..Default::default()
        },
        effective_batch: 64,
        micro_batch: Some(32),
        duration: Duration::Steps(6),
        seed: 17,
        ..Default::default()
    };
    let checkpointed = TrainConfig {
        checkpointing: Some(true),
        ..plain.clone()
    };
    let other_seed = TrainConfig {
        seed: 18,
        ..plain.clone()
    };
    let (plain, checkpointed, other_seed) = (
        losses(plain).await,
        losses(checkpointed).await,
        losses(other_seed).await,
    );
    assert_eq!(plain.len(), 6);
    for (a, b) in plain.iter().zip(&checkpointed) {
        assert!((a - b).abs() <= 1e-4 * a.abs(), "{plain:?} vs {checkpointed:?}");
    }
    assert_ne!(plain, other_seed, "another seed starts elsewhere");
}
