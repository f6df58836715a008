//! Reading a whole epoch as training would, for figures and for cross-target checks.

use serde::Serialize;
use sha2::{Digest, Sha256};
use web_time::Instant;

use super::batch::BatchReader;
use super::error::DataError;
use super::gauge::PipelineMemory;
use super::manifest::Split;
use super::stream::{DataSource, TransportStats};

#[derive(Clone, Debug, Serialize)]
pub struct EpochFigures {
    pub split: Split,
    pub epoch: u64,
    pub samples: usize,
    pub batches: usize,
    pub raw_bytes: usize,
    pub seconds: f64,
    pub samples_per_sec: f64,
    /// sha256 of every label and feature byte in visiting order: equal digests mean the
    /// same samples arrived in the same order.
    pub order_digest: String,
    pub memory: PipelineMemory,
    pub transport: TransportStats,
}

pub async fn scan_epoch(
    source: &DataSource,
    split: Split,
    epoch: u64,
    batch_size: usize,
) -> Result<EpochFigures, DataError> {
    if batch_size == 0 {
        return Err(DataError::InvalidOption("batch size must be at least 1".into()));
    }
    let started = Instant::now();
    let sample_bytes = source.sample_bytes();
    let mut reader = BatchReader::new(source.epoch(split, epoch)?, sample_bytes);
    let mut digest = Sha256::new();
    let (mut samples, mut batches) = (0, 0);
    while let Some(batch) = reader.next_batch(batch_size).await? {
        digest.update(&batch.labels);
        digest.update(&batch.features);
        samples += batch.len();
        batches += 1;
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok(EpochFigures {
        split,
        epoch,
        samples,
        batches,
        raw_bytes: samples * (sample_bytes + usize::from(!source.manifest().is_text())),
        seconds,
        samples_per_sec: samples as f64 / seconds.max(1e-9),
        order_digest: hex::encode(digest.finalize()),
        memory: source.memory(),
        transport: source.transport_stats(),
    })
}
