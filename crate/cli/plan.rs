//! `headroom plan`: what the planner predicts for a run under a cap, before any step,
//! optionally calibrated by probe steps on the device.

use clap::Args;

use crate::data::{DataSource, StreamOptions};
use crate::flags::ModelArgs;
use crate::memory::{Candidate, Plan, plan};
use crate::train::plan::{effective_precision, input_shape};
use crate::train::probe::{ProbeReport, ProbeStage, probed_plan};
use crate::train::{
    BackendKind, Moments, OptimizerConfig, OptimizerKind, Precision, TrainConfig, plan as train_plan,
};
use crate::units::{format_bytes, format_bytes_up, parse_bytes};

#[derive(Args)]
pub struct PlanArgs {
    /// Dataset URL or folder: its sample shape and chunk sizes enter the plan.
    #[arg(long)]
    data: String,
    #[command(flatten)]
    model: ModelArgs,
    #[arg(long, value_parser = parse_bytes)]
    cap: Option<u64>,
    /// Only this precision (default: every precision the backend supports).
    #[arg(long, value_enum)]
    precision: Option<Precision>,
    /// Only with (true) or without (false) activation checkpointing (default: both).
    #[arg(long)]
    checkpointing: Option<bool>,
    /// Only Adam's moments kept this way (default: f32 and 8-bit for Adam(W)).
    #[arg(long, value_enum)]
    moments: Option<Moments>,
    #[arg(long, value_enum, default_value = "adam")]
    optimizer: OptimizerKind,
    #[arg(long, value_enum, default_value = "wgpu")]
    backend: BackendKind,
    #[arg(long, default_value_t = 2)]
    prefetch: usize,
    /// Also run the probe steps on the device for the picked precision and checkpointing,
    /// and show the calibrated figures beside the census's.
    #[arg(long)]
    calibrate: bool,
    /// Print the plan as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: PlanArgs) -> anyhow::Result<()> {
    if let Some(why) = args.backend.unavailable() {
        anyhow::bail!(why);
    }
    let stream = StreamOptions {
        prefetch: args.prefetch,
        window: args.model.model_config().text_window(),
        ..StreamOptions::default()
    };
    let source = DataSource::open(&args.data, stream.clone()).await?;
    let input = input_shape(source.manifest())?;
    let config = TrainConfig {
        model: args.model.model_config(),
        effective_batch: args.model.effective_batch,
        micro_batch: args.model.micro_batch.fixed(),
        optimizer: OptimizerConfig {
            kind: args.optimizer,
            ..OptimizerConfig::default()
        },
        cap: args.cap,
        stream,
        ..TrainConfig::default()
    };
    config.validate(&input).map_err(anyhow::Error::msg)?;
    // Made first: the lever costs follow its adapter (train::plan::lever_costs).
    let device = args.backend.device();
    let precisions = match args.precision {
        Some(precision) => vec![precision],
        None => match effective_precision(Precision::F16, &device, args.backend.name()) {
            (Precision::F16, _) => vec![Precision::F32, Precision::F16, Precision::F16Pure],
            (_, note) => {
                eprintln!("note: {}", note.unwrap_or_default());
                vec![Precision::F32]
            }
        },
    };
    let (train, eval) = train_plan::footprints(&config, &source);
    let data = train_plan::data_options(&config, train, eval);
    let mut request = train_plan::request(&config, &input, data, args.backend.name());
    request.precisions = precisions;
    request.checkpointing = match args.checkpointing {
        Some(only) => vec![only],
        None => vec![false, true],
    };
    request.moments = match (args.moments, args.optimizer) {
        (Some(only), _) => vec![only],
        (None, OptimizerKind::Sgd) => vec![Moments::F32],
        (None, _) => vec![Moments::F32, Moments::Q8],
    };
    let mut plan = plan(&request, args.cap);
    if args.calibrate {
        calibrate(&mut plan, &config, &source, args.backend).await?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&plan)?);
    } else {
        print_table(&plan);
    }
    match (plan.chosen(), args.cap) {
        (Some(_), _) | (None, None) => Ok(()),
        (None, Some(cap)) => anyhow::bail!(
            "no setting fits a cap of {}; the smallest plan needs {}",
            format_bytes(cap as usize),
            format_bytes_up(plan.smallest_fitting_cap().unwrap_or(0) as usize)
        ),
    }
}

