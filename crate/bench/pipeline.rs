//! The data pipeline as a lever: samples/s against the bytes it holds, for each prefetch
//! depth with evaluation beside training or with the training stream paused, and the run
//! the planner picks under a cap beside the uncapped one. Each run is its own
//! `headroom train` process, evaluating as a user's run does.

use std::path::Path;

use anyhow::Context;
use clap::Args;
use serde_json::Value;

use super::train::{flags, median, train_events};
use crate::units::{format_bytes, parse_bytes};

#[derive(Args)]
pub struct PipelineBenchArgs {
    /// Dataset URL or folder.
    #[arg(long)]
    data: String,
    /// MLP hidden widths.
    #[arg(long, default_value = "256")]
    hidden: String,
    #[arg(long, default_value_t = 256)]
    effective_batch: usize,
    #[arg(long, default_value_t = 60)]
    steps: u64,
    #[arg(long, default_value_t = 20)]
    eval_every: u64,
    #[arg(long, default_value_t = 2000)]
    eval_samples: usize,
    /// Rounds over every setting, in turn (these machines are noisy).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// The cap of the last row, where the planner picks the data settings itself.
    #[arg(long, value_parser = parse_bytes, default_value = "16MiB")]
    cap: u64,
    #[arg(long, default_value = "wgpu")]
    backend: String,
}

/// One run's figures.
struct Measured {
    samples_per_sec: f64,
    data_predicted: u64,
    data_peak: u64,
    /// Device reservation plus data held, the largest sample: what the cap counts.
    counted_peak: u64,
    picked: String,
}

fn run_once(args: &PipelineBenchArgs, extra: &[String], metrics: &Path) -> anyhow::Result<Measured> {
    let mut train_args = flags(&[
        "--data",
        &args.data,
        "--backend",
        &args.backend,
        "--hidden",
        &args.hidden,
    ]);
    train_args.extend(flags(&["--effective-batch", &args.effective_batch.to_string()]));
    train_args.extend(flags(&[
        "--steps",
        &args.steps.to_string(),
        "--eval-every",
        &args.eval_every.to_string(),
    ]));
    train_args.extend(flags(&["--eval-samples", &args.eval_samples.to_string()]));
    train_args.extend_from_slice(extra);
    let events = train_events(&train_args, metrics)?;
    let find = |kind: &str| {
        events
            .iter()
            .find(|e| e["event"] == kind)
            .context("missing event")
    };
    let (started, finished) = (find("started")?, find("finished")?);
    let counted = |m: &Value| {
        m["gpu_bytes_reserved"].as_u64().unwrap_or(0) + m["data_bytes_held"].as_u64().unwrap_or(0)
    };
    let data = &started["data"];
    Ok(Measured {
        // The whole run, evaluations and refetches included: what the user waits for.
        samples_per_sec: finished["samples_per_sec"].as_f64().unwrap_or(f64::NAN),
        data_predicted: started["predicted"]["data"].as_u64().unwrap_or(0),
        data_peak: finished["data_peak_bytes"].as_u64().unwrap_or(0),
        counted_peak: events
            .iter()
            .filter(|e| e["event"] == "step" || e["event"] == "eval")
            .map(|e| counted(&e["memory"]))
            .max()
            .unwrap_or(0),
        picked: format!(
            "micro {}, prefetch {}{}",
            started["micro_batch"],
            data["prefetch"],
            if data["pause_training_for_eval"] == true {
                ", paused"
            } else {
                ""
            }
        ),
    })
}

pub fn bench_pipeline(args: PipelineBenchArgs) -> anyhow::Result<()> {
    let work = tempfile::tempdir()?;
    let mut settings: Vec<(String, Vec<String>)> = Vec::new();
    for prefetch in [2, 1, 0] {
        for pause in [false, true] {
            let name = format!(
                "prefetch {prefetch}, {}",
                if pause { "paused for eval" } else { "eval beside" }
            );
            let flags = vec![
                "--prefetch".into(),
                prefetch.to_string(),
                "--pause-training-for-eval".into(),
                pause.to_string(),
            ];
            settings.push((name, flags));
        }
    }
    let cap = args.cap.to_string();
    settings.push((
        format!("planned under {}", format_bytes(args.cap as usize)),
        vec!["--cap".into(), cap],
    ));
    println!(
        "MLP {} at effective batch {}, {} steps, evaluating {} samples every {} steps, on {}; {} rounds, each run in a fresh process (samples/s over the whole run: median and range):",
        args.hidden,
        args.effective_batch,
        args.steps,
        args.eval_samples,
        args.eval_every,
        args.backend,
        args.runs
    );
    let mut rounds: Vec<Vec<Measured>> = settings.iter().map(|_| Vec::new()).collect();
    for round in 0..args.runs.max(1) {
        for (i, (_, flags)) in settings.iter().enumerate() {
            let metrics = work.path().join(format!("pipeline-{i}-{round}.jsonl"));
            rounds[i].push(run_once(&args, flags, &metrics)?);
        }
    }
    println!(
        "{:<30} {:>10} {:>13} {:>6} {:>11} {:>11} {:>7} {:>12}  picked",
        "setting", "samples/s", "range", "ratio", "data pred.", "data peak", "error", "counted max"
    );
    let speed = |runs: &[Measured]| median(runs.iter().map(|m| m.samples_per_sec).collect());
    let reference = speed(&rounds[0]);
    for ((name, _), runs) in settings.iter().zip(&rounds) {
        let rates: Vec<f64> = runs.iter().map(|m| m.samples_per_sec).collect();
        let (slowest, fastest) = (
            rates.iter().copied().fold(f64::INFINITY, f64::min),
            rates.iter().copied().fold(0.0, f64::max),
        );
        let last = &runs[runs.len() - 1];
        let data_peak = median(runs.iter().map(|m| m.data_peak as f64).collect());
        let error = (last.data_predicted as f64 - data_peak) / data_peak.max(1.0);
        let counted_max = runs.iter().map(|m| m.counted_peak).max().unwrap_or(0);
        println!(
            "{:<30} {:>10.0} {:>13} {:>6.2} {:>11} {:>11} {:>+6.1}% {:>12}  {}",
            name,
            speed(runs),
            format!("{slowest:.0}-{fastest:.0}"),
            speed(runs) / reference,
            format_bytes(last.data_predicted as usize),
            format_bytes(data_peak as usize),
            100.0 * error,
            format_bytes(counted_max as usize),
            last.picked,
        );
    }
    println!(
        "ratio: samples/s against the first row (prefetch 2, evaluation beside training: the uncapped default)"
    );
    Ok(())
}
