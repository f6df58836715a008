use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use burn::module::Module;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use super::units::format_bytes;
use crate::data::{DataSource, StreamOptions};
use crate::model::ModelConfig;
use crate::train::{BackendKind, Duration, OptimizerConfig, OptimizerKind, TrainConfig, TrainEvent, Trainer};

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum ModelKind {
    Mlp,
    Cnn,
}

#[derive(Args)]
pub struct TrainArgs {
    /// Dataset URL or folder (the one holding manifest.json).
    #[arg(long)]
    data: String,
    #[arg(long, value_enum, default_value = "mlp")]
    model: ModelKind,
    /// MLP hidden widths, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "512,256")]
    hidden: Vec<usize>,
    /// CNN channels per conv block, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "16,32")]
    channels: Vec<usize>,
    /// Samples per optimizer step.
    #[arg(long, default_value_t = 256)]
    effective_batch: usize,
    /// Samples per forward/backward pass (default: the effective batch, no accumulation).
    #[arg(long)]
    micro_batch: Option<usize>,
    #[arg(long, value_enum, default_value = "adam")]
    optimizer: OptimizerKind,
    #[arg(long, default_value_t = 1e-3)]
    lr: f64,
    /// SGD momentum.
    #[arg(long, default_value_t = 0.9)]
    momentum: f64,
    #[arg(long, default_value_t = 0.0)]
    weight_decay: f64,
    #[arg(long, default_value_t = 0)]
    warmup_steps: u64,
    /// Clip the gradients' global L2 norm.
    #[arg(long)]
    clip_norm: Option<f32>,
    #[arg(long, value_enum, default_value = "wgpu")]
    backend: BackendKind,
    /// Recompute activations during backward instead of keeping them.
    #[arg(long)]
    checkpointing: bool,
    #[arg(long, conflicts_with = "steps")]
    epochs: Option<u64>,
    #[arg(long)]
    steps: Option<u64>,
    /// Evaluate on the test split every N steps (default: after each epoch).
    #[arg(long, default_value_t = 0)]
    eval_every: u64,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Chunks fetched ahead of the one in use.
    #[arg(long, default_value_t = 2)]
    prefetch: usize,
    /// Write every event as a JSON line to this file.
    #[arg(long)]
    metrics: Option<PathBuf>,
    /// Save the trained model and its config into this folder.
    #[arg(long)]
    save: Option<PathBuf>,
}

impl TrainArgs {
    fn config(&self) -> TrainConfig {
        let model = match self.model {
            ModelKind::Mlp => ModelConfig::Mlp {
                hidden: self.hidden.clone(),
            },
            ModelKind::Cnn => ModelConfig::Cnn {
                channels: self.channels.clone(),
            },
        };
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
                warmup_steps: self.warmup_steps,
                clip_norm: self.clip_norm,
                ..OptimizerConfig::default()
            },
            effective_batch: self.effective_batch,
            micro_batch: self.micro_batch.unwrap_or(self.effective_batch),
            duration,
            checkpointing: self.checkpointing,
            eval_every: self.eval_every,
            seed: self.seed,
            stream: StreamOptions {
                prefetch: self.prefetch,
                seed: self.seed,
                ..StreamOptions::default()
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
    let config = args.config();
    let source = DataSource::open(&args.data, config.stream.clone()).await?;
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
                    bar.suspend(|| {
                        println!(
                            "{} with {} parameters on {}: {} steps of {} samples ({} x {}){}",
                            started.model,
                            started.parameters,
                            started.backend,
                            started.total_steps,
                            started.effective_batch,
                            started.accumulation_steps,
                            started.micro_batch,
                            if started.checkpointing {
                                ", activation checkpointing"
                            } else {
                                ""
                            }
                        )
                    });
                }
                TrainEvent::Step(step) => {
                    bar.set_position(step.step);
                    bar.set_message(format!(
                        "loss {:.4}{last_eval} | {:.0} samples/s | {}",
                        step.loss,
                        step.samples_per_sec,
                        memory_text(&step.memory)
                    ));
                }
                TrainEvent::Eval(eval) => {
                    last_eval = format!(" | test acc {:.2}%", 100.0 * eval.accuracy);
                    bar.suspend(|| {
                        println!(
                            "step {}: test loss {:.4}, accuracy {:.2}%",
                            eval.step,
                            eval.loss,
                            100.0 * eval.accuracy
                        )
                    });
                }
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
