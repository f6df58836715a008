//! `headroom train`: one run on the command line, its events printed as they come and
//! written to `--metrics`, saved runs under `--checkpoint-dir`.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use super::checkpoint_dir;
use crate::data::{DataSource, StreamOptions};
use crate::flags::ModelArgs;
use crate::memory::PhaseSample;
use crate::model::generate::SampleSettings;
use crate::train::config::SampleConfig;
use crate::train::probe::ProbeReport;
use crate::train::saved_run;
use crate::train::{
    BackendKind, Duration, Moments, OptimizerConfig, OptimizerKind, Precision, Progress, TrainConfig,
    TrainEvent, Trainer,
};
use crate::units::{format_bytes, format_rate, parse_bytes};

#[derive(Args)]
pub struct TrainArgs {
    /// Dataset URL or folder (the one holding manifest.json); with --resume, the saved
    /// run's unless given.
    #[arg(long, required_unless_present = "resume")]
    data: Option<String>,
    #[command(flatten)]
    model: ModelArgs,
    /// Hard cap on device memory plus data pipeline, like 256MiB or 1GB.
    #[arg(long, value_parser = parse_bytes)]
    cap: Option<u64>,
    /// f16 stores parameters and activations in half precision (f32 master weights).
    /// Default: under --cap the planner picks (f16 where the device has it and it is the
    /// faster setting that fits); f32 without a cap.
    #[arg(long, value_enum)]
    precision: Option<Precision>,
    /// How Adam(W) keeps its two moments: f32, or 8 bits a value with a scale per block of
    /// 256 (block-wise dynamic quantisation). Default: under --cap the planner picks (8-bit
    /// where that is the faster setting that fits); f32 without a cap.
    #[arg(long, value_enum)]
    moments: Option<Moments>,
    #[arg(long, value_enum, default_value = "adam")]
    optimizer: OptimizerKind,
    #[arg(long, default_value_t = 1e-3)]
    lr: f64,
    /// SGD momentum.
    #[arg(long, default_value_t = 0.9)]
    momentum: f64,
    #[arg(long, default_value_t = 0.0)]
    weight_decay: f64,
    /// Adam(W)'s second-moment decay.
    #[arg(long, default_value_t = 0.999)]
    beta2: f32,
    #[arg(long, default_value_t = 0)]
    warmup_steps: u64,
    /// The learning rate at the end of the run, as a fraction of --lr (cosine decay after
    /// warm-up); 1 keeps it constant.
    #[arg(long, default_value_t = 0.05)]
    final_lr_fraction: f64,
    /// Clip the gradients' global L2 norm.
    #[arg(long)]
    clip_norm: Option<f32>,
    #[arg(long, value_enum, default_value = "wgpu")]
    backend: BackendKind,
    /// Recompute activations during backward instead of keeping them. Default: under --cap
    /// the planner turns it on where that is the faster setting that fits; off without a
    /// cap.
    #[arg(long, conflicts_with = "no_checkpointing")]
    checkpointing: bool,
    /// Keep every activation, even where the planner would recompute them under --cap.
    #[arg(long)]
    no_checkpointing: bool,
    /// Plan on the tensor census alone: skip the probe steps that measure the device's
    /// peak before step 1.
    #[arg(long)]
    no_calibrate: bool,
    #[arg(long, conflicts_with = "steps")]
    epochs: Option<u64>,
    #[arg(long)]
    steps: Option<u64>,
    /// Evaluate on the test split every N steps (default: after each epoch).
    #[arg(long, default_value_t = 0)]
    eval_every: u64,
    /// Skip evaluation on the test split.
    #[arg(long)]
    no_eval: bool,
    /// Evaluate on the first N samples the test stream yields instead of the whole split.
    #[arg(long)]
    eval_samples: Option<usize>,
    /// Read samples in file order instead of a seeded shuffle (to feed another framework
    /// the same batches).
    #[arg(long)]
    no_shuffle: bool,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Chunks fetched ahead of the one in use, at most: under a cap the planner may fetch
    /// fewer ahead.
    #[arg(long, default_value_t = 2)]
    prefetch: usize,
    /// Training chunks read at once, each sample drawn from one of them (default: 32 for
    /// text, whose chunks are runs of one text; 1 for images).
    #[arg(long)]
    mix_chunks: Option<usize>,
    /// Release the training stream's chunks while evaluating (true) or keep them (false);
    /// by default the planner decides, keeping them where the cap allows.
    #[arg(long)]
    pause_training_for_eval: Option<bool>,
    /// GPT: write a text sample every N steps (0: only at the end).
    #[arg(long, default_value_t = 0)]
    sample_every: u64,
    /// GPT: characters per text sample (0: none).
    #[arg(long, default_value_t = 200)]
    sample_chars: usize,
    /// GPT: sampling temperature (0: always the likeliest character).
    #[arg(long, default_value_t = 0.8)]
    temperature: f32,
    /// GPT: the text samples start from.
    #[arg(long, default_value = "\n")]
    prompt: String,
    /// Write every event as a JSON line to this file.
    #[arg(long)]
    metrics: Option<PathBuf>,
    /// Print, after each step, every memory sample it took (after each forward pass, each
    /// recomputed segment, each backward pass and the update) with the device's reserved
    /// and in-use bytes: where a step's peak is, and how far the allocator's pages stand
    /// above the tensors there. Step events in --metrics carry them as memory_phases.
    #[arg(long)]
    memory_phases: bool,
    /// Save the finished run into this folder: the model, its config and the optimizer's
    /// state, which `headroom eval` evaluates and `--resume` trains on from.
    #[arg(long)]
    save: Option<PathBuf>,
    /// Save the whole run into this folder every --checkpoint-every steps, and on Ctrl-C.
    #[arg(long)]
    checkpoint_dir: Option<PathBuf>,
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    checkpoint_every: u64,
    /// Go on with the run saved in this folder (by --checkpoint-dir or --save), or in a run
    /// file the page exported (with --data), with its settings: the model, optimizer, batch and data flags are not read. --steps or
    /// --epochs set a new end; checkpoints go on into the same folder unless
    /// --checkpoint-dir names another.
    #[arg(long)]
    resume: Option<PathBuf>,
    /// Start from the parameters in this safetensors file (`headroom export`'s, or a state
    /// dict saved from web/compare's PyTorch definitions of the same network) instead of
    /// fresh ones. Names and shapes must match the model the flags build.
    #[arg(long, conflicts_with = "resume")]
    init: Option<PathBuf>,
}

