//! Batches cut from verified chunks in the shuffled order, and where a reader is in its
//! epoch (what a saved run keeps to resume the stream).

use std::collections::VecDeque;

use rand_chacha::ChaCha8Rng;

use super::chunk::Chunk;
use super::error::DataError;
use super::manifest::Split;
use super::shuffle;
use super::stream::{DataSource, EpochStream, Window};

/// Samples gathered for one step: `labels[i]` belongs to the i-th `sample_bytes` record
/// of `features`. Text has no labels: its records are windows of tokens, whose targets are
/// the same tokens one position on.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Batch {
    pub labels: Vec<u8>,
    pub features: Vec<u8>,
    pub sample_bytes: usize,
}

impl Batch {
    pub fn len(&self) -> usize {
        self.features.len() / self.sample_bytes.max(1)
    }

    pub fn is_empty(&self) -> bool {
        self.features.is_empty()
    }
}

/// Where a suspendable reader is in its epoch, enough to open another reader that goes on
/// from the same sample with the same draws (what a checkpoint keeps of the data stream).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReaderPosition {
    pub epoch: u64,
    /// Chunks of the epoch's order handed out so far.
    pub taken: usize,
    /// The chunks open, in the order held: position in the epoch's order, samples read.
    pub open: Vec<(usize, usize)>,
    /// The mixer's place in its ChaCha stream (words drawn), as a decimal string: JSON
    /// numbers do not hold 128 bits everywhere.
    pub mixer_words: String,
}

/// How a suspended reader opens its stream again.
struct Reopen {
    source: DataSource,
    split: Split,
    epoch: u64,
    prefetch: usize,
    /// Chunks of the epoch's order handed out so far, from its start.
    taken: usize,
    /// The chunks open when the reader was suspended, in the order it held them: their
    /// positions in the epoch's order and the samples already read of each. A reopened
    /// stream delivers them first.
    resume: VecDeque<(usize, usize)>,
}

/// A chunk being read, and how far.
struct OpenChunk {
    chunk: Chunk,
    position: usize,
    /// Its position in the epoch's chunk order (kept by suspendable readers).
    order_position: usize,
}

impl OpenChunk {
    fn left(&self) -> usize {
        self.chunk.len().saturating_sub(self.position)
    }
}

/// Cuts an epoch's stream of chunks into batches that may straddle chunk boundaries,
/// drawing each sample from one of the chunks it holds open (see `StreamOptions::mix`).
pub struct BatchReader {
    stream: Option<EpochStream>,
    open: Vec<OpenChunk>,
    mix: usize,
    mixer: ChaCha8Rng,
    /// The stream has handed out its last chunk.
    drained: bool,
    sample_bytes: usize,
    reopen: Option<Reopen>,
}

impl BatchReader {
    pub fn new(stream: EpochStream, sample_bytes: usize) -> Self {
        BatchReader {
            mix: stream.mix,
            mixer: stream.mixer.clone(),
            stream: Some(stream),
            open: Vec::new(),
            drained: false,
            sample_bytes,
            reopen: None,
        }
    }

    /// A reader of `split`'s `epoch` that can [`suspend`](Self::suspend): it releases
    /// every chunk it holds and later reads on from the same sample.
    pub fn suspendable(source: &DataSource, split: Split, epoch: u64, prefetch: usize) -> Self {
        BatchReader {
            stream: None,
            open: Vec::new(),
            mix: source.mix(split),
            mixer: source.mixer(epoch),
            drained: false,
            sample_bytes: source.sample_bytes(),
            reopen: Some(Reopen {
                source: source.clone(),
                split,
                epoch,
                prefetch,
                taken: 0,
                resume: VecDeque::new(),
            }),
        }
    }

    /// The reader made by [`position`](Self::position), read on from there: the same
    /// samples in the same order as the reader it was taken from. The reason, where the
    /// position cannot belong to `source` (a chunk it does not have).
    pub fn resume(
        source: &DataSource,
        split: Split,
        position: &ReaderPosition,
        prefetch: usize,
    ) -> Result<Self, String> {
        let chunks = source.chunk_order(split, position.epoch).len();
        let words: u128 = position
            .mixer_words
            .parse()
            .map_err(|_| format!("the mixer count {:?} is not a number", position.mixer_words))?;
        let outside = position
            .open
            .iter()
            .any(|&(order_position, _)| order_position >= chunks);
        if position.taken > chunks || outside {
            return Err(format!(
                "the {split} stream position names chunks past the {chunks} this dataset has"
            ));
        }
        let mut reader = Self::suspendable(source, split, position.epoch, prefetch);
        reader.mixer.set_word_pos(words);
        let reopen = reader.reopen.as_mut().expect("a suspendable reader can reopen");
        reopen.taken = position.taken;
        reopen.resume = position.open.iter().copied().collect();
        Ok(reader)
    }

