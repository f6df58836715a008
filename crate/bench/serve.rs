//! `headroom bench serve`: many clients streaming an epoch from one `headroom serve` at
//! once; every one must get the reference samples, and the server's memory stays flat.

use clap::Args;

use super::load::{peak_rss, read_epoch, spawn_serve, stream_concurrently};
use crate::data::Codec;
use crate::data::import::generate_synthetic;
use crate::data::writer::WriterOptions;
use crate::units::format_bytes;

#[derive(Args)]
pub struct ServeBenchArgs {
    /// Clients streaming the epoch at once.
    #[arg(long, default_value_t = 200)]
    clients: usize,
    /// Training samples of the generated dataset (1,000 per chunk).
    #[arg(long, default_value_t = 20_000)]
    samples: usize,
}

pub async fn bench_serve(args: ServeBenchArgs) -> anyhow::Result<()> {
    let work = tempfile::tempdir()?;
    let options = WriterOptions {
        chunk_samples: 1000,
        codec: Codec::Lz4,
    };
    generate_synthetic(args.samples, 7, &work.path().join("synthetic"), options)?;
    let (mut server, url) = spawn_serve(&std::env::current_exe()?, work.path())?;
    let url = format!("{url}/synthetic");
    let (reference, _) = read_epoch(&url).await?;
    let rss_alone = peak_rss(server.id());
    let figures = stream_concurrently(&url, args.clients, &reference.order_digest).await;
    let rss_loaded = peak_rss(server.id());
    server.kill()?;
    let rss = |bytes: Option<u64>| bytes.map_or("n/a".into(), |b| format_bytes(b as usize));
    println!(
        "{} clients streaming one epoch of {} samples ({} chunks of 1,000) from one headroom serve on 127.0.0.1:",
        args.clients,
        reference.samples,
        args.samples.div_ceil(1000)
    );
    println!(
        "correct {}, wrong {}, failed {}, retries {}, {:.1} s ({:.0} samples/s in all)",
        figures.correct,
        figures.wrong,
        figures.failed,
        figures.retries,
        figures.seconds,
        (figures.correct * reference.samples) as f64 / figures.seconds
    );
    println!(
        "server peak RSS: {} after one client, {} after all of them",
        rss(rss_alone),
        rss(rss_loaded)
    );
    for error in &figures.errors {
        println!("error: {error}");
    }
    if figures.correct != args.clients {
        anyhow::bail!(
            "{} of {} clients did not get the reference epoch",
            args.clients - figures.correct,
            args.clients
        );
    }
    Ok(())
}