impl TrainArgs {
    /// The duration asked for, if any.
    fn duration(&self) -> Option<Duration> {
        match (self.steps, self.epochs) {
            (Some(steps), _) => Some(Duration::Steps(steps)),
            (None, Some(epochs)) => Some(Duration::Epochs(epochs)),
            (None, None) => None,
        }
    }

    fn config(&self) -> TrainConfig {
        let model = self.model.model_config();
        let duration = self.duration().unwrap_or(Duration::Epochs(1));
        TrainConfig {
            model,
            optimizer: OptimizerConfig {
                kind: self.optimizer,
                learning_rate: self.lr,
                momentum: self.momentum,
                weight_decay: self.weight_decay,
                beta_2: self.beta2,
                warmup_steps: self.warmup_steps,
                final_lr_fraction: self.final_lr_fraction,
                clip_norm: self.clip_norm,
                ..OptimizerConfig::default()
            },
            effective_batch: self.model.effective_batch,
            micro_batch: self.model.micro_batch.fixed(),
            duration,
            checkpointing: match (self.checkpointing, self.no_checkpointing) {
                (true, _) => Some(true),
                (false, true) => Some(false),
                (false, false) => None,
            },
            precision: self.precision,
            moments: self.moments,
            cap: self.cap,
            calibrate: !self.no_calibrate,
            eval_every: self.eval_every,
            evaluate: !self.no_eval,
            eval_samples: self.eval_samples,
            pause_training_for_eval: self.pause_training_for_eval,
            seed: self.seed,
            stream: StreamOptions {
                prefetch: self.prefetch,
                seed: self.seed,
                shuffle: !self.no_shuffle,
                mix: self.mix_chunks,
                ..StreamOptions::default()
            },
            sample_every: self.sample_every,
            sample: SampleConfig {
                prompt: self.prompt.clone(),
                generation: SampleSettings {
                    tokens: self.sample_chars,
                    temperature: self.temperature,
                    seed: self.seed,
                },
            },
        }
    }
}

