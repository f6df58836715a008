use super::chunk::Chunk;
use super::error::DataError;
use super::manifest::Split;
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

/// How a suspended reader opens its stream again.
struct Reopen {
    source: DataSource,
    split: Split,
    epoch: u64,
    prefetch: usize,
    /// Chunks of the epoch's order handed out so far, the current one included.
    taken: usize,
    /// Where to start in the first chunk after a resume: the samples already read of it.
    resume_position: Option<usize>,
}

/// Cuts an epoch's stream of chunks into batches that may straddle chunk boundaries.
pub struct BatchReader {
    stream: Option<EpochStream>,
    current: Option<Chunk>,
    position: usize,
    sample_bytes: usize,
    reopen: Option<Reopen>,
}

impl BatchReader {
    pub fn new(stream: EpochStream, sample_bytes: usize) -> Self {
        BatchReader {
            stream: Some(stream),
            current: None,
            position: 0,
            sample_bytes,
            reopen: None,
        }
    }

    /// A reader of `split`'s `epoch` that can [`suspend`](Self::suspend): it releases
    /// every chunk it holds and later reads on from the same sample.
    pub fn suspendable(source: &DataSource, split: Split, epoch: u64, prefetch: usize) -> Self {
        BatchReader {
            stream: None,
            current: None,
            position: 0,
            sample_bytes: source.sample_bytes(),
            reopen: Some(Reopen {
                source: source.clone(),
                split,
                epoch,
                prefetch,
                taken: 0,
                resume_position: None,
            }),
        }
    }

    /// Releases every chunk held, the one being read and those fetched ahead, so that
    /// something else (evaluation) can have their memory; the next batch fetches the
    /// current chunk again and goes on from the same sample. The samples and their order
    /// are the same as without the pause: both follow from the seed, the epoch and the
    /// chunk. A reader made with `new` has no way back and ignores this.
    pub fn suspend(&mut self) {
        let Some(reopen) = self.reopen.as_mut() else {
            return;
        };
        if let Some(chunk) = self.current.take()
            && self.position < chunk.len()
        {
            reopen.taken -= 1;
            reopen.resume_position = Some(self.position);
        }
        self.stream = None;
    }

    /// The next chunk, reopening a suspended stream where it stopped (a window past the
    /// epoch's last chunk is empty, so a reader suspended at the end ends).
    async fn next_chunk(&mut self) -> Result<Option<Chunk>, DataError> {
        if self.stream.is_none() {
            let Some(reopen) = self.reopen.as_ref() else {
                return Ok(None);
            };
            let window = Window {
                prefetch: reopen.prefetch,
                first: reopen.taken,
                chunks: None,
            };
            self.stream = Some(reopen.source.stream(reopen.split, reopen.epoch, window)?);
        }
        let chunk = self.stream.as_mut().expect("opened above").next_chunk().await?;
        self.position = 0;
        if let (Some(reopen), Some(_)) = (self.reopen.as_mut(), &chunk) {
            reopen.taken += 1;
            self.position = reopen.resume_position.take().unwrap_or(0);
        }
        Ok(chunk)
    }

    /// Up to `size` samples; the last batch of an epoch may be shorter; `None` at the end.
    pub async fn next_batch(&mut self, size: usize) -> Result<Option<Batch>, DataError> {
        let mut batch = Batch {
            labels: Vec::with_capacity(size),
            features: Vec::with_capacity(size * self.sample_bytes),
            sample_bytes: self.sample_bytes,
        };
        while batch.len() < size {
            let exhausted = self.current.as_ref().is_none_or(|c| self.position >= c.len());
            if exhausted {
                // Drop the finished chunk before waiting, so its slot frees for prefetch.
                self.current = None;
                match self.next_chunk().await? {
                    Some(chunk) => self.current = Some(chunk),
                    None => break,
                }
            }
            let chunk = self.current.as_ref().expect("a chunk is loaded above");
            let take = (size - batch.len()).min(chunk.len() - self.position);
            for position in self.position..self.position + take {
                let (label, features) = chunk.sample(position);
                batch.labels.extend(label);
                batch.features.extend_from_slice(features);
            }
            self.position += take;
        }
        Ok(if batch.is_empty() { None } else { Some(batch) })
    }
}
