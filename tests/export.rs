//! `headroom export` and `train --init` end to end, through the binary: the safetensors file
//! read by NumPy and Hugging Face's safetensors outside Headroom (tests/python/check_export.py,
//! in the venv tests/python/setup makes), and runs started from it.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::path::{Path, PathBuf};

use headroom::data::Codec;

use common::{generated_text, headroom, headroom_events, synthetic_dataset, text_dataset};

/// The venv's python with NumPy and safetensors: `HEADROOM_CHECK_PYTHON` (tests/run-all sets
/// it), or the one tests/python/setup makes.
fn check_python() -> String {
    if let Ok(python) = std::env::var("HEADROOM_CHECK_PYTHON") {
        return python;
    }
    let setup = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/setup");
    let output = std::process::Command::new(setup)
        .output()
        .expect("run tests/python/setup");
    assert!(
        output.status.success(),
        "tests/python/setup: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

fn succeed(args: &[&str]) -> String {
    let output = headroom(args);
    assert!(
        output.status.success(),
        "headroom {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// The losses of the steps a run wrote to its metrics.
fn step_losses(args: &[&str]) -> Vec<f64> {
    headroom_events(args)
        .iter()
        .filter(|e| e["event"] == "step")
        .map(|e| e["loss"].as_f64().unwrap())
        .collect()
}

/// `headroom train` on flex in file order, without evaluations.
fn unshuffled_on_flex<'a>(data: &'a str, model_flags: &[&'a str], more: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "train",
        "--data",
        data,
        "--backend",
        "flex",
        "--no-eval",
        "--no-shuffle",
    ];
    args.extend(model_flags);
    args.extend(more);
    args
}

/// Trains `model_flags` 3 unshuffled steps on `data`, saves the run and exports it.
fn trained_and_exported(dir: &Path, data: &str, model_flags: &[&str]) -> PathBuf {
    let run = dir.join("run");
    let file = dir.join("model.safetensors");
    succeed(&unshuffled_on_flex(
        data,
        model_flags,
        &["--steps", "3", "--save", run.to_str().unwrap()],
    ));
    succeed(&["export", run.to_str().unwrap(), "--out", file.to_str().unwrap()]);
    file
}

/// The first step's loss of a run started from `file`.
fn first_loss_from(file: &Path, data: &str, model_flags: &[&str]) -> f64 {
    step_losses(&unshuffled_on_flex(
        data,
        model_flags,
        &["--steps", "1", "--init", file.to_str().unwrap()],
    ))[0]
}

#[test]
fn numpy_reproduces_the_exported_mlps_logits_and_first_loss() {
    let dataset = synthetic_dataset(600, 200, Codec::Deflate);
    let data = dataset.dir.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--model", "mlp", "--hidden", "64,32", "--effective-batch", "50"];
    let file = trained_and_exported(dir.path(), data, &flags);
    let logits = dir.path().join("logits.npy");
    let run = dir.path().join("run");
    succeed(&[
        "eval",
        run.to_str().unwrap(),
        "--backend",
        "flex",
        "--samples",
        "100",
        "--logits",
        logits.to_str().unwrap(),
    ]);
    let first = first_loss_from(&file, data, &flags);
    let output = std::process::Command::new(check_python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/check_export.py"))
        .args([
            "--file",
            file.to_str().unwrap(),
            "--data",
            data,
            "--logits",
            logits.to_str().unwrap(),
        ])
        .args(["--first-loss", &first.to_string(), "--batch", "50"])
        .output()
        .expect("run the check");
    let said = String::from_utf8_lossy(&output.stdout);
    println!("{said}");
    assert!(
        output.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(said.contains("logits of 100 test samples"), "{said}");
}

/// A run started from an exported file begins where the exported run ended: its first
/// step's loss is the exported run's loss on the same (first) batch.
fn starts_where_it_was_exported(data: &str, flags: &[&str], batch: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = trained_and_exported(dir.path(), data, flags);
    let run = dir.path().join("run");
    let eval = succeed(&[
        "eval",
        run.to_str().unwrap(),
        "--backend",
        "flex",
        "--split",
        "train",
        "--samples",
        batch,
        "--json",
    ]);
    let eval: serde_json::Value = serde_json::from_str(&eval).unwrap();
    let exported = eval["loss"].as_f64().unwrap();
    let first = first_loss_from(&file, data, flags);
    assert!(
        (first - exported).abs() <= 1e-5 * exported,
        "{flags:?}: first step {first}, the exported run {exported}"
    );
    // A fresh run's first loss differs: the file's weights were taken.
    let fresh = step_losses(&unshuffled_on_flex(data, flags, &["--steps", "1"]))[0];
    assert!(
        (fresh - exported).abs() > 1e-3,
        "{flags:?}: fresh {fresh}, exported {exported}"
    );
}

#[test]
fn a_cnn_started_from_its_export_begins_where_it_ended() {
    let dataset = synthetic_dataset(400, 200, Codec::Deflate);
    let flags = ["--model", "cnn", "--channels", "4,8", "--effective-batch", "32"];
    starts_where_it_was_exported(dataset.dir.to_str().unwrap(), &flags, "32");
}

#[test]
fn a_gpt_started_from_its_export_begins_where_it_ended() {
    let dataset = text_dataset(&generated_text(20_000), 2_000);
    let flags = [
        "--model",
        "gpt",
        "--layers",
        "2",
        "--heads",
        "2",
        "--width",
        "32",
        "--context",
        "32",
        "--effective-batch",
        "8",
        "--sample-chars",
        "0",
    ];
    starts_where_it_was_exported(dataset.dir.to_str().unwrap(), &flags, "8");
}

#[test]
fn a_file_of_another_shape_is_refused_by_name_before_any_step() {
    let dataset = synthetic_dataset(300, 300, Codec::Deflate);
    let data = dataset.dir.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = trained_and_exported(dir.path(), data, &["--model", "mlp", "--hidden", "64,32"]);
    let metrics = dir.path().join("refused.jsonl");
    let output = headroom(&[
        "train",
        "--data",
        data,
        "--backend",
        "flex",
        "--model",
        "mlp",
        "--hidden",
        "64,16",
        "--steps",
        "1",
        "--init",
        file.to_str().unwrap(),
        "--metrics",
        metrics.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("`3.weight` is [32, 64] in the file; this MLP needs [16, 64]"),
        "{stderr}"
    );
    let steps = std::fs::read_to_string(&metrics)
        .unwrap_or_default()
        .matches("\"step\"")
        .count();
    assert_eq!(steps, 0, "no step before the refusal");
}