fn memory_text(memory: &crate::memory::MemorySample) -> String {
    let gpu = memory
        .gpu_bytes_reserved
        .map(|b| format!("gpu {}", format_bytes(b as usize)));
    let host = memory
        .host_bytes
        .map(|b| format!("host {}", format_bytes(b as usize)));
    let data = Some(format!("data {}", format_bytes(memory.data_bytes_held as usize)));
    [gpu, host, data]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(", ")
}

/// Prints a run's events as they come and writes them to `--metrics`.
struct Report {
    bar: ProgressBar,
    metrics: Option<std::io::BufWriter<std::fs::File>>,
    write_error: Option<std::io::Error>,
    last_eval: String,
    tokens_per_sample: Option<usize>,
    cap: Option<u64>,
}

impl Report {
    fn new(metrics: Option<&PathBuf>) -> anyhow::Result<Self> {
        let metrics = match metrics {
            Some(path) => Some(std::io::BufWriter::new(
                std::fs::File::create(path).with_context(|| format!("cannot write {}", path.display()))?,
            )),
            None => None,
        };
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} steps {elapsed_precise} eta {eta} | {msg}")
                .expect("a valid template"),
        );
        Ok(Report {
            bar,
            metrics,
            write_error: None,
            last_eval: String::new(),
            tokens_per_sample: None,
            cap: None,
        })
    }

    fn event(&mut self, event: &TrainEvent) {
        if let Some(out) = self.metrics.as_mut() {
            let written = serde_json::to_writer(&mut *out, event).map_err(std::io::Error::from);
            if let Err(error) = written.and_then(|_| out.write_all(b"\n")) {
                self.write_error.get_or_insert(error);
            }
        }
        match event {
            TrainEvent::Probe(probe) => self.bar.suspend(|| super::plan::print_probe(probe)),
            TrainEvent::Started(started) => {
                self.cap = started.cap;
                self.bar.set_length(started.total_steps);
                self.bar.set_position(started.resumed_at.unwrap_or(0));
                self.tokens_per_sample = started.tokens_per_sample;
                self.bar.suspend(|| {
                    if let Some(note) = &started.precision_note {
                        println!("note: {note}");
                    }
                    if let Some(reason) = &started.levers_reason {
                        println!("levers: {reason}");
                    }
                    let cap = started.cap.map_or(String::new(), |cap| {
                        format!(", cap {}", format_bytes(cap as usize))
                    });
                    println!(
                        "{} with {} parameters on {}: {} steps of {} samples ({} x {}), {}{}{}{}, predicted peak {}{}",
                        started.model,
                        started.parameters,
                        started.backend,
                        started.total_steps,
                        started.effective_batch,
                        started.accumulation_steps,
                        started.micro_batch,
                        started.precision,
                        match (started.checkpointing, started.updates_in_backward) {
                            (true, true) => ", activation checkpointing (updating inside backward)",
                            (true, false) => ", activation checkpointing",
                            (false, _) => "",
                        },
                        if started.moments == Moments::Q8 { ", 8-bit moments" } else { "" },
                        cap,
                        format_bytes(started.predicted_peak as usize),
                        started.calibrated_peak.map_or(String::new(), |peak| format!(
                            " (census), {} (calibrated on probe steps)",
                            format_bytes(peak as usize)
                        )),
                    )
                });
            }
            TrainEvent::Enforced(change) => self.bar.suspend(|| {
                let source = if change.predicted { "predicted" } else { "measured" };
                println!(
                    "cap: {} {source} against a cap of {} after step {}: micro-batch {} -> {} ({} accumulated)",
                    format_bytes(change.peak_bytes as usize),
                    format_bytes(change.cap as usize),
                    change.step,
                    change.from_micro_batch,
                    change.to_micro_batch,
                    change.accumulation_steps
                )
            }),
            TrainEvent::Step(step) => {
                self.bar.set_position(step.step);
                let cap = self.cap.map_or(String::new(), |cap| {
                    format!(" of cap {}", format_bytes(cap as usize))
                });
                let speed = match self.tokens_per_sample {
                    Some(tokens) => format!(
                        "{} tokens/s",
                        format_rate(step.samples_per_sec * tokens as f64)
                    ),
                    None => format!("{} samples/s", format_rate(step.samples_per_sec)),
                };
                self.bar.set_message(format!(
                    "loss {:.4}{} | {speed} | micro {} | {}{cap}",
                    step.loss,
                    self.last_eval,
                    step.micro_batch,
                    memory_text(&step.memory)
                ));
                if !step.memory_phases.is_empty() {
                    self.bar.suspend(|| print!("{}", phases_text(step.step, &step.memory_phases)));
                }
            }
            TrainEvent::Eval(eval) => {
                self.last_eval = format!(" | test acc {:.2}%", 100.0 * eval.accuracy);
                self.bar.suspend(|| {
                    println!(
                        "step {}: test loss {:.4}, perplexity {:.2}, accuracy {:.2}%",
                        eval.step,
                        eval.loss,
                        eval.perplexity,
                        100.0 * eval.accuracy
                    )
                });
            }
            TrainEvent::Sample(sample) => self.bar.suspend(|| {
                println!("step {} sample:\n{}{}\n", sample.step, sample.prompt, sample.text)
            }),
            TrainEvent::Finished(_) => self.bar.finish_and_clear(),
        }
    }

    /// Flushes the metrics file; the first error writing it, if any.
    fn finish(self) -> anyhow::Result<()> {
        if let Some(error) = self.write_error {
            return Err(error).context("writing metrics");
        }
        if let Some(mut out) = self.metrics {
            out.flush().context("writing metrics")?;
        }
        Ok(())
    }
}

