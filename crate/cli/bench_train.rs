//! Training benchmarks. Each setting runs as its own `headroom train` process so it starts
//! from a fresh device: pools, caches and compiled kernels of one setting would otherwise
//! flatter or burden the next.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};
use clap::Args;
use serde_json::Value;

use crate::memory::Breakdown;
use crate::units::format_bytes;

#[derive(Args)]
pub struct TrainBenchArgs {
    /// Dataset URL or folder.
    #[arg(long)]
    data: String,
    #[arg(long, default_value = "mlp")]
    model: String,
    /// MLP hidden widths.
    #[arg(long, default_value = "512")]
    hidden: String,
    /// Steps per setting; the first `warmup` are left out of samples/s.
    #[arg(long, default_value_t = 8)]
    steps: u64,
    #[arg(long, default_value_t = 2)]
    warmup: u64,
    #[arg(long, default_value = "wgpu")]
    backend: String,
    /// Effective batch (default: 2048 for the MLP, so that activations rather than the
    /// allocator's smallest pages set the peak; 64 for the CNN).
    #[arg(long)]
    effective_batch: Option<usize>,
}

#[derive(Args)]
pub struct PlanBenchArgs {
    /// Dataset URL or folder.
    #[arg(long)]
    data: String,
    /// Steps per configuration: enough for the optimizer state and every pool to exist.
    #[arg(long, default_value_t = 3)]
    steps: u64,
}

/// What one `headroom train` process reported.
struct Measured {
    predicted: Breakdown,
    reserved: u64,
    in_use: u64,
    /// Median over the steps after warm-up.
    samples_per_sec: f64,
    final_loss: f64,
    skipped: u64,
}

fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn train_once(
    data: &str,
    flags: &[String],
    steps: u64,
    warmup: u64,
    metrics: &Path,
) -> anyhow::Result<Measured> {
    let exe = std::env::current_exe().context("finding the headroom binary")?;
    let output = Command::new(exe)
        .args([
            "train",
            "--data",
            data,
            "--no-eval",
            "--steps",
            &steps.to_string(),
        ])
        .args(flags)
        .arg("--metrics")
        .arg(metrics)
        .output()
        .context("starting headroom train")?;
    if !output.status.success() {
        bail!(
            "headroom train {} failed: {}",
            flags.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let text = std::fs::read_to_string(metrics)?;
    let events: Vec<Value> = text.lines().map(serde_json::from_str).collect::<Result<_, _>>()?;
    let find = |kind: &str| {
        events
            .iter()
            .find(|e| e["event"] == kind)
            .context("missing event")
    };
    let started = find("started")?;
    let finished = find("finished")?;
    let rates = events
        .iter()
        .filter(|e| e["event"] == "step" && e["step"].as_u64().is_some_and(|s| s > warmup))
        .filter_map(|e| e["samples_per_sec"].as_f64())
        .collect();
    let peak = &finished["peak_memory"];
    Ok(Measured {
        predicted: serde_json::from_value(started["predicted"].clone())?,
        reserved: peak["gpu_bytes_reserved"].as_u64().unwrap_or(0),
        in_use: peak["gpu_bytes_in_use"].as_u64().unwrap_or(0),
        samples_per_sec: median(rates),
        final_loss: finished["final_loss"].as_f64().unwrap_or(f64::NAN),
        skipped: finished["skipped_steps"].as_u64().unwrap_or(0),
    })
}

fn flags(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// samples/s and peak device memory per memory lever, each as a ratio to plain f32.
pub fn bench_train(args: TrainBenchArgs) -> anyhow::Result<()> {
    let work = tempfile::tempdir()?;
    let batch = args
        .effective_batch
        .unwrap_or(if args.model == "cnn" { 64 } else { 2048 });
    let quarter = (batch / 4).max(1).to_string();
    let base = flags(&[
        "--model",
        &args.model,
        "--hidden",
        &args.hidden,
        "--backend",
        &args.backend,
        "--effective-batch",
        &batch.to_string(),
    ]);
    let levers: [(&str, Vec<String>); 5] = [
        ("baseline f32", flags(&[])),
        ("accumulation 4x", flags(&["--micro-batch", &quarter])),
        ("f16", flags(&["--precision", "f16"])),
        ("checkpointing", flags(&["--checkpointing"])),
        (
            "combined",
            flags(&["--micro-batch", &quarter, "--precision", "f16", "--checkpointing"]),
        ),
    ];
    println!(
        "{} ({}) on {}, effective batch {batch}, {} steps per setting (samples/s: median after {} warm-up steps), each in a fresh process:",
        args.model, args.hidden, args.backend, args.steps, args.warmup
    );
    println!(
        "{:<16} {:>10} {:>7} {:>12} {:>7} {:>12} {:>7} {:>10} {:>7}",
        "lever", "samples/s", "ratio", "reserved", "ratio", "in use", "ratio", "final loss", "skipped"
    );
    let mut baseline: Option<Measured> = None;
    for (i, (name, extra)) in levers.iter().enumerate() {
        let all: Vec<String> = base.iter().chain(extra).cloned().collect();
        let metrics = work.path().join(format!("lever-{i}.jsonl"));
        let m = train_once(&args.data, &all, args.steps, args.warmup, &metrics)?;
        let reference = baseline.as_ref().unwrap_or(&m);
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
        println!(
            "{:<16} {:>10.0} {:>7.2} {:>12} {:>7.2} {:>12} {:>7.2} {:>10.4} {:>7}",
            name,
            m.samples_per_sec,
            ratio(m.samples_per_sec, reference.samples_per_sec),
            format_bytes(m.reserved as usize),
            ratio(m.reserved as f64, reference.reserved as f64),
            format_bytes(m.in_use as usize),
            ratio(m.in_use as f64, reference.in_use as f64),
            m.final_loss,
            m.skipped,
        );
        baseline.get_or_insert(m);
    }
    Ok(())
}

/// Predicted against measured peak device reservation over a spread of configurations.
pub fn bench_plan(args: PlanBenchArgs) -> anyhow::Result<()> {
    let work = tempfile::tempdir()?;
    let configs: Vec<Vec<String>> = [
        "--model mlp --micro-batch 256",
        "--model mlp --micro-batch 128",
        "--model mlp --micro-batch 64",
        "--model mlp --micro-batch 32",
        "--model mlp --micro-batch 256 --precision f16",
        "--model mlp --micro-batch 64 --precision f16",
        "--model mlp --micro-batch 256 --checkpointing",
        "--model mlp --hidden 1024,1024 --micro-batch 256",
        "--model mlp --hidden 1024,1024 --micro-batch 64",
        "--model mlp --hidden 2048,2048,2048 --micro-batch 256",
        "--model mlp --hidden 128 --micro-batch 256 --optimizer sgd",
        "--model mlp --hidden 4096 --micro-batch 512 --effective-batch 512",
        "--model mlp --hidden 512 --micro-batch 2048 --effective-batch 2048",
        "--model mlp --hidden 512 --micro-batch 256 --effective-batch 2048",
        "--model cnn --effective-batch 64 --micro-batch 64",
        "--model cnn --effective-batch 64 --micro-batch 16",
        "--model cnn --effective-batch 64 --micro-batch 64 --precision f16",
        "--model cnn --effective-batch 64 --micro-batch 64 --checkpointing",
    ]
    .iter()
    .map(|line| line.split(' ').map(String::from).collect())
    .collect();
    println!(
        "predicted vs measured peak device reservation (wgpu), {} steps per configuration, each in a fresh process:",
        args.steps
    );
    println!(
        "{:<58} {:>11} {:>11} {:>8} {:>11} {:>11}",
        "configuration", "predicted", "reserved", "error", "pred. live", "in use"
    );
    let mut errors = Vec::new();
    for (i, config) in configs.iter().enumerate() {
        let metrics = work.path().join(format!("plan-{i}.jsonl"));
        let m = train_once(&args.data, config, args.steps, 0, &metrics)?;
        let predicted = m.predicted.device();
        let error = (predicted as f64 - m.reserved as f64) / m.reserved.max(1) as f64;
        errors.push(error.abs());
        println!(
            "{:<58} {:>11} {:>11} {:>+7.1}% {:>11} {:>11}",
            config.join(" "),
            format_bytes(predicted as usize),
            format_bytes(m.reserved as usize),
            100.0 * error,
            format_bytes(m.predicted.tensors() as usize),
            format_bytes(m.in_use as usize),
        );
    }
    let within = errors.iter().filter(|e| **e <= 0.15).count();
    println!(
        "{within} of {} within +-15%; largest error {:.1}%",
        errors.len(),
        100.0 * errors.iter().copied().fold(0.0, f64::max)
    );
    Ok(())
}
