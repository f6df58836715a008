//! A run saved between two steps and taken up again goes on exactly as if it had never
//! stopped: in the library (bit for bit on flex, from a reader mid-chunk and from one
//! released for an evaluation) and through the command line (`--checkpoint-dir`,
//! `--resume`, Ctrl-C, `headroom eval`, a torn save, a damaged blob).
#![cfg(not(target_arch = "wasm32"))]

mod common;

use headroom::data::{Codec, DataSource, StreamOptions};
use headroom::model::ModelConfig;
use headroom::train::saved_run::{self, Checkpoint};
use headroom::train::{
    BackendKind, Duration, Moments, OptimizerConfig, OptimizerKind, Progress, TrainConfig, TrainEvent,
    Trainer,
};

const STEPS: u64 = 24;

/// Adam with warm-up and decay, accumulation, three chunks read at once (the mixer's
/// draws), an epoch boundary (1000 samples: 16 steps an epoch) and evaluations that release
/// the training stream's chunks.
fn config() -> TrainConfig {
    TrainConfig {
        model: ModelConfig::Mlp { hidden: vec![32] },
        optimizer: OptimizerConfig {
            kind: OptimizerKind::Adam,
            learning_rate: 3e-3,
            warmup_steps: 3,
            ..Default::default()
        },
        effective_batch: 64,
        micro_batch: Some(16),
        duration: Duration::Steps(STEPS),
        eval_every: 5,
        eval_samples: Some(100),
        pause_training_for_eval: Some(true),
        seed: 5,
        stream: StreamOptions {
            seed: 5,
            mix: Some(3),
            prefetch: 1,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// A checkpoint as it comes back from the browser's storage: through its one-blob form.
fn through_bytes(saved: Checkpoint) -> Checkpoint {
    Checkpoint::from_bytes(&saved.to_bytes()).unwrap()
}

/// Runs to the end, returning every step's loss and every evaluation's (loss, accuracy);
/// `save_at` names steps after which the run is captured.
async fn run_to_end(
    trainer: &mut Trainer,
    progress: &mut Progress,
    source: &DataSource,
    save_at: &[u64],
) -> (Vec<f32>, Vec<(f32, f32)>, Vec<Checkpoint>) {
    let (mut losses, mut evals, mut saved) = (Vec::new(), Vec::new(), Vec::new());
    while progress.summary().is_none() {
        for event in progress.advance(trainer, source).await.unwrap() {
            match event {
                TrainEvent::Step(step) => losses.push(step.loss),
                TrainEvent::Eval(eval) => evals.push((eval.loss, eval.accuracy)),
                _ => {}
            }
        }
        if save_at.contains(&trainer.step()) && saved.len() < save_at.len() {
            saved.push(through_bytes(
                saved_run::capture(trainer, progress, source).await.unwrap(),
            ));
        }
    }
    (losses, evals, saved)
}

async fn open(dir: &std::path::Path, config: &TrainConfig) -> DataSource {
    DataSource::open(dir.to_str().unwrap(), config.stream_options())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_resumed_run_gives_the_same_losses_bit_for_bit_on_flex() {
    resumes_bit_for_bit(config()).await;
}

/// The same where each step's update runs inside backward (checkpointing in f32, one pass
/// a step), with 8-bit moments.
#[tokio::test]
async fn a_run_updating_inside_backward_resumes_bit_for_bit_on_flex() {
    resumes_bit_for_bit(TrainConfig {
        micro_batch: Some(64),
        checkpointing: Some(true),
        moments: Some(Moments::Q8),
        ..config()
    })
    .await;
}

async fn resumes_bit_for_bit(config: TrainConfig) {
    let dataset = common::synthetic_dataset(1000, 90, Codec::Lz4);
    let source = open(&dataset.dir, &config).await;
    let backend = BackendKind::Flex;
    let mut trainer = Trainer::new(config, &source, backend.device(), backend.name())
        .await
        .unwrap();
    let mut progress = Progress::default();
    // Step 7: the reader is mid-chunk with three chunks open; step 10: an evaluation has
    // just released them; step 17: an epoch has just begun.
    let (losses, evals, saved) = run_to_end(&mut trainer, &mut progress, &source, &[7, 10, 17]).await;
    assert_eq!(losses.len() as u64, STEPS);
    assert_eq!(saved.len(), 3);
    let position = |i: usize| saved[i].state.reader.clone();
    assert!(position(0).is_some_and(|p| p.open.len() > 1), "{:?}", position(0));
    assert!(
        position(1).is_some_and(|p| !p.open.is_empty()),
        "{:?}",
        position(1)
    );
    assert_eq!(saved[2].state.epoch, 1);

    for checkpoint in &saved {
        let at = checkpoint.state.step as usize;
        assert_eq!(checkpoint.state.history.losses, losses[..at]);
        let (mut trainer, mut progress) =
            saved_run::restore(checkpoint, |_| {}, &source, backend.device(), backend.name())
                .await
                .unwrap();
        let (rest, rest_evals, _) = run_to_end(&mut trainer, &mut progress, &source, &[]).await;
        let bits = |values: &[f32]| values.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&rest),
            bits(&losses[at..]),
            "resumed after step {at}: {rest:?} against {:?}",
            &losses[at..]
        );
        assert_eq!(rest_evals, evals[evals.len() - rest_evals.len()..]);
        assert_eq!(progress.history().losses, losses);
    }
}

#[tokio::test]
async fn a_checkpoint_for_other_data_or_with_a_damaged_blob_is_refused_in_words() {
    let dataset = common::synthetic_dataset(300, 100, Codec::Lz4);
    let other = common::synthetic_dataset(400, 100, Codec::Lz4);
    let config = TrainConfig {
        duration: Duration::Steps(2),
        ..config()
    };
    let source = open(&dataset.dir, &config).await;
    let backend = BackendKind::Flex;
    let mut trainer = Trainer::new(config.clone(), &source, backend.device(), backend.name())
        .await
        .unwrap();
    let mut progress = Progress::default();
    run_to_end(&mut trainer, &mut progress, &source, &[]).await;
    let saved = saved_run::capture(&trainer, &progress, &source).await.unwrap();
    let saved = || Checkpoint {
        state: saved.state.clone(),
        model: saved.model.clone(),
        optimizer: saved.optimizer.clone(),
    };
    let refusal = async |checkpoint: &Checkpoint, source: &DataSource| match saved_run::restore(
        checkpoint,
        |_| {},
        source,
        backend.device(),
        backend.name(),
    )
    .await
    {
        Ok(_) => panic!("a bad checkpoint was accepted"),
        Err(error) => (error.kind(), error.to_string()),
    };
    let other_source = open(&other.dir, &config).await;
    let (kind, message) = refusal(&saved(), &other_source).await;
    assert_eq!(kind, headroom::data::ErrorKind::BadCheckpoint);
    assert!(
        message.contains("not the one the run was trained on"),
        "{message}"
    );

    let mut damaged = saved();
    let middle = damaged.model.len() / 2;
    damaged.model[middle] ^= 1;
    assert!(
        refusal(&damaged, &source)
            .await
            .1
            .contains("do not match their checksum")
    );

    let mut newer = saved();
    newer.state.format += 1;
    assert!(refusal(&newer, &source).await.1.contains("format"));

    let blob = saved().to_bytes();
    let model_end = blob.len() - saved().optimizer.len();
    for cut in [0, 5, 20, model_end / 2, model_end - 1] {
        let error = Checkpoint::from_bytes(&blob[..cut])
            .err()
            .expect("a cut blob is refused");
        assert_eq!(error.kind(), headroom::data::ErrorKind::BadCheckpoint);
    }
    let mut tail_cut = Checkpoint::from_bytes(&blob[..blob.len() - 3]).unwrap();
    assert!(
        refusal(&tail_cut, &source)
            .await
            .1
            .contains("do not match their checksum")
    );
    tail_cut.state.optimizer_sha256 = headroom::data::chunk::sha256_hex(&tail_cut.optimizer);
    assert!(refusal(&tail_cut, &source).await.1.contains("optimizer state"));

    // An f16 step that overflowed has an infinite loss: JSON holds it as null, read as NaN.
    let mut overflowed = saved();
    overflowed.state.history.losses.push(f32::INFINITY);
    let back = Checkpoint::from_bytes(&overflowed.to_bytes()).unwrap();
    assert!(back.state.history.losses.last().unwrap().is_nan());

    // Another model's optimizer state, checksum and all: refused, not a panic mid-step.
    let narrower = TrainConfig {
        model: ModelConfig::Mlp { hidden: vec![16] },
        ..config.clone()
    };
    let mut other_trainer = Trainer::new(narrower, &source, backend.device(), backend.name())
        .await
        .unwrap();
    let mut other_progress = Progress::default();
    run_to_end(&mut other_trainer, &mut other_progress, &source, &[]).await;
    let foreign = saved_run::capture(&other_trainer, &other_progress, &source)
        .await
        .unwrap();
    let mut mixed = saved();
    mixed.optimizer = foreign.optimizer;
    mixed.state.optimizer_sha256 = headroom::data::chunk::sha256_hex(&mixed.optimizer);
    let message = refusal(&mixed, &source).await.1;
    assert!(
        message.contains("optimizer state") && message.contains("does not have"),
        "{message}"
    );

    let mut moved = saved();
    moved.state.reader = Some(headroom::data::ReaderPosition {
        epoch: 0,
        taken: 99,
        open: vec![],
        mixer_words: "0".into(),
    });
    assert!(refusal(&moved, &source).await.1.contains("past the"));
}

/// `headroom train` on flex with a small MLP over `data`, and `extra` flags.
fn train_args<'a>(data: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "train",
        "--data",
        data,
        "--backend",
        "flex",
        "--hidden",
        "32",
        "--effective-batch",
        "64",
        "--micro-batch",
        "16",
        "--mix-chunks",
        "2",
        "--seed",
        "3",
    ];
    args.extend(extra);
    args
}