/// A step's memory samples, a line each: the phase, then the device's reserved and in-use
/// bytes (or the host's, where the backend has no device pool).
fn phases_text(step: u64, phases: &[PhaseSample]) -> String {
    let mut text = format!("step {step}: memory by phase (device reserved / in use)\n");
    for PhaseSample { phase, memory } in phases {
        let bytes = |b: Option<u64>| b.map_or("-".to_string(), |b| format_bytes(b as usize));
        text += &format!(
            "  {:<22} {:>11} / {:>11}\n",
            phase.to_string(),
            bytes(memory.gpu_bytes_reserved),
            bytes(memory.gpu_bytes_in_use)
        );
    }
    text
}

/// The trainer and its progress: a fresh run, or the one saved in `--resume`'s folder. Also
/// the data location the run reads.
async fn start(
    args: &TrainArgs,
    report: &mut Report,
) -> anyhow::Result<(Trainer, Progress, DataSource, String)> {
    let (device, backend) = (args.backend.device(), args.backend.name());
    println!("device: {}", crate::ops::backend::runtime_name(&device));
    let Some(dir) = &args.resume else {
        let config = args.config();
        let data = args.data.clone().context("--data is required")?;
        let source = DataSource::open(&data, config.stream_options()).await?;
        let mut on_probe = |probe: &ProbeReport| report.event(&TrainEvent::Probe(probe.clone()));
        let mut trainer = Trainer::reporting_probes(config, &source, device, backend, &mut on_probe).await?;
        if let Some(path) = &args.init {
            let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
            trainer
                .load_weights(&bytes)
                .with_context(|| format!("--init {}", path.display()))?;
            println!("starting from the parameters in {}", path.display());
        }
        return Ok((trainer, Progress::default(), source, data));
    };
    let (saved_data, saved) = checkpoint_dir::load(dir)?;
    let data = args.data.clone().or(saved_data).context(super::eval::NO_DATA)?;
    let source = DataSource::open(&data, saved.state.config.stream_options()).await?;
    let duration = args.duration();
    let (trainer, progress) = saved_run::restore(
        &saved,
        |config| config.duration = duration.unwrap_or(config.duration),
        &source,
        device,
        backend,
    )
    .await?;
    println!(
        "resuming the run saved in {} at step {}",
        dir.display(),
        trainer.step()
    );
    Ok((trainer, progress, source, data))
}