    /// Where this reader is, for [`resume`](Self::resume); `None` for a reader made with
    /// `new`, which cannot reopen.
    pub fn position(&self) -> Option<ReaderPosition> {
        let reopen = self.reopen.as_ref()?;
        // Suspended, the open chunks are in `resume`; reading, in `open`.
        let open = if self.stream.is_none() {
            reopen.resume.iter().copied().collect()
        } else {
            self.open
                .iter()
                .filter(|open| open.left() > 0)
                .map(|open| (open.order_position, open.position))
                .collect()
        };
        Some(ReaderPosition {
            epoch: reopen.epoch,
            taken: reopen.taken,
            open,
            mixer_words: self.mixer.get_word_pos().to_string(),
        })
    }

    /// Releases every chunk held, those being read and those fetched ahead, so that
    /// something else (evaluation) can have their memory; the next batch fetches the open
    /// chunks again and goes on from the same samples. The samples and their order are
    /// the same as without the pause: both follow from the seed, the epoch and the chunk,
    /// and the draws between open chunks go on where they were. A reader made with `new`
    /// has no way back and ignores this.
    pub fn suspend(&mut self) {
        let Some(reopen) = self.reopen.as_mut() else {
            return;
        };
        if self.stream.is_none() {
            return;
        }
        reopen.resume = self
            .open
            .drain(..)
            .filter(|open| open.left() > 0)
            .map(|open| (open.order_position, open.position))
            .collect();
        self.stream = None;
        self.drained = false;
    }

    /// The next chunk, reopening a suspended stream where it stopped (a window past the
    /// epoch's last chunk is empty, so a reader suspended at the end ends).
    async fn next_chunk(&mut self) -> Result<Option<OpenChunk>, DataError> {
        if self.stream.is_none() {
            let Some(reopen) = self.reopen.as_ref() else {
                return Ok(None);
            };
            let window = Window {
                prefetch: reopen.prefetch,
                revisit: reopen
                    .resume
                    .iter()
                    .map(|&(order_position, _)| order_position)
                    .collect(),
                first: reopen.taken,
                chunks: None,
            };
            self.stream = Some(reopen.source.stream(reopen.split, reopen.epoch, window)?);
        }
        let Some(chunk) = self.stream.as_mut().expect("opened above").next_chunk().await? else {
            return Ok(None);
        };
        let (order_position, position) = match self.reopen.as_mut() {
            None => (0, 0),
            Some(reopen) => reopen.resume.pop_front().unwrap_or_else(|| {
                reopen.taken += 1;
                (reopen.taken - 1, 0)
            }),
        };
        Ok(Some(OpenChunk {
            chunk,
            position,
            order_position,
        }))
    }

    /// Opens chunks until `mix` are open or the stream has no more. (`next_batch` drops a
    /// chunk as soon as it is read out, so its slot frees for prefetch.)
    async fn fill(&mut self) -> Result<(), DataError> {
        while self.open.len() < self.mix && !self.drained {
            match self.next_chunk().await? {
                // A chunk this epoch reads nothing of is not held.
                Some(open) if open.left() > 0 => self.open.push(open),
                Some(_) => {}
                None => self.drained = true,
            }
        }
        Ok(())
    }

    /// Up to `size` samples; the last batch of an epoch may be shorter; `None` at the end.
    pub async fn next_batch(&mut self, size: usize) -> Result<Option<Batch>, DataError> {
        let mut batch = Batch {
            labels: Vec::with_capacity(size),
            features: Vec::with_capacity(size * self.sample_bytes),
            sample_bytes: self.sample_bytes,
        };
        while batch.len() < size {
            if self.open.len() < self.mix {
                self.fill().await?;
            }
            let left: Vec<usize> = self.open.iter().map(OpenChunk::left).collect();
            let pick = match left.len() {
                0 => break,
                1 => 0,
                _ => shuffle::draw_weighted(&mut self.mixer, &left).expect("open chunks have samples left"),
            };
            let open = &mut self.open[pick];
            // One chunk open: take the run it has; several: one sample, then draw again.
            let take = if left.len() == 1 {
                (size - batch.len()).min(open.left())
            } else {
                1
            };
            for position in open.position..open.position + take {
                let (label, features) = open.chunk.sample(position);
                batch.labels.extend(label);
                batch.features.extend_from_slice(features);
            }
            open.position += take;
            if open.left() == 0 {
                // Dropped now, so its slot frees for prefetch.
                self.open.remove(pick);
            }
        }
        Ok(if batch.is_empty() { None } else { Some(batch) })
    }
}
