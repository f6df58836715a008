//! `headroom stream`: a dataset streamed as training reads it, every chunk verified, with
//! the figures of the epoch (throughput, memory, the order's digest).

use clap::Args;
use clap::builder::TypedValueParser;

use crate::data::scan::scan_epoch;
use crate::data::{DataSource, Split, StreamOptions};
use crate::units::{format_bytes, mb_per_sec};

#[derive(Args)]
pub struct StreamArgs {
    /// Dataset URL or folder (the one holding manifest.json).
    #[arg(long)]
    data: String,
    #[arg(long, default_value = "train")]
    split: Split,
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    epochs: u64,
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..).map(|v| v as usize))]
    batch: usize,
    /// Chunks fetched ahead of the one in use.
    #[arg(long, default_value_t = 2)]
    prefetch: usize,
    /// Training chunks read at once, each sample drawn from one of them (default: 32 for
    /// text, whose chunks are runs of one text; 1 for images).
    #[arg(long)]
    mix_chunks: Option<usize>,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Visit chunks and samples in file order.
    #[arg(long)]
    no_shuffle: bool,
    /// Text datasets: tokens per window (a model's context + 1).
    #[arg(long)]
    window: Option<usize>,
    /// Print one JSON object per epoch instead of text.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: StreamArgs) -> anyhow::Result<()> {
    let options = StreamOptions {
        prefetch: args.prefetch,
        seed: args.seed,
        shuffle: !args.no_shuffle,
        window: args.window,
        mix: args.mix_chunks,
        ..Default::default()
    };
    let source = DataSource::open(&args.data, options).await?;
    for epoch in 0..args.epochs {
        let figures = scan_epoch(&source, args.split, epoch, args.batch).await?;
        if args.json {
            println!("{}", serde_json::to_string(&figures)?);
        } else {
            println!(
                "epoch {epoch}: {} samples in {} batches, {:.2} s, {:.0} samples/s, {:.1} MB/s decoded; \
                 data pipeline peak {} of bound {}; {} retries; order {}",
                figures.samples,
                figures.batches,
                figures.seconds,
                figures.samples_per_sec,
                mb_per_sec(figures.raw_bytes, figures.seconds),
                format_bytes(figures.memory.peak_bytes_held),
                format_bytes(figures.memory.bound_bytes),
                figures.transport.retries,
                &figures.order_digest[..16],
            );
        }
    }
    Ok(())
}
