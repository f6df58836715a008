//! Helpers shared by the native integration tests: small generated datasets, and a real
//! HTTP server on 127.0.0.1 that injects faults on request.
#![allow(dead_code)]

pub mod fault_server;

use std::path::{Path, PathBuf};

use headroom::data::import::generate_synthetic;
use headroom::data::writer::WriterOptions;
use headroom::data::{Batch, BatchReader, Codec, DataSource, Manifest, MemoryGauge, Split, StreamOptions};
use headroom::memory::MemoryTracker;
use headroom::model::{InputShape, ModelConfig};
use headroom::train::BackendKind;
use headroom::train::step::{MicroSteps, accumulate_gradients};

/// A generated dataset in a temporary folder: `dir` holds `manifest.json` and the chunks.
pub struct TestDataset {
    pub root: tempfile::TempDir,
    pub dir: PathBuf,
    pub manifest: Manifest,
}

pub fn synthetic_dataset(train_samples: usize, chunk_samples: usize, codec: Codec) -> TestDataset {
    let root = tempfile::tempdir().expect("temp dir");
    let dir = root.path().join("synthetic");
    let manifest = generate_synthetic(train_samples, 11, &dir, WriterOptions { chunk_samples, codec })
        .expect("generate dataset");
    TestDataset { root, dir, manifest }
}

pub fn read_file(dir: &Path, name: &str) -> Vec<u8> {
    std::fs::read(dir.join(name)).expect("dataset file")
}

/// Runs the `headroom` binary this test build produced.
pub fn headroom(args: &[&str]) -> std::process::Output {
    headroom_with_env(args, &[])
}

/// [`headroom`] with `env` set for it alone.
pub fn headroom_with_env(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run headroom")
}

/// `headroom train --data DATA --backend wgpu --no-eval` with `flags`, in its own process
/// (a fresh device pool), as it ended.
pub fn train_on_wgpu(data: &str, flags: &[&str]) -> std::process::Output {
    train_on_wgpu_with_env(data, flags, &[])
}

/// [`train_on_wgpu`] with `env` set for the run alone.
pub fn train_on_wgpu_with_env(data: &str, flags: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut args = vec!["train", "--data", data, "--backend", "wgpu", "--no-eval"];
    args.extend(flags);
    headroom_with_env(&args, env)
}

/// [`train_on_wgpu`], and every event it wrote to `--metrics`. Fails the test if the run
/// fails.
pub fn train_events_on_wgpu(data: &str, flags: &[&str]) -> Vec<serde_json::Value> {
    train_events_on_wgpu_with_env(data, flags, &[])
}

/// [`train_events_on_wgpu`] with `env` set for the run alone.
pub fn train_events_on_wgpu_with_env(
    data: &str,
    flags: &[&str],
    env: &[(&str, &str)],
) -> Vec<serde_json::Value> {
    let mut args = vec!["train", "--data", data, "--backend", "wgpu", "--no-eval"];
    args.extend(flags);
    headroom_events_with_env(&args, env)
}

/// `headroom ARGS --metrics FILE`, and every event it wrote there. Fails the test if the
/// command fails.
pub fn headroom_events(args: &[&str]) -> Vec<serde_json::Value> {
    headroom_events_with_env(args, &[])
}