fn of_kind<'a>(events: &'a [serde_json::Value], kind: &str) -> Vec<&'a serde_json::Value> {
    events.iter().filter(|e| e["event"] == kind).collect()
}

fn saved_step(dir: &std::path::Path) -> u64 {
    let run: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("run.json")).unwrap()).unwrap();
    run["state"]["step"].as_u64().unwrap()
}

#[test]
fn the_cli_saves_every_n_steps_and_a_resumed_run_ends_as_the_uninterrupted_one() {
    let dataset = common::synthetic_dataset(1000, 90, Codec::Lz4);
    let data = dataset.dir.to_str().unwrap();
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("run");
    let dir_arg = dir.to_str().unwrap();
    let whole = common::headroom_events(&train_args(
        data,
        &[
            "--steps",
            "12",
            "--checkpoint-dir",
            dir_arg,
            "--checkpoint-every",
            "5",
        ],
    ));
    assert_eq!(saved_step(&dir), 10);
    let blobs = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(blobs, 3, "run.json and the blobs of step 10 only");

    let resumed = common::headroom_events(&["train", "--resume", dir_arg, "--backend", "flex"]);
    let started = of_kind(&resumed, "started");
    assert_eq!(started[0]["resumed_at"], 10);
    let losses = |events: &[serde_json::Value]| -> Vec<serde_json::Value> {
        of_kind(events, "step")
            .iter()
            .map(|s| s["loss"].clone())
            .collect()
    };
    assert_eq!(losses(&resumed), losses(&whole)[10..]);
    let accuracy = |events: &[serde_json::Value]| of_kind(events, "eval").last().unwrap()["accuracy"].clone();
    assert_eq!(accuracy(&resumed), accuracy(&whole));
}

