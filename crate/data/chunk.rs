use sha2::{Digest, Sha256};
use tokio::sync::OwnedSemaphorePermit;

use super::error::FetchCause;
use super::manifest::{ChunkEntry, Manifest};
use super::memory::{HeldBytes, MemoryGauge};

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Checks a fetched body against its manifest entry (length, sha256), decodes it and checks
/// the decoded samples, so nothing unverified is handed to training.
pub fn verify_and_decode(
    manifest: &Manifest,
    entry: &ChunkEntry,
    body: &[u8],
) -> Result<Vec<u8>, FetchCause> {
    if body.len() < entry.compressed_bytes {
        return Err(FetchCause::Truncated {
            expected: entry.compressed_bytes,
            got: body.len(),
        });
    }
    if body.len() != entry.compressed_bytes {
        return Err(FetchCause::WrongLength {
            expected: entry.compressed_bytes,
            got: body.len(),
        });
    }
    let actual = sha256_hex(body);
    if !actual.eq_ignore_ascii_case(&entry.sha256) {
        return Err(FetchCause::Checksum {
            expected: entry.sha256.clone(),
            actual,
        });
    }
    let raw = entry
        .codec
        .decompress(body, entry.raw_bytes)
        .map_err(FetchCause::Decode)?;
    let classes = manifest.class_names.len();
    if let Some(pos) = raw[..entry.samples]
        .iter()
        .position(|&label| usize::from(label) >= classes)
    {
        return Err(FetchCause::Decode(format!(
            "sample {pos} has label {} but there are {classes} classes",
            raw[pos]
        )));
    }
    Ok(raw)
}

/// Extra bytes a chunk holds beside its decoded samples: the visiting order.
pub fn order_bytes(samples: usize) -> usize {
    samples * std::mem::size_of::<u32>()
}

/// A verified, decoded chunk. Its bytes stay counted by the pipeline's gauge, and its slot
/// in the prefetch window stays taken, until it is dropped.
#[derive(Debug)]
pub struct Chunk {
    pub index: usize,
    pub file: String,
    raw: Vec<u8>,
    samples: usize,
    sample_bytes: usize,
    order: Vec<u32>,
    _held: HeldBytes,
    _slot: Option<OwnedSemaphorePermit>,
}

impl Chunk {
    pub(crate) fn new(
        index: usize,
        entry: &ChunkEntry,
        sample_bytes: usize,
        raw: Vec<u8>,
        order: Vec<u32>,
        gauge: &MemoryGauge,
    ) -> Self {
        let held = gauge.hold(raw.len() + order_bytes(order.len()));
        Chunk {
            index,
            file: entry.file.clone(),
            raw,
            samples: entry.samples,
            sample_bytes,
            order,
            _held: held,
            _slot: None,
        }
    }

    pub(crate) fn attach_slot(&mut self, slot: OwnedSemaphorePermit) {
        self._slot = Some(slot);
    }

    pub fn len(&self) -> usize {
        self.samples
    }

    pub fn is_empty(&self) -> bool {
        self.samples == 0
    }

    /// The `position`-th sample in this epoch's shuffled order: (label, features).
    pub fn sample(&self, position: usize) -> (u8, &[u8]) {
        let i = self.order[position] as usize;
        let start = self.samples + i * self.sample_bytes;
        (self.raw[i], &self.raw[start..start + self.sample_bytes])
    }
}