/// [`headroom_events`] with `env` set for the run alone.
pub fn headroom_events_with_env(args: &[&str], env: &[(&str, &str)]) -> Vec<serde_json::Value> {
    let metrics = tempfile::NamedTempFile::new().expect("temp file");
    let path = metrics.path().to_str().expect("a UTF-8 temp path");
    let mut args = args.to_vec();
    args.extend(["--metrics", path]);
    let output = headroom_with_env(&args, env);
    assert!(
        output.status.success(),
        "headroom {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::read_to_string(metrics.path())
        .expect("the metrics file")
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON event"))
        .collect()
}

/// Device reservation plus data pipeline, as an event's `memory` gives them: what the cap
/// counts.
pub fn held(memory: &serde_json::Value) -> u64 {
    memory["gpu_bytes_reserved"]
        .as_u64()
        .expect("wgpu reports its pool")
        + memory["data_bytes_held"].as_u64().unwrap()
}

/// One batch of `samples` generated samples, read through the data pipeline, and the
/// input shape of its dataset.
pub async fn one_batch(samples: usize) -> (Batch, InputShape) {
    let dataset = synthetic_dataset(samples, samples, Codec::Lz4);
    let source = DataSource::open(dataset.dir.to_str().unwrap(), StreamOptions::default())
        .await
        .unwrap();
    let mut reader = BatchReader::new(
        source.epoch(Split::Train, 0).unwrap(),
        source.manifest().sample_bytes(),
    );
    let batch = reader.next_batch(samples).await.unwrap().unwrap();
    let input = headroom::train::plan::input_shape(source.manifest()).unwrap();
    (batch, input)
}

/// Generated text: words drawn by a fixed linear congruential generator, so that a model
/// has something to learn and every run reads the same characters.
pub fn generated_text(characters: usize) -> String {
    const WORDS: [&str; 12] = [
        "the", "king", "shall", "speak", "and", "queen", "to", "her", "lord", "now,", "hence!", "\n",
    ];
    let mut state: u64 = 7;
    let mut text = String::new();
    while text.len() < characters {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        text.push_str(WORDS[(state >> 33) as usize % WORDS.len()]);
        text.push(' ');
    }
    text.truncate(characters);
    text
}

/// `text` prepared as a text dataset of `chunk_tokens`-token chunks.
pub fn text_dataset(text: &str, chunk_tokens: usize) -> TestDataset {
    let root = tempfile::tempdir().expect("temp dir");
    let source = root.path().join("corpus.txt");
    std::fs::write(&source, text).expect("write the corpus");
    let dir = root.path().join("text");
    let options = WriterOptions {
        chunk_samples: chunk_tokens,
        codec: Codec::Deflate,
    };
    let manifest =
        headroom::data::import::import_text(&[source], "text", &dir, options).expect("prepare the text");
    TestDataset { root, dir, manifest }
}

/// One batch of `windows` windows of `context + 1` tokens of generated text, read through
/// the data pipeline, and the input shape of its dataset.
pub async fn one_text_batch(windows: usize, context: usize) -> (Batch, InputShape) {
    let dataset = text_dataset(&generated_text(windows * (context + 1) * 2), 4 * (context + 1));
    let options = StreamOptions {
        window: Some(context + 1),
        ..StreamOptions::default()
    };
    let source = DataSource::open(dataset.dir.to_str().unwrap(), options)
        .await
        .unwrap();
    let mut reader = BatchReader::new(source.epoch(Split::Train, 0).unwrap(), source.sample_bytes());
    let batch = reader.next_batch(windows).await.unwrap().unwrap();
    assert_eq!(batch.len(), windows, "the generated text holds enough windows");
    let input = headroom::train::plan::input_shape(source.manifest()).unwrap();
    (batch, input)
}

/// Device bytes in use at the step's peak above those before it: the activations and
/// gradients one step holds.
pub async fn step_bytes(model: ModelConfig, micro_batch: usize, recompute: bool) -> u64 {
    let (batch, input) = match model.text_window() {
        Some(window) => one_text_batch(micro_batch, window - 1).await,
        None => one_batch(micro_batch).await,
    };
    let device = BackendKind::Wgpu.device();
    let train_device = device.clone().autodiff();
    let model = model.init(&input, &train_device);
    let mut tracker = MemoryTracker::new(device, MemoryGauge::default());
    let before = tracker.sample().gpu_bytes_in_use.expect("wgpu reports its pool");
    tracker.take_step_peak();
    let steps = MicroSteps {
        recompute,
        ..MicroSteps::f32(micro_batch)
    };
    let step = accumulate_gradients(&model, &batch, steps, &input, &train_device, Some(&mut tracker)).await;
    let peak = tracker.take_step_peak().gpu_bytes_in_use.unwrap();
    drop(step);
    peak - before
}
