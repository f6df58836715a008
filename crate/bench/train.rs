//! Training benchmarks. Each setting runs as its own `headroom train` process so it starts
//! from a fresh device: pools, caches and compiled kernels of one setting would otherwise
//! flatter or burden the next.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};
use clap::Args;
use serde_json::Value;

use crate::flags::{ModelKind, ModelShapeArgs};
use crate::memory::{Breakdown, Calibration, Probe};
use crate::units::format_bytes;

#[derive(Args)]
pub struct TrainBenchArgs {
    /// Dataset URL or folder.
    #[arg(long)]
    data: String,
    /// The model and its size, with `headroom train`'s flags and defaults.
    #[command(flatten)]
    model: ModelShapeArgs,
    /// Rounds over every lever, in turn: samples/s is the median over rounds, with its
    /// range (these machines are noisy).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Steps per setting; the first `warmup` are left out of samples/s.
    #[arg(long, default_value_t = 8)]
    steps: u64,
    #[arg(long, default_value_t = 2)]
    warmup: u64,
    #[arg(long, default_value = "wgpu")]
    backend: String,
    /// Effective batch (default: 2048 for the MLP, so that activations rather than the
    /// allocator's smallest pages set the peak; 64 for the CNN; 8 windows for the GPT).
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
    /// Which settings: `fitted` (those the census's factors were fitted on), `held-out`
    /// (drawn afterwards, never used to fit), `fresh` (drawn after the calibration was
    /// built, never run while building it), or `all` of these, on images; `gpt-fitted`
    /// and `gpt-held-out` for the GPT, on a text dataset.
    #[arg(long, value_enum, default_value = "all")]
    set: PlanSet,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PlanSet {
    Fitted,
    HeldOut,
    Fresh,
    All,
    GptFitted,
    GptHeldOut,
}

/// GPT settings the census's attention and block figures were checked on.
const GPT_FITTED: &[&str] = &[
    "--model gpt --layers 2 --heads 4 --width 128 --context 128 --effective-batch 16 --micro-batch 16",
    "--model gpt --layers 4 --heads 4 --width 256 --context 256 --effective-batch 8 --micro-batch 8",
    "--model gpt --layers 4 --heads 4 --width 256 --context 256 --effective-batch 8 --micro-batch 8 --checkpointing",
    "--model gpt --layers 4 --heads 4 --width 256 --context 256 --effective-batch 8 --micro-batch 8 --precision f16",
];

/// GPT settings drawn after that check, never used to adjust the census.
const GPT_HELD_OUT: &[&str] = &[
    "--model gpt --layers 3 --heads 2 --width 192 --context 192 --effective-batch 12 --micro-batch 12",
    "--model gpt --layers 6 --heads 8 --width 128 --context 128 --effective-batch 32 --micro-batch 8",
    "--model gpt --layers 2 --heads 4 --width 320 --context 320 --effective-batch 4 --micro-batch 4 --checkpointing",
    "--model gpt --layers 4 --heads 4 --width 160 --context 224 --effective-batch 12 --micro-batch 6 --precision f16",
    "--model gpt --layers 5 --heads 6 --width 192 --context 96 --effective-batch 24 --micro-batch 24 --optimizer sgd",
    "--model gpt --layers 4 --heads 2 --width 96 --context 384 --effective-batch 6 --micro-batch 6 --precision f16 --checkpointing",
];

/// The settings the planner's workspace factors were fitted on.
const FITTED: &[&str] = &[
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
];

/// Settings drawn after the fit, MLP and CNN, every lever: the planner's error here is
/// what to expect of a setting it has not seen.
const HELD_OUT: &[&str] = &[
    "--model mlp --hidden 896,448 --effective-batch 448 --micro-batch 112",
    "--model mlp --hidden 320,160 --effective-batch 1200 --micro-batch 1200",
    "--model mlp --hidden 1280 --effective-batch 640 --micro-batch 160 --precision f16",
    "--model mlp --hidden 2200,1100 --effective-batch 256 --micro-batch 256 --optimizer sgd --momentum 0.9",
    "--model mlp --hidden 768,768,768 --effective-batch 1024 --micro-batch 256 --checkpointing",
    "--model mlp --hidden 1024,1024,1024,1024 --effective-batch 1024 --micro-batch 1024 --precision f16 --checkpointing",
    "--model mlp --hidden 2800 --effective-batch 96 --micro-batch 96 --optimizer adamw",
    "--model cnn --channels 24,48 --effective-batch 48 --micro-batch 48",
    "--model cnn --channels 12,24 --effective-batch 160 --micro-batch 160",
    "--model cnn --channels 20,40 --effective-batch 128 --micro-batch 32 --precision f16",
    "--model cnn --channels 16,32 --effective-batch 128 --micro-batch 128 --checkpointing",
    "--model cnn --channels 8,16,32 --effective-batch 96 --micro-batch 96 --precision f16 --checkpointing",
];

/// Settings drawn after the calibration was built and never run while building it: what
/// the calibrated figure does on settings nobody looked at.
const FRESH: &[&str] = &[
    "--model mlp --hidden 1536,768 --effective-batch 384 --micro-batch 384",
    "--model mlp --hidden 600 --effective-batch 3000 --micro-batch 750",
    "--model mlp --hidden 2048 --effective-batch 512 --micro-batch 512 --precision f16",
    "--model mlp --hidden 1200,600,300 --effective-batch 600 --micro-batch 600 --checkpointing",
    "--model mlp --hidden 3500 --effective-batch 64 --micro-batch 64 --optimizer sgd",
    "--model mlp --hidden 900,900 --effective-batch 1800 --micro-batch 450 --precision f16 --checkpointing",
    "--model mlp --hidden 700,1400 --effective-batch 700 --micro-batch 350 --optimizer adamw",
    "--model cnn --channels 10,20 --effective-batch 200 --micro-batch 200",
    "--model cnn --channels 32,64 --effective-batch 32 --micro-batch 32 --optimizer adamw",
    "--model cnn --channels 16,32 --effective-batch 192 --micro-batch 48",
    "--model cnn --channels 12,24,48 --effective-batch 64 --micro-batch 64 --precision f16",
    "--model cnn --channels 20,40 --effective-batch 100 --micro-batch 100 --checkpointing",
];

/// What one `headroom train` process reported.
struct Measured {
    predicted: Breakdown,
    /// The calibrated device reservation (the run's calibrated peak less its data bound).
    calibrated: Option<u64>,
    /// What the probes below the pick alone say of it: the census corrected by the
    /// nearest of them, as the planner judges a micro-batch no probe ran.
    from_rungs_below: Option<u64>,
    reserved: u64,
    in_use: u64,
    /// Median over the steps after warm-up.
    samples_per_sec: f64,
    final_loss: f64,
    skipped: u64,
}

pub(super) fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// `headroom train <args> --metrics <metrics>` in a fresh process, and every event it
/// wrote; an error with its stderr where it failed.
pub(super) fn train_events(args: &[String], metrics: &Path) -> anyhow::Result<Vec<Value>> {
    let exe = std::env::current_exe().context("finding the headroom binary")?;
    let output = Command::new(exe)
        .arg("train")
        .args(args)
        .arg("--metrics")
        .arg(metrics)
        .output()
        .context("starting headroom train")?;
    if !output.status.success() {
        bail!(
            "headroom train {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let text = std::fs::read_to_string(metrics)?;
    Ok(text.lines().map(serde_json::from_str).collect::<Result<_, _>>()?)
}

fn train_once(
    data: &str,
    flags: &[String],
    steps: u64,
    warmup: u64,
    metrics: &Path,
) -> anyhow::Result<Measured> {
    let mut args = self::flags(&[
        "--data",
        data,
        "--no-eval",
        "--sample-chars",
        "0",
        "--steps",
        &steps.to_string(),
    ]);
    args.extend_from_slice(flags);
    let events = train_events(&args, metrics)?;
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
    let predicted: Breakdown = serde_json::from_value(started["predicted"].clone())?;
    Ok(Measured {
        predicted,
        calibrated: started["calibrated_peak"]
            .as_u64()
            .map(|peak| peak.saturating_sub(predicted.data)),
        from_rungs_below: from_rungs_below(started, predicted.device()),
        reserved: peak["gpu_bytes_reserved"].as_u64().unwrap_or(0),
        in_use: peak["gpu_bytes_in_use"].as_u64().unwrap_or(0),
        samples_per_sec: median(rates),
        final_loss: finished["final_loss"].as_f64().unwrap_or(f64::NAN),
        skipped: finished["skipped_steps"].as_u64().unwrap_or(0),
    })
}

/// How many errors fall within +-10% and +-15%, how many under-predict by more than 10%,
/// and the median and largest magnitude.
fn summarize(label: &str, errors: &[f64]) {
    let within = |bound: f64| errors.iter().filter(|e| e.abs() <= bound).count();
    let under = errors.iter().filter(|e| **e < -0.10).count();
    let mut magnitudes: Vec<f64> = errors.iter().map(|e| e.abs()).collect();
    magnitudes.sort_by(f64::total_cmp);
    println!(
        "{label}: {} of {n} within +-10%, {} within +-15%, {under} under by more than 10%; median error {:.1}%, largest {:.1}%",
        within(0.10),
        within(0.15),
        100.0 * magnitudes[magnitudes.len() / 2],
        100.0 * magnitudes[magnitudes.len() - 1],
        n = errors.len(),
    );
}

fn from_rungs_below(started: &Value, census: u64) -> Option<u64> {
    let pick = started["micro_batch"].as_u64()? as usize;
    let probes: Vec<Probe> = serde_json::from_value(started["calibration"]["probes"].clone()).ok()?;
    let below = Calibration::fit(probes.into_iter().filter(|p| p.micro_batch < pick).collect())?;
    let accumulating = started["accumulation_steps"]
        .as_u64()
        .is_some_and(|steps| steps > 1);
    Some(below.device_bytes(pick, accumulating, census))
}

pub(super) fn flags(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// samples/s and peak device memory per memory lever, each as a ratio to plain f32. The
/// levers take turns within each round, so a slow spell of the machine hits all of them.
pub fn bench_train(args: TrainBenchArgs) -> anyhow::Result<()> {
    let work = tempfile::tempdir()?;
    let batch = args.effective_batch.unwrap_or(match args.model.model {
        ModelKind::Cnn => 64,
        ModelKind::Gpt => 8,
        ModelKind::Mlp => 2048,
    });
    let quarter = (batch / 4).max(1).to_string();
    let mut base = args.model.to_flags();
    base.extend(flags(&[
        "--backend",
        &args.backend,
        "--effective-batch",
        &batch.to_string(),
    ]));
    let levers: [(&str, Vec<String>); 7] = [
        ("baseline f32", flags(&[])),
        ("accumulation 4x", flags(&["--micro-batch", &quarter])),
        ("f16", flags(&["--precision", "f16"])),
        ("f16 without master", flags(&["--precision", "f16-pure"])),
        ("8-bit moments", flags(&["--moments", "8bit"])),
        ("checkpointing", flags(&["--checkpointing"])),
        (
            "combined",
            flags(&["--micro-batch", &quarter, "--precision", "f16", "--checkpointing"]),
        ),
    ];
    let size = args.model.size();
    println!(
        "{} ({size}) on {}, effective batch {batch}, {} steps per setting, {} rounds (samples/s: median after {} warm-up steps, then median and range over rounds), each in a fresh process:",
        args.model.model_config().name(),
        args.backend,
        args.steps,
        args.runs,
        args.warmup
    );
    // The GPT's speed in tokens: a sample is a window of `context` positions.
    let tokens_per_sample: f64 = match args.model.model {
        ModelKind::Gpt => args.model.context as f64,
        _ => 1.0,
    };
    println!(
        "{:<18} {:>10} {:>15} {:>7} {:>12} {:>7} {:>12} {:>7} {:>10} {:>7}",
        "lever",
        if tokens_per_sample > 1.0 {
            "tokens/s"
        } else {
            "samples/s"
        },
        "range",
        "time",
        "reserved",
        "ratio",
        "in use",
        "ratio",
        "final loss",
        "skipped"
    );
    let runs = args.runs.max(1);
    let mut rounds: Vec<Vec<Measured>> = levers.iter().map(|_| Vec::new()).collect();
    for round in 0..runs {
        for (i, (name, extra)) in levers.iter().enumerate() {
            let all: Vec<String> = base.iter().chain(extra).cloned().collect();
            let metrics = work.path().join(format!("lever-{i}-{round}.jsonl"));
            rounds[i].push(train_once(&args.data, &all, args.steps, args.warmup, &metrics)?);
            // A lever's row as soon as its last round is in (the baseline's came first), so
            // that a caller who stops the bench early (tests/gpu-check's time limit) keeps
            // the rows already measured.
            if round + 1 == runs {
                print_lever(name, &rounds[i], &rounds[0], tokens_per_sample);
            }
        }
    }
    Ok(())
}

/// One lever's row of the table, against the baseline's rounds.
fn print_lever(name: &str, runs: &[Measured], baseline: &[Measured], tokens_per_sample: f64) {
    let (m, reference) = (Summary::of(runs), Summary::of(baseline));
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    let last = &runs[runs.len() - 1];
    println!(
        "{:<18} {:>10.0} {:>15} {:>7.2} {:>12} {:>7.2} {:>12} {:>7.2} {:>10.4} {:>7}",
        name,
        m.samples_per_sec * tokens_per_sample,
        format!(
            "{:.0}-{:.0}",
            m.slowest * tokens_per_sample,
            m.fastest * tokens_per_sample
        ),
        // Step time relative to the baseline: the inverse of the speed ratio.
        ratio(reference.samples_per_sec, m.samples_per_sec),
        format_bytes(m.reserved as usize),
        ratio(m.reserved, reference.reserved),
        format_bytes(m.in_use as usize),
        ratio(m.in_use, reference.in_use),
        last.final_loss,
        last.skipped,
    );
}

/// One lever over its rounds.
struct Summary {
    samples_per_sec: f64,
    slowest: f64,
    fastest: f64,
    reserved: f64,
    in_use: f64,
}

impl Summary {
    fn of(runs: &[Measured]) -> Self {
        let rates = || runs.iter().map(|m| m.samples_per_sec);
        Self {
            samples_per_sec: median(rates().collect()),
            slowest: rates().fold(f64::INFINITY, f64::min),
            fastest: rates().fold(0.0, f64::max),
            reserved: median(runs.iter().map(|m| m.reserved as f64).collect()),
            in_use: median(runs.iter().map(|m| m.in_use as f64).collect()),
        }
    }
}

/// Predicted against measured peak device reservation over a spread of configurations.
pub fn bench_plan(args: PlanBenchArgs) -> anyhow::Result<()> {
    let work = tempfile::tempdir()?;
    let lists: &[&[&str]] = match args.set {
        PlanSet::Fitted => &[FITTED],
        PlanSet::HeldOut => &[HELD_OUT],
        PlanSet::Fresh => &[FRESH],
        PlanSet::All => &[FITTED, HELD_OUT, FRESH],
        PlanSet::GptFitted => &[GPT_FITTED],
        PlanSet::GptHeldOut => &[GPT_HELD_OUT],
    };
    let configs: Vec<Vec<String>> = lists
        .iter()
        .flat_map(|list| list.iter())
        .map(|line| line.split(' ').map(String::from).collect())
        .collect();
    println!(
        "predicted vs measured peak device reservation (wgpu), {} steps per configuration, each in a fresh process:",
        args.steps
    );
    println!(
        "{:<58} {:>10} {:>7} {:>10} {:>7} {:>10} {:>7} {:>10} {:>10} {:>10}",
        "configuration",
        "census",
        "error",
        "calibrated",
        "error",
        "rungs below",
        "error",
        "reserved",
        "cens. live",
        "in use"
    );
    let (mut census_errors, mut calibrated_errors, mut below_errors) = (Vec::new(), Vec::new(), Vec::new());
    let error = |predicted: u64, measured: u64| (predicted as f64 - measured as f64) / measured.max(1) as f64;
    for (i, config) in configs.iter().enumerate() {
        let metrics = work.path().join(format!("plan-{i}.jsonl"));
        let m = train_once(&args.data, config, args.steps, 0, &metrics)?;
        let census = m.predicted.device();
        census_errors.push(error(census, m.reserved));
        let calibrated = m.calibrated.unwrap_or(0);
        calibrated_errors.push(error(calibrated, m.reserved));
        // A pick the ladder reached in one rung has nothing below it: the census stands in.
        let below = m.from_rungs_below.unwrap_or(census);
        below_errors.push(error(below, m.reserved));
        println!(
            "{:<58} {:>10} {:>+6.1}% {:>10} {:>+6.1}% {:>10} {:>+6.1}% {:>10} {:>10} {:>10}",
            config.join(" "),
            format_bytes(census as usize),
            100.0 * census_errors[i],
            format_bytes(calibrated as usize),
            100.0 * calibrated_errors[i],
            format_bytes(below as usize),
            100.0 * below_errors[i],
            format_bytes(m.reserved as usize),
            format_bytes(m.predicted.tensors() as usize),
            format_bytes(m.in_use as usize),
        );
    }
    summarize("census", &census_errors);
    summarize("calibrated", &calibrated_errors);
    summarize("rungs below the pick", &below_errors);
    Ok(())
}