#[test]
fn headroom_eval_gives_the_saved_run_its_own_test_accuracy_and_refuses_a_damaged_one() {
    let dataset = common::synthetic_dataset(500, 100, Codec::Lz4);
    let data = dataset.dir.to_str().unwrap();
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("saved");
    let dir_arg = dir.to_str().unwrap();
    let events = common::headroom_events(&train_args(data, &["--steps", "6", "--save", dir_arg]));
    let final_eval = (*of_kind(&events, "eval").last().unwrap()).clone();

    // What an interrupted save leaves: a newer blob and a half-written run.json.
    std::fs::write(dir.join("model-00000099.bpk"), b"half").unwrap();
    std::fs::write(dir.join(".run.json.tmp"), b"{\"trunc").unwrap();
    let eval = |dir: &str| common::headroom(&["eval", dir, "--backend", "flex", "--json"]);
    let run = eval(dir_arg);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let evaluated: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    for field in ["step", "samples", "loss", "accuracy"] {
        assert_eq!(evaluated[field], final_eval[field], "{field}");
    }

    let run_file: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("run.json")).unwrap()).unwrap();
    let blob = dir.join(run_file["model"].as_str().unwrap());
    let mut bytes = std::fs::read(&blob).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x10;
    std::fs::write(&blob, bytes).unwrap();
    let refused = eval(dir_arg);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(stderr.contains("do not match their checksum"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let nothing = eval(out.path().to_str().unwrap());
    assert!(String::from_utf8_lossy(&nothing.stderr).contains("holds no saved run"));
}

#[test]
fn ctrl_c_saves_the_run_after_the_step_under_way_and_it_goes_on_from_there() {
    let dataset = common::synthetic_dataset(1000, 100, Codec::Lz4);
    let data = dataset.dir.to_str().unwrap();
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("run");
    let dir_arg = dir.to_str().unwrap();
    let args = train_args(
        data,
        &[
            "--hidden",
            "512",
            "--steps",
            "100000",
            "--no-eval",
            "--checkpoint-dir",
            dir_arg,
            "--checkpoint-every",
            "2",
        ],
    );
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !dir.join("run.json").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint within 2 minutes"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let interrupt = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(interrupt.success());
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    let step = saved_step(&dir);
    assert!(
        stderr.contains(&format!("interrupted after step {step}; saved in {dir_arg}")),
        "{stderr}"
    );
    let more = (step + 2).to_string();
    let resumed = common::headroom_events(&[
        "train",
        "--resume",
        dir_arg,
        "--backend",
        "flex",
        "--steps",
        &more,
    ]);
    let steps: Vec<u64> = of_kind(&resumed, "step")
        .iter()
        .map(|s| s["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, vec![step + 1, step + 2]);
}
