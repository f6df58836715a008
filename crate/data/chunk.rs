//! One chunk: its body checked against the manifest (length, sha256), decoded, and its
//! samples checked, so nothing unverified reaches training.

use sha2::{Digest, Sha256};
use tokio::sync::OwnedSemaphorePermit;

use super::error::FetchCause;
use super::gauge::{HeldBytes, MemoryGauge};
use super::manifest::{ChunkEntry, Manifest};

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
    let classes = manifest.classes();
    let what = if manifest.is_text() { "token" } else { "label" };
    if let Some(pos) = raw[..entry.samples]
        .iter()
        .position(|&label| usize::from(label) >= classes)
    {
        return Err(FetchCause::Decode(format!(
            "sample {pos} has {what} {} but there are {classes}",
            raw[pos]
        )));
    }
    Ok(raw)
}

/// Extra bytes a chunk holds beside its decoded samples: the visiting order.
pub fn order_bytes(samples: usize) -> usize {
    samples * std::mem::size_of::<u32>()
}

/// How a chunk's decoded bytes are read as samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// `samples` labels, then `samples` records of `sample_bytes` each.
    Records { samples: usize, sample_bytes: usize },
    /// Tokens, read as windows of `tokens` starting at the visiting order's offsets.
    Windows { tokens: usize },
}

/// A verified, decoded chunk. Its bytes stay counted by the pipeline's gauge, and its slot
/// in the prefetch window stays taken, until it is dropped.
#[derive(Debug)]
pub struct Chunk {
    pub index: usize,
    pub file: String,
    raw: Vec<u8>,
    layout: Layout,
    /// The samples in this epoch's order: record indices, or window offsets.
    order: Vec<u32>,
    _held: HeldBytes,
    _slot: Option<OwnedSemaphorePermit>,
}

impl Chunk {
    pub(crate) fn new(
        index: usize,
        entry: &ChunkEntry,
        layout: Layout,
        raw: Vec<u8>,
        order: Vec<u32>,
        gauge: &MemoryGauge,
    ) -> Self {
        let held = gauge.hold(raw.len() + order_bytes(order.len()));
        Chunk {
            index,
            file: entry.file.clone(),
            raw,
            layout,
            order,
            _held: held,
            _slot: None,
        }
    }

    pub(crate) fn attach_slot(&mut self, slot: OwnedSemaphorePermit) {
        self._slot = Some(slot);
    }

    /// Samples this epoch reads from the chunk.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The `position`-th sample in this epoch's order: its label (none for text) and
    /// its bytes.
    pub fn sample(&self, position: usize) -> (Option<u8>, &[u8]) {
        let i = self.order[position] as usize;
        match self.layout {
            Layout::Records {
                samples,
                sample_bytes,
            } => {
                let start = samples + i * sample_bytes;
                (Some(self.raw[i]), &self.raw[start..start + sample_bytes])
            }
            Layout::Windows { tokens } => (None, &self.raw[i..i + tokens]),
        }
    }
}
