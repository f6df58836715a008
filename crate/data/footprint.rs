//! What a stream of chunks holds at its peak, from the chunks' sizes alone: the figure
//! the pipeline promises never to pass, and the one the planner predicts with.

use super::chunk::order_bytes;
use super::manifest::{ChunkEntry, Manifest, Split};

/// The sizes of one split's chunks that decide what a stream of them holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkFootprint {
    /// The largest decoded chunk with its visiting order.
    pub decoded: usize,
    /// The largest compressed body.
    pub body: usize,
    pub count: usize,
    /// Chunks a reader holds open at once (see `StreamOptions::mix`).
    pub open: usize,
}

impl ChunkFootprint {
    pub fn of(manifest: &Manifest, split: Split) -> Self {
        Self::of_chunks(manifest.chunks_of(split).into_iter().map(|c| (c, c.samples)))
    }

    /// Chunks with the samples an epoch reads of each (the windows cut from text).
    pub fn of_chunks<'a>(chunks: impl Iterator<Item = (&'a ChunkEntry, usize)>) -> Self {
        let mut footprint = ChunkFootprint {
            decoded: 0,
            body: 0,
            count: 0,
            open: 1,
        };
        for (chunk, samples) in chunks {
            footprint.decoded = footprint.decoded.max(chunk.raw_bytes + order_bytes(samples));
            footprint.body = footprint.body.max(chunk.compressed_bytes);
            footprint.count += 1;
        }
        footprint
    }

    /// The same split cut into chunks of `chunk_samples` instead, compressing as well as
    /// its worst chunk does now: what `headroom prepare --chunk-samples` would give.
    pub fn rechunked(manifest: &Manifest, split: Split, chunk_samples: usize) -> Self {
        let chunks = manifest.chunks_of(split);
        let ratio = chunks
            .iter()
            .map(|c| c.compressed_bytes as f64 / c.raw_bytes.max(1) as f64)
            .fold(0.0, f64::max);
        let raw = chunk_samples * manifest.record_bytes();
        ChunkFootprint {
            decoded: raw + order_bytes(chunk_samples),
            body: (raw as f64 * ratio).ceil() as usize,
            count: manifest.count(split).div_ceil(chunk_samples.max(1)),
            open: 1,
        }
    }

    /// The same chunks, with a reader holding `open` of them at once.
    pub fn reading(self, open: usize) -> Self {
        ChunkFootprint {
            open: open.max(1),
            ..self
        }
    }

    /// The most a stream reading `prefetch` ahead holds: every slot (the chunks being read
    /// and those fetched ahead) holding a decoded chunk, and the chunk being fetched its
    /// compressed body too. Chunks are fetched one at a time, so one body at most.
    pub fn stream_bytes(&self, prefetch: usize) -> usize {
        if self.count == 0 {
            return 0;
        }
        (prefetch + self.open).min(self.count) * self.decoded + self.body
    }

    /// The same, for a stream that reads only its first `chunks`.
    pub fn first_chunks(self, chunks: usize) -> Self {
        ChunkFootprint {
            count: self.count.min(chunks),
            ..self
        }
    }
}