/// Probes the setting the census picked (its precision and checkpointing; the first
/// candidate's where none fits) and puts the calibrated figures on that setting's
/// candidates; the pick is made again among them.
async fn calibrate(
    plan: &mut Plan,
    config: &TrainConfig,
    source: &DataSource,
    backend: BackendKind,
) -> anyhow::Result<()> {
    let setting = plan.chosen().unwrap_or(&plan.candidates[0]);
    let levers = setting.levers();
    let config = TrainConfig {
        precision: Some(levers.precision),
        checkpointing: Some(levers.checkpointing),
        moments: Some(levers.moments),
        calibrate: true,
        ..config.clone()
    };
    let device = backend.device().autodiff();
    let (probed, _) = probed_plan(&config, source, &device, backend.name(), &mut print_probe).await?;
    let Some(calibration) = probed.plan.calibration else {
        eprintln!(
            "note: the {} backend reports no device pool to calibrate on",
            backend.name()
        );
        return Ok(());
    };
    let (probed_setting, mut others): (Vec<Candidate>, Vec<Candidate>) =
        plan.candidates.drain(..).partition(|c| c.levers() == levers);
    plan.candidates = probed_setting;
    plan.calibrate(calibration);
    // The other settings keep the census's figure, and are not picked over a measured one.
    for c in &mut others {
        c.fits = false;
    }
    plan.candidates.extend(others);
    Ok(())
}

/// A line as a probe starts, and one as it ends: before step 1 the probes are all a run
/// shows, for minutes on a slow device.
pub(super) fn print_probe(report: &ProbeReport) {
    let stage = match report.stage {
        ProbeStage::WarmUp => "warm-up",
        ProbeStage::Ladder => "ladder",
        ProbeStage::Climb => "climb",
        ProbeStage::Confirm => "confirming the pick",
    };
    let levers = report.levers;
    let setting = format!(
        "micro-batch {}{}, {}{}{}",
        report.micro_batch,
        if report.accumulating { " x 2" } else { "" },
        levers.precision,
        if levers.checkpointing {
            ", checkpointing"
        } else {
            ""
        },
        if levers.moments == Moments::Q8 {
            ", 8-bit moments"
        } else {
            ""
        },
    );
    match (report.finished, report.peak_reserved) {
        (false, _) => println!(
            "probe ({stage}): {setting}, census {} MiB ...",
            mib(report.census_reserved)
        ),
        (true, Some(peak)) => println!(
            "probe ({stage}): {setting}: peak {} MiB reserved, {:.1} s",
            mib(peak),
            report.seconds
        ),
        (true, None) => println!("probe ({stage}): {setting}: done, {:.1} s", report.seconds),
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1024.0 * 1024.0))
}

fn print_table(plan: &Plan) {
    println!(
        "{:>1} {:>6} {:>5} {:>4} {:>5} {:>5} {:>3} {:>6} | {:>7} {:>7} {:>7} {:>7} {:>8} {:>7} {:>7} {:>6} | {:>8} {:>8} {:>4} {:>5}",
        "",
        "micro",
        "accum",
        "prec",
        "ckpt",
        "mom.",
        "pf",
        "eval",
        "params",
        "master",
        "grads",
        "optim",
        "activ",
        "work",
        "pages",
        "data",
        "census",
        "calib.",
        "fits",
        "time"
    );
    for (i, c) in plan.candidates.iter().enumerate() {
        let b = &c.breakdown;
        println!(
            "{:>1} {:>6} {:>5} {:>4} {:>5} {:>5} {:>3} {:>6} | {:>7} {:>7} {:>7} {:>7} {:>8} {:>7} {:>7} {:>6} | {:>8} {:>8} {:>4} {:>5.2}",
            if plan.chosen == Some(i) { "*" } else { "" },
            c.micro_batch,
            c.accumulation_steps,
            c.precision,
            if c.checkpointing { "yes" } else { "no" },
            c.moments.to_string(),
            c.data.prefetch,
            if c.data.pause_training_for_eval {
                "paused"
            } else {
                "beside"
            },
            mib(b.parameters),
            mib(b.master_weights),
            mib(b.gradients),
            mib(b.optimizer_state),
            mib(b.activations),
            mib(b.workspace),
            mib(b.allocator_overhead),
            mib(b.data),
            mib(c.predicted_peak),
            c.calibrated_peak.map_or("-".into(), mib),
            if c.fits { "yes" } else { "no" },
            c.relative_time,
        );
    }
    match (plan.chosen(), plan.cap) {
        (Some(c), Some(cap)) => println!(
            "* picked (the least expected time per sample, against one f32 pass of the whole batch, that fits): \
             micro-batch {} x {} accumulated, {}{}{}, {}: {} of the {} cap, {:.2}x the time",
            c.micro_batch,
            c.accumulation_steps,
            c.precision,
            if c.checkpointing { ", checkpointing" } else { "" },
            if c.moments == Moments::Q8 {
                ", 8-bit moments"
            } else {
                ""
            },
            c.data,
            format_bytes(c.peak() as usize),
            format_bytes(cap as usize),
            c.relative_time
        ),
        (Some(c), None) => println!(
            "* picked (no cap): micro-batch {}, {} predicted",
            c.micro_batch,
            format_bytes(c.peak() as usize)
        ),
        (None, _) => {}
    }
}
