//! Training end to end: the loss falls, evaluation reports, bad settings are refused.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use headroom::data::{Codec, DataSource};
use headroom::model::ModelConfig;
use headroom::train::{
    BackendKind, Duration, OptimizerConfig, OptimizerKind, TrainConfig, TrainEvent, Trainer,
};

fn config(model: ModelConfig, optimizer: OptimizerKind, steps: u64) -> TrainConfig {
    TrainConfig {
        model,
        optimizer: OptimizerConfig {
            kind: optimizer,
            learning_rate: 3e-3,
            warmup_steps: 2,
            ..Default::default()
        },
        effective_batch: 64,
        micro_batch: Some(32),
        duration: Duration::Steps(steps),
        eval_every: 10,
        ..Default::default()
    }
}

async fn train(
    backend: BackendKind,
    config: TrainConfig,
) -> (Vec<TrainEvent>, headroom::train::events::RunSummary) {
    let dataset = common::synthetic_dataset(2000, 500, Codec::Lz4);
    let source = DataSource::open(dataset.dir.to_str().unwrap(), config.stream_options())
        .await
        .unwrap();
    let mut trainer = Trainer::new(config, &source, backend.device(), backend.name())
        .await
        .unwrap();
    let mut events = Vec::new();
    let summary = trainer
        .run(&source, |event| events.push(event.clone()))
        .await
        .unwrap();
    (events, summary)
}

fn losses(events: &[TrainEvent]) -> Vec<f32> {
    events
        .iter()
        .filter_map(|e| {
            if let TrainEvent::Step(s) = e {
                Some(s.loss)
            } else {
                None
            }
        })
        .collect()
}

#[tokio::test]
async fn every_optimizer_lowers_the_loss_and_learns_the_synthetic_classes_on_flex() {
    for optimizer in [OptimizerKind::Adam, OptimizerKind::AdamW, OptimizerKind::Sgd] {
        let (events, summary) = train(
            BackendKind::Flex,
            config(ModelConfig::Mlp { hidden: vec![64] }, optimizer, 30),
        )
        .await;
        let losses = losses(&events);
        assert_eq!(losses.len(), 30);
        let first: f32 = losses[..3].iter().sum::<f32>() / 3.0;
        let last: f32 = losses[27..].iter().sum::<f32>() / 3.0;
        assert!(last < 0.7 * first, "{optimizer:?}: loss {first} -> {last}");
        let eval = summary.eval.expect("evaluated at the end");
        assert_eq!(eval.step, 30);
        assert!(eval.accuracy > 0.6, "{optimizer:?}: accuracy {}", eval.accuracy);
        let evals = events.iter().filter(|e| matches!(e, TrainEvent::Eval(_))).count();
        assert_eq!(evals, 3, "every 10 steps");
    }
}

#[tokio::test]
async fn the_cnn_trains_on_wgpu_and_reports_device_memory() {
    let (events, summary) = train(
        BackendKind::Wgpu,
        config(ModelConfig::Cnn { channels: vec![4, 8] }, OptimizerKind::Adam, 12),
    )
    .await;
    let losses = losses(&events);
    assert!(losses[11] < losses[0], "{losses:?}");
    let peak = summary.peak_memory;
    assert!(peak.gpu_bytes_reserved.unwrap() >= peak.gpu_bytes_in_use.unwrap());
    assert!(peak.gpu_bytes_in_use.unwrap() > 0);
    assert!(peak.host_bytes.unwrap() > 0);
}

#[test]
fn the_cli_trains_writes_metrics_and_saves_the_model() {
    let dataset = common::synthetic_dataset(1000, 500, Codec::Lz4);
    let out = tempfile::tempdir().unwrap();
    let metrics = out.path().join("metrics.jsonl");
    let saved = out.path().join("model");
    let run = common::headroom(&[
        "train",
        "--data",
        dataset.dir.to_str().unwrap(),
        "--backend",
        "flex",
        "--hidden",
        "32",
        "--steps",
        "8",
        "--effective-batch",
        "64",
        "--micro-batch",
        "16",
        "--metrics",
        metrics.to_str().unwrap(),
        "--save",
        saved.to_str().unwrap(),
    ]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert!(String::from_utf8_lossy(&run.stdout).contains("test accuracy"));
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&metrics)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = lines.iter().map(|l| l["event"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"started"));
    assert_eq!(kinds.iter().filter(|k| **k == "step").count(), 8);
    assert_eq!(kinds.last(), Some(&"finished"));
    assert_eq!(lines[0]["accumulation_steps"], 4);
    assert!(saved.join("run.json").is_file());
}

#[test]
fn the_cli_refuses_bad_settings_with_a_reason() {
    let dataset = common::synthetic_dataset(300, 300, Codec::Lz4);
    let data = dataset.dir.to_str().unwrap();
    for (extra, expected) in [
        (
            vec!["--effective-batch", "0"],
            "effective batch must be at least 1",
        ),
        (
            vec!["--effective-batch", "256", "--micro-batch", "100"],
            "not a multiple of micro-batch 100",
        ),
        (vec!["--lr=-1"], "learning rate -1 must be positive"),
        (
            vec!["--model", "cnn", "--channels", "4,4,4,4,4,4"],
            "shrink 28x28 images below one pixel",
        ),
        (vec!["--steps", "0"], "at least 1 epoch or step"),
    ] {
        let args: Vec<&str> = ["train", "--data", data, "--backend", "flex"]
            .into_iter()
            .chain(extra)
            .collect();
        let run = common::headroom(&args);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

#[tokio::test]
async fn eval_samples_limits_the_evaluation_to_that_many_test_samples() {
    let mut limited = config(ModelConfig::Mlp { hidden: vec![16] }, OptimizerKind::Adam, 2);
    // Not a multiple of the micro-batch (32): the last evaluation batch is cut short.
    limited.eval_samples = Some(70);
    let (_, summary) = train(BackendKind::Flex, limited).await;
    assert_eq!(summary.eval.expect("evaluated at the end").samples, 70);

    let (_, summary) = train(
        BackendKind::Flex,
        config(ModelConfig::Mlp { hidden: vec![16] }, OptimizerKind::Adam, 2),
    )
    .await;
    // The synthetic set's test split is a fifth of its 2000 training samples.
    assert_eq!(
        summary.eval.expect("evaluated at the end").samples,
        400,
        "the whole split"
    );
}