/// Set by Ctrl-C: the run stops after the step under way, saving itself first where it
/// has a checkpoint folder.
fn interrupt_flag() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    let set = flag.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            set.store(true, Ordering::SeqCst);
        }
    });
    flag
}

pub async fn run(args: TrainArgs) -> anyhow::Result<()> {
    if let Some(why) = args.backend.unavailable() {
        anyhow::bail!(why);
    }
    let mut report = Report::new(args.metrics.as_ref())?;
    let (mut trainer, mut progress, source, data) = start(&args, &mut report).await?;
    if args.memory_phases {
        trainer.record_memory_phases();
    }
    let config = trainer.config().clone();
    // A folder run goes on saving where it was saved; a run file from the page only where
    // --checkpoint-dir says.
    let resumed_folder = args.resume.clone().filter(|path| path.is_dir());
    let checkpoints = args.checkpoint_dir.clone().or(resumed_folder);
    let interrupted = interrupt_flag();
    let summary = loop {
        let before = trainer.step();
        for event in progress.advance(&mut trainer, &source).await? {
            report.event(&event);
        }
        if let Some(summary) = progress.summary() {
            break summary.clone();
        }
        let stop = interrupted.load(Ordering::SeqCst);
        let due = trainer.step() > before && trainer.step() % args.checkpoint_every == 0;
        if let Some(dir) = checkpoints.as_ref().filter(|_| due || stop) {
            let saved = saved_run::capture(&trainer, &progress, &source).await?;
            report.bar.suspend(|| checkpoint_dir::save(dir, &data, &saved))?;
        }
        if stop {
            report.bar.abandon();
            let saved = checkpoints.as_ref().map_or(String::new(), |dir| {
                format!(
                    "; saved in {0}: go on with headroom train --resume {0}",
                    dir.display()
                )
            });
            anyhow::bail!("interrupted after step {}{saved}", trainer.step());
        }
    };
    report.finish()?;
    println!(
        "done: {} steps, {} samples in {:.1} s ({} samples/s), final loss {:.4}",
        summary.steps,
        summary.samples_seen,
        summary.seconds,
        format_rate(summary.samples_per_sec),
        summary.final_loss
    );
    if let Some(eval) = &summary.eval {
        println!(
            "test accuracy {:.2}% (loss {:.4}) on {} samples",
            100.0 * eval.accuracy,
            eval.loss,
            eval.samples
        );
    }
    println!("peak memory: {}", memory_text(&summary.peak_memory));
    if summary.skipped_steps > 0 {
        println!(
            "{} steps skipped on f16 gradient overflow (loss scaling)",
            summary.skipped_steps
        );
    }
    if let Some(cap) = config.cap {
        println!(
            "cap {}: {} micro-batch change(s), ending at micro-batch {}",
            format_bytes(cap as usize),
            summary.enforcements.len(),
            summary.micro_batch
        );
    }
    if let Some(dir) = &args.save {
        let saved = saved_run::capture(&trainer, &progress, &source).await?;
        checkpoint_dir::save(dir, &data, &saved)?;
        println!(
            "saved the run to {0}: headroom eval {0} evaluates it, headroom train --resume {0} --steps N trains on",
            dir.display()
        );
    }
    Ok(())
}
