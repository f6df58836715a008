//! The `headroom` command line.

mod bench;
mod bench_inputs;
mod bench_pipeline;
mod bench_serve;
mod bench_soak;
mod bench_train;
mod checkpoint_dir;
mod eval;
mod model_args;
mod plan;
mod prepare;
mod serve;
mod stream;
mod train;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "headroom",
    version,
    about = "Train small networks under a hard memory cap"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Import IDX files (or generate data) into compressed, checksummed chunks.
    Prepare(prepare::PrepareArgs),
    /// Serve the playground and dataset chunks over HTTP.
    Serve(serve::ServeArgs),
    /// Stream a dataset as training would, verify every chunk, and report figures.
    Stream(stream::StreamArgs),
    /// Train a model on a dataset streamed from a URL or folder.
    Train(train::TrainArgs),
    /// Evaluate a saved run (`train --save` or `--checkpoint-dir`) on a split.
    Eval(eval::EvalArgs),
    /// Predict the peak memory of training settings and pick the one that fits a cap.
    Plan(plan::PlanArgs),
    /// Benchmarks that print figures.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
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
            Command::Train(args) => train::run(args).await,
            Command::Plan(args) => plan::run(args).await,
            Command::Eval(args) => eval::run(args).await,
            Command::Bench(command) => bench::run(command).await,
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
