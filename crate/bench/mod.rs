//! `headroom bench ...`: the benchmarks, out of the product modules. Each command measures
//! one part (training, the planner, the data pipeline, bad input, the server under load, a
//! long soak, the GPU matmul routines) and prints figures for docs/benchmarks.md; `mutate`
//! (bad-input cases) and `load` (a load generator for `headroom serve`) serve them and the
//! tests.

mod inputs;
mod ladder;
pub mod load;
mod matmul;
pub mod mutate;
mod pipeline;
mod serve;
mod soak;
mod train;

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use web_time::Instant;

use crate::data::import::{self, DEFAULT_IDX_SOURCE};
use crate::data::manifest::Manifest;
use crate::data::scan::{EpochFigures, scan_epoch};
use crate::data::writer::WriterOptions;
use crate::data::{Codec, DataSource, Split, StreamOptions};
use crate::server;
use crate::units::{format_bytes, mb_per_sec};

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Codec ratio and decode speed, HTTP stream throughput, and pipeline memory against
    /// its bound, for Fashion-MNIST and for a synthetic set several times larger.
    Data(DataBenchArgs),
    /// samples/s and peak memory of each memory lever, as ratios to plain f32.
    Train(train::TrainBenchArgs),
    /// The planner's predicted peak against the measured one over many configurations.
    Plan(train::PlanBenchArgs),
    /// The largest GPT of a ladder that trains under each cap with the levers the planner
    /// picks, and what each rung needs without levers.
    Ladder(ladder::LadderBenchArgs),
    /// samples/s against the data pipeline's bytes held, for each prefetch depth and way
    /// of evaluating, and the run the planner picks under a cap.
    Pipeline(pipeline::PipelineBenchArgs),
    /// Mutated manifests and chunks through opening and reading: valid, refused, panics.
    Inputs(inputs::InputsBenchArgs),
    /// Many clients streaming an epoch from one `headroom serve` at once: correct, failed,
    /// and the server's peak memory.
    Serve(serve::ServeBenchArgs),
    /// A long run at a tight cap: the reservation after warm-up, the enforcements, and a
    /// run taken up again from its checkpoint halfway against one never stopped.
    Soak(soak::SoakBenchArgs),
    /// cubek's subgroup-free matmul routines side by side on the MLP's and the GPT's shapes.
    Matmul(matmul::MatmulBenchArgs),
}

impl BenchCommand {
    /// Whether the benchmark trains (see `Command::trains`).
    pub fn trains(&self) -> bool {
        match self {
            BenchCommand::Data(_)
            | BenchCommand::Inputs(_)
            | BenchCommand::Serve(_)
            | BenchCommand::Matmul(_) => false,
            BenchCommand::Train(_)
            | BenchCommand::Plan(_)
            | BenchCommand::Ladder(_)
            | BenchCommand::Pipeline(_)
            | BenchCommand::Soak(_) => true,
        }
    }
}

#[derive(Args)]
pub struct DataBenchArgs {
    #[arg(long, default_value = DEFAULT_IDX_SOURCE)]
    source: PathBuf,
    /// Size of the synthetic set as a multiple of Fashion-MNIST's training split.
    #[arg(long, default_value_t = 10)]
    scale: usize,
    #[arg(long, default_value_t = 2)]
    prefetch: usize,
}

pub async fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Data(args) => bench_data(args).await,
        BenchCommand::Train(args) => train::bench_train(args),
        BenchCommand::Plan(args) => train::bench_plan(args),
        BenchCommand::Ladder(args) => ladder::bench_ladder(args).await,
        BenchCommand::Pipeline(args) => pipeline::bench_pipeline(args),
        BenchCommand::Inputs(args) => inputs::bench_inputs(args),
        BenchCommand::Serve(args) => serve::bench_serve(args).await,
        BenchCommand::Soak(args) => soak::bench_soak(args).await,
        BenchCommand::Matmul(args) => matmul::bench_matmul(args),
    }
}

fn decode_all(dir: &Path, manifest: &Manifest) -> anyhow::Result<(usize, f64)> {
    let bodies: Vec<Vec<u8>> = manifest
        .chunks
        .iter()
        .map(|c| std::fs::read(dir.join(&c.file)))
        .collect::<Result<_, _>>()?;
    const ROUNDS: usize = 3;
    let started = Instant::now();
    let mut raw = 0;
    for _ in 0..ROUNDS {
        for (entry, body) in manifest.chunks.iter().zip(&bodies) {
            raw += entry
                .codec
                .decompress(body, entry.raw_bytes)
                .map_err(anyhow::Error::msg)?
                .len();
        }
    }
    Ok((raw, started.elapsed().as_secs_f64()))
}

