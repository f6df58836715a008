use super::chunk::Chunk;
use super::error::DataError;
use super::stream::EpochStream;

/// Samples gathered for one step: `labels[i]` belongs to the i-th `sample_bytes` record
/// of `features`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Batch {
    pub labels: Vec<u8>,
    pub features: Vec<u8>,
    pub sample_bytes: usize,
}

impl Batch {
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }
}

/// Cuts an epoch's stream of chunks into batches that may straddle chunk boundaries.
pub struct BatchReader {
    stream: EpochStream,
    current: Option<Chunk>,
    position: usize,
    sample_bytes: usize,
}

impl BatchReader {
    pub fn new(stream: EpochStream, sample_bytes: usize) -> Self {
        BatchReader {
            stream,
            current: None,
            position: 0,
            sample_bytes,
        }
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
                match self.stream.next_chunk().await? {
                    Some(chunk) => {
                        self.current = Some(chunk);
                        self.position = 0;
                    }
                    None => break,
                }
            }
            let chunk = self.current.as_ref().expect("a chunk is loaded above");
            let take = (size - batch.len()).min(chunk.len() - self.position);
            for position in self.position..self.position + take {
                let (label, features) = chunk.sample(position);
                batch.labels.push(label);
                batch.features.extend_from_slice(features);
            }
            self.position += take;
        }
        Ok(if batch.is_empty() { None } else { Some(batch) })
    }
}
