//! The `headroom` command line.

#[cfg(feature = "train")]
mod checkpoint_dir;
#[cfg(feature = "train")]
mod eval;
#[cfg(feature = "train")]
mod export;
#[cfg(feature = "train")]
mod plan;
mod prepare;
mod serve;
mod stream;
#[cfg(feature = "train")]
mod train;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "headroom",
    version,
    about = "Train small networks under a hard memory cap"
)]
#[cfg_attr(
    not(feature = "train"),
    command(
        after_help = "This build has no trainer (built without the `train` feature): it prepares, \
                          serves and streams data. `cargo build --bin headroom` builds the whole command line."
    )
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size of its largest variant costs nothing worth a Box.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Import IDX files (or generate data) into compressed, checksummed chunks.
    Prepare(prepare::PrepareArgs),
    /// Serve the playground and dataset chunks over HTTP.
    Serve(serve::ServeArgs),
    /// Stream a dataset as training would, verify every chunk, and report figures.
    Stream(stream::StreamArgs),
    /// Train a model on a dataset streamed from a URL or folder.
    #[cfg(feature = "train")]
    Train(train::TrainArgs),
    /// Evaluate a saved run (`train --save` or `--checkpoint-dir`) on a split.
    #[cfg(feature = "train")]
    Eval(eval::EvalArgs),
    /// Write a saved run's parameters as safetensors, in PyTorch's names and layouts.
    #[cfg(feature = "train")]
    Export(export::ExportArgs),
    /// Predict the peak memory of training settings and pick the one that fits a cap.
    #[cfg(feature = "train")]
    Plan(plan::PlanArgs),
    /// Benchmarks that print figures.
    #[cfg(feature = "train")]
    #[command(subcommand)]
    Bench(crate::bench::BenchCommand),
}

impl Command {
    /// Whether the command runs training steps on the host, where reusing freed memory
    /// pays (see `keep_freed_heap_for_reuse`); serving and preparing keep the defaults.
    fn trains(&self) -> bool {
        match self {
            Command::Prepare(_) | Command::Serve(_) | Command::Stream(_) => false,
            #[cfg(feature = "train")]
            Command::Train(_) | Command::Eval(_) | Command::Plan(_) => true,
            #[cfg(feature = "train")]
            Command::Export(_) => false,
            #[cfg(feature = "train")]
            Command::Bench(command) => command.trains(),
        }
    }
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.command.trains() {
        crate::platform::keep_freed_heap_for_reuse();
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(async {
        match cli.command {
            Command::Prepare(args) => prepare::run(args),
            Command::Serve(args) => serve::run(args).await,
            Command::Stream(args) => stream::run(args).await,
            #[cfg(feature = "train")]
            Command::Train(args) => train::run(args).await,
            #[cfg(feature = "train")]
            Command::Plan(args) => plan::run(args).await,
            #[cfg(feature = "train")]
            Command::Eval(args) => eval::run(args).await,
            #[cfg(feature = "train")]
            Command::Export(args) => export::run(args).await,
            #[cfg(feature = "train")]
            Command::Bench(command) => crate::bench::run(command).await,
        }
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