async fn stream_over_http(root: &Path, name: &str, prefetch: usize) -> anyhow::Result<EpochFigures> {
    let addr = server::spawn_local(root.to_path_buf(), "127.0.0.1:0".parse()?).await?;
    let url = format!("http://{addr}/{name}");
    let source = DataSource::open(
        &url,
        StreamOptions {
            prefetch,
            ..Default::default()
        },
    )
    .await?;
    Ok(scan_epoch(&source, Split::Train, 0, 256).await?)
}

fn print_stream(label: &str, manifest: &Manifest, figures: &EpochFigures) {
    let compressed: usize = manifest
        .chunks_of(Split::Train)
        .iter()
        .map(|c| c.compressed_bytes)
        .sum();
    println!(
        "{label:<22} {:>8} {:>10.0} {:>10.1} {:>10.1} {:>12} {:>12} {:>6}",
        figures.samples,
        figures.samples_per_sec,
        mb_per_sec(compressed, figures.seconds),
        mb_per_sec(figures.raw_bytes, figures.seconds),
        format_bytes(figures.memory.peak_bytes_held),
        format_bytes(figures.memory.bound_bytes),
        if figures.memory.peak_bytes_held <= figures.memory.bound_bytes {
            "yes"
        } else {
            "NO"
        },
    );
}

async fn bench_data(args: DataBenchArgs) -> anyhow::Result<()> {
    let work = tempfile::tempdir()?;
    println!(
        "codecs on Fashion-MNIST ({}), 4096-sample chunks:",
        args.source.display()
    );
    println!(
        "{:<10} {:>12} {:>12} {:>8} {:>12} {:>12}",
        "codec", "raw", "compressed", "ratio", "import MB/s", "decode MB/s"
    );
    let mut fashion = None;
    for codec in Codec::ALL {
        let dir = work.path().join(format!("fashion-{}", codec.name()));
        let started = Instant::now();
        let manifest = import::import_idx(
            &args.source,
            "fashion-mnist",
            &dir,
            WriterOptions {
                codec,
                ..Default::default()
            },
        )?;
        let import_seconds = started.elapsed().as_secs_f64();
        let raw: usize = manifest.chunks.iter().map(|c| c.raw_bytes).sum();
        let compressed: usize = manifest.chunks.iter().map(|c| c.compressed_bytes).sum();
        let (decoded, decode_seconds) = decode_all(&dir, &manifest)?;
        println!(
            "{:<10} {:>12} {:>12} {:>8.3} {:>12.0} {:>12.0}",
            codec.name(),
            format_bytes(raw),
            format_bytes(compressed),
            compressed as f64 / raw as f64,
            mb_per_sec(raw, import_seconds),
            mb_per_sec(decoded, decode_seconds),
        );
        if codec == Codec::default() {
            fashion = Some((dir, manifest));
        }
    }
    let (fashion_dir, fashion_manifest) = fashion.expect("the default codec is among Codec::ALL");
    let train = fashion_manifest.count(Split::Train);
    let synthetic_name = format!("synthetic-x{}", args.scale);
    let synthetic_dir = work.path().join(&synthetic_name);
    let synthetic_manifest =
        import::generate_synthetic(train * args.scale, 0, &synthetic_dir, WriterOptions::default())?;

    println!(
        "\nstreaming one training epoch over HTTP from 127.0.0.1 ({} codec, prefetch {}, batch 256):",
        Codec::default().name(),
        args.prefetch
    );
    println!(
        "{:<22} {:>8} {:>10} {:>10} {:>10} {:>12} {:>12} {:>6}",
        "dataset", "samples", "samples/s", "wire MB/s", "raw MB/s", "peak held", "bound", "under"
    );
    let fashion_name = fashion_dir
        .file_name()
        .and_then(|n| n.to_str())
        .expect("named by this function");
    let fashion_figures = stream_over_http(work.path(), fashion_name, args.prefetch).await?;
    print_stream("fashion-mnist", &fashion_manifest, &fashion_figures);
    let synthetic_figures = stream_over_http(work.path(), &synthetic_name, args.prefetch).await?;
    print_stream(&synthetic_name, &synthetic_manifest, &synthetic_figures);
    println!(
        "\npeak held grows {:.2}x for a {:.1}x larger dataset",
        synthetic_figures.memory.peak_bytes_held as f64
            / fashion_figures.memory.peak_bytes_held.max(1) as f64,
        synthetic_figures.samples as f64 / fashion_figures.samples.max(1) as f64,
    );
    Ok(())
}
