//! Many clients streaming an epoch from one server at once: every one must get the same
//! samples in the same order, and the server's memory must not grow with their number.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use futures::future::join_all;
use serde::Serialize;
use web_time::Instant;

use crate::data::scan::{EpochFigures, scan_epoch};
use crate::data::{DataError, DataSource, Split, StreamOptions};

/// What `clients` concurrent readers of one epoch came to.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LoadFigures {
    pub clients: usize,
    /// Clients whose epoch arrived whole, with the reference digest.
    pub correct: usize,
    /// Clients whose epoch arrived whole but different: must be 0.
    pub wrong: usize,
    /// Clients that ended with an error, and the first few errors.
    pub failed: usize,
    pub errors: Vec<String>,
    pub retries: u64,
    pub seconds: f64,
}

/// One reader's epoch 0 of the training split of the dataset at `url`, and the retries it
/// took. The reference and every concurrent client read it alike, so their digests compare.
pub async fn read_epoch(url: &str) -> Result<(EpochFigures, u64), DataError> {
    let options = StreamOptions {
        prefetch: 1,
        seed: 7,
        ..StreamOptions::default()
    };
    let source = DataSource::open(url, options).await?;
    let figures = scan_epoch(&source, Split::Train, 0, 256).await?;
    Ok((figures, source.transport_stats().retries))
}

/// `clients` readers of [`read_epoch`], all at once, against `reference`: the order digest
/// one reader alone gets.
pub async fn stream_concurrently(url: &str, clients: usize, reference: &str) -> LoadFigures {
    let started = Instant::now();
    let outcomes = join_all((0..clients).map(|_| read_epoch(url))).await;
    let mut figures = LoadFigures {
        clients,
        seconds: started.elapsed().as_secs_f64(),
        ..LoadFigures::default()
    };
    for outcome in outcomes {
        match outcome {
            Ok((epoch, retries)) => {
                figures.retries += retries;
                if epoch.order_digest == reference {
                    figures.correct += 1;
                } else {
                    figures.wrong += 1;
                }
            }
            Err(error) => {
                figures.failed += 1;
                if figures.errors.len() < 3 {
                    figures.errors.push(error.to_string());
                }
            }
        }
    }
    figures
}

/// `headroom serve` of `root` in a process of its own, started from the binary at `exe`,
/// and the URL it serves on (without the trailing slash).
pub fn spawn_serve(exe: &Path, root: &Path) -> std::io::Result<(Child, String)> {
    let mut child = Command::new(exe)
        .args(["serve", "--addr", "127.0.0.1:0", "--root"])
        .arg(root)
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().expect("stdout is piped above");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    match line.split_whitespace().find(|word| word.starts_with("http://")) {
        Some(url) => Ok((child, url.trim_end_matches('/').to_string())),
        None => {
            let _ = child.kill();
            Err(std::io::Error::other(format!("headroom serve said {line:?}")))
        }
    }
}

/// The peak resident memory of process `pid` (Linux's VmHWM), where the system says.
pub fn peak_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
