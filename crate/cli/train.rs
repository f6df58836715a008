use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use burn::module::Module;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use super::model_args::ModelArgs;
use crate::data::{DataSource, StreamOptions};
use crate::model::generate::SampleSettings;
use crate::train::config::SampleConfig;
use crate::train::{
    BackendKind, Duration, OptimizerConfig, OptimizerKind, Precision, TrainConfig, TrainEvent, Trainer,
};
use crate::units::{format_bytes, parse_bytes};

#[derive(Args)]
pub struct TrainArgs {
    /// Dataset URL or folder (the one holding manifest.json).
    #[arg(long)]
    data: String,
    #[command(flatten)]
    model: ModelArgs,
    /// Hard cap on device memory plus data pipeline, like 256MiB or 1GB.
    #[arg(long, value_parser = parse_bytes)]
    cap: Option<u64>,
    /// f16 stores parameters and activations in half precision (f32 master weights).
    #[arg(long, value_enum, default_value = "f32")]
    precision: Precision,
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
    /// Recompute activations during backward instead of keeping them.
    #[arg(long)]
    checkpointing: bool,
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
    /// Save the trained model and its config into this folder.
    #[arg(long)]
    save: Option<PathBuf>,
}

impl TrainArgs {
    fn config(&self) -> TrainConfig {
        let model = self.model.model_config();
        let duration = match (self.steps, self.epochs) {
            (Some(steps), _) => Duration::Steps(steps),
            (None, epochs) => Duration::Epochs(epochs.unwrap_or(1)),
        };
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
            checkpointing: self.checkpointing,
            precision: self.precision,
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

pub async fn run(args: TrainArgs) -> anyhow::Result<()> {
    if let Some(why) = args.backend.unavailable() {
        anyhow::bail!(why);
    }
    let config = args.config();
    let source = DataSource::open(&args.data, config.stream_options()).await?;
    let mut metrics = match &args.metrics {
        Some(path) => Some(std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("cannot write {}", path.display()))?,
        )),
        None => None,
    };
    let mut trainer = Trainer::new(
        config.clone(),
        &source,
        args.backend.device(),
        args.backend.name(),
    )?;
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} steps {elapsed_precise} eta {eta} | {msg}")
            .expect("a valid template"),
    );
    let mut last_eval = String::new();
    let mut tokens_per_sample = None;
    let mut write_error = None;
    let summary = trainer
        .run(&source, |event| {
            if let Some(out) = metrics.as_mut() {
                let written = serde_json::to_writer(&mut *out, event).map_err(std::io::Error::from);
                if let Err(error) = written.and_then(|_| out.write_all(b"\n")) {
                    write_error.get_or_insert(error);
                }
            }
            match event {
                TrainEvent::Started(started) => {
                    bar.set_length(started.total_steps);
                    tokens_per_sample = started.tokens_per_sample;
                    bar.suspend(|| {
                        if let Some(note) = &started.precision_note {
                            println!("note: {note}");
                        }
                        let cap = started.cap.map_or(String::new(), |cap| {
                            format!(", cap {}", format_bytes(cap as usize))
                        });
                        println!(
                            "{} with {} parameters on {}: {} steps of {} samples ({} x {}), {}{}{}, predicted peak {}{}",
                            started.model,
                            started.parameters,
                            started.backend,
                            started.total_steps,
                            started.effective_batch,
                            started.accumulation_steps,
                            started.micro_batch,
                            started.precision,
                            if started.checkpointing { ", activation checkpointing" } else { "" },
                            cap,
                            format_bytes(started.predicted_peak as usize),
                            started.calibrated_peak.map_or(String::new(), |peak| format!(
                                " (census), {} (calibrated on probe steps)",
                                format_bytes(peak as usize)
                            )),
                        )
                    });
                }
                TrainEvent::Enforced(change) => bar.suspend(|| {
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
                    bar.set_position(step.step);
                    let cap = config.cap.map_or(String::new(), |cap| {
                        format!(" of cap {}", format_bytes(cap as usize))
                    });
                    let speed = match tokens_per_sample {
                        Some(tokens) => format!("{:.0} tokens/s", step.samples_per_sec * tokens as f64),
                        None => format!("{:.0} samples/s", step.samples_per_sec),
                    };
                    bar.set_message(format!(
                        "loss {:.4}{last_eval} | {speed} | micro {} | {}{cap}",
                        step.loss,
                        step.micro_batch,
                        memory_text(&step.memory)
                    ));
                }
                TrainEvent::Eval(eval) => {
                    last_eval = format!(" | test acc {:.2}%", 100.0 * eval.accuracy);
                    bar.suspend(|| {
                        println!(
                            "step {}: test loss {:.4}, perplexity {:.2}, accuracy {:.2}%",
                            eval.step,
                            eval.loss,
                            eval.perplexity,
                            100.0 * eval.accuracy
                        )
                    });
                }
                TrainEvent::Sample(sample) => bar.suspend(|| {
                    println!("step {} sample:\n{}{}\n", sample.step, sample.prompt, sample.text)
                }),
                TrainEvent::Finished(_) => bar.finish_and_clear(),
            }
        })
        .await?;
    if let Some(error) = write_error {
        return Err(error).context("writing metrics");
    }
    if let Some(mut out) = metrics {
        out.flush()?;
    }
    println!(
        "done: {} steps, {} samples in {:.1} s ({:.0} samples/s), final loss {:.4}",
        summary.steps, summary.samples_seen, summary.seconds, summary.samples_per_sec, summary.final_loss
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
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        std::fs::write(dir.join("config.json"), serde_json::to_string_pretty(&config)?)?;
        trainer
            .model()
            .clone()
            .save_file(dir.join("model"))
            .context("saving the model")?;
        println!("saved the model and its config to {}", dir.display());
    }
    Ok(())
}
