//! A dataset opened from a URL or a folder and streamed with a bounded prefetch: the
//! whole set is never held in memory.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::future::Either;
use serde::{Deserialize, Serialize};
use tokio::sync::{Semaphore, mpsc};

use super::chunk::{Chunk, Layout, verify_and_decode};
use super::error::{DataError, FetchCause};
use super::footprint::ChunkFootprint;
use super::gauge::{MemoryGauge, PipelineMemory};
use super::manifest::{ChunkEntry, Manifest, Split};
use super::retry::RetryPolicy;
use super::shuffle;
use crate::platform;
use rand_chacha::ChaCha8Rng;

#[cfg_attr(all(test, not(target_arch = "wasm32")), derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StreamOptions {
    /// Chunks fetched ahead of the one being consumed.
    pub prefetch: usize,
    pub seed: u64,
    pub shuffle: bool,
    pub retry: RetryPolicy,
    /// Tokens per sample of a text dataset: the model's context plus the one token its
    /// last position predicts. The stream cuts text chunks into windows this long; images
    /// ignore it.
    pub window: Option<usize>,
    /// Training chunks a reader holds open at once, each sample drawn from one of them
    /// (seeded, in proportion to what each has left), so that a batch mixes samples from
    /// that many chunks. `None`: [`TEXT_MIX`] for text, whose chunks are runs of one text,
    /// and 1 for records, which preparation already spread over the chunks.
    pub mix: Option<usize>,
}

/// Text chunks a training reader holds open by default. A text chunk is a run of one text
/// (65,536 characters of one play), so batches cut from one chunk at a time see one scene:
/// on Shakespeare nanoGPT's recipe ended at a higher test loss that way than with 32 chunks
/// open (docs/benchmarks.md, "quality, nanoGPT's recipe on Shakespeare").
pub const TEXT_MIX: usize = 32;

/// The most chunks a reader may hold open, as for prefetch.
const MAX_CHUNKS: usize = 64;

impl Default for StreamOptions {
    fn default() -> Self {
        StreamOptions {
            prefetch: 2,
            seed: 0,
            shuffle: true,
            retry: RetryPolicy::default(),
            window: None,
            mix: None,
        }
    }
}

impl StreamOptions {
    pub fn validate(&self) -> Result<(), DataError> {
        if self.prefetch > MAX_CHUNKS {
            return Err(DataError::InvalidOption(format!(
                "prefetch {} is above the limit of {MAX_CHUNKS} chunks",
                self.prefetch
            )));
        }
        if let Some(mix) = self.mix
            && !(1..=MAX_CHUNKS).contains(&mix)
        {
            return Err(DataError::InvalidOption(format!(
                "mixing {mix} chunks: between 1 and {MAX_CHUNKS} may be read at once"
            )));
        }
        if self.window.is_some_and(|w| w < 2) {
            return Err(DataError::InvalidOption(
                "a text window holds at least 2 tokens (a context of 1 and its target)".into(),
            ));
        }
        self.retry.validate().map_err(DataError::InvalidOption)
    }
}

/// Counters a user reads to see how the transport behaves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TransportStats {
    pub chunks_fetched: u64,
    pub bytes_fetched: u64,
    pub retries: u64,
}

#[derive(Debug, Default)]
struct Counters {
    chunks: AtomicU64,
    bytes: AtomicU64,
    retries: AtomicU64,
}

struct Shared {
    location: String,
    manifest: Manifest,
    options: StreamOptions,
    gauge: MemoryGauge,
    counters: Counters,
}

/// An opened dataset: its manifest, and the gauge that counts what its streams hold.
#[derive(Clone)]
pub struct DataSource {
    shared: Arc<Shared>,
}

/// Runs `attempt` until it succeeds, fails for good, or the policy runs out; returns the
/// attempts made with the error.
async fn with_retries<T, F, Fut>(
    policy: &RetryPolicy,
    counters: &Counters,
    mut attempt: F,
) -> Result<T, (u32, FetchCause)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, FetchCause>>,
{
    let mut made = 0;
    loop {
        made += 1;
        platform::sleep(policy.backoff_before(made)).await;
        let outcome = platform::with_timeout(policy.attempt_timeout, attempt())
            .await
            .unwrap_or(Err(FetchCause::Timeout(policy.attempt_timeout)));
        match outcome {
            Ok(value) => return Ok(value),
            Err(cause) if cause.is_retryable() && made < policy.max_attempts => {
                counters.retries.fetch_add(1, Ordering::Relaxed);
            }
            Err(cause) => return Err((made, cause)),
        }
    }
}

impl DataSource {
    /// Fetches and validates the manifest at `location` (a URL or, natively, a path; with
    /// or without the trailing `manifest.json`).
    pub async fn open(location: &str, options: StreamOptions) -> Result<Self, DataError> {
        options.validate()?;
        let url = super::manifest::join_location(location, super::manifest::MANIFEST_FILE);
        let counters = Counters::default();
        let body = with_retries(&options.retry, &counters, || {
            platform::fetch_bytes(&url, super::manifest::MAX_MANIFEST_BYTES)
        })
        .await
        .map_err(|(attempts, cause)| DataError::ManifestFetch {
            url: url.clone(),
            attempts,
            cause,
        })?;
        let text = String::from_utf8(body).map_err(|_| DataError::ManifestMalformed {
            url: url.clone(),
            reason: "not UTF-8 text".into(),
        })?;
        let manifest = Manifest::parse(&text).map_err(|reason| DataError::ManifestMalformed {
            url: url.clone(),
            reason,
        })?;
        check_window(&manifest, options.window)?;
        let shared = Shared {
            location: location.to_string(),
            manifest,
            options,
            gauge: MemoryGauge::default(),
            counters,
        };
        Ok(DataSource {
            shared: Arc::new(shared),
        })
    }

    pub fn manifest(&self) -> &Manifest {
        &self.shared.manifest
    }

    pub fn options(&self) -> &StreamOptions {
        &self.shared.options
    }

    /// How chunks decode into samples: labelled records, or windows of text.
    pub fn layout(&self, entry: &ChunkEntry) -> Layout {
        layout(&self.shared.manifest, &self.shared.options, entry)
    }

    /// Bytes of one sample as batches hold it: an image's pixels or a window's tokens.
    pub fn sample_bytes(&self) -> usize {
        match self.shared.options.window {
            Some(window) if self.shared.manifest.is_text() => window,
            _ => self.shared.manifest.sample_bytes(),
        }
    }

    /// Samples an epoch of `entry` reads: its records, or the windows cut from its text.
    pub fn samples_in(&self, entry: &ChunkEntry) -> usize {
        match self.layout(entry) {
            Layout::Records { samples, .. } => samples,
            Layout::Windows { tokens } => entry.samples / tokens,
        }
    }

    /// Chunks a reader of `split` holds open at once (see [`StreamOptions::mix`]): only a
    /// shuffled training stream mixes; evaluation reads in order.
    pub fn mix(&self, split: Split) -> usize {
        let options = &self.shared.options;
        if split != Split::Train || !options.shuffle {
            return 1;
        }
        options
            .mix
            .unwrap_or(if self.shared.manifest.is_text() && options.window.is_some() {
                TEXT_MIX
            } else {
                1
            })
    }

    /// The seeded draws with which an `epoch`'s reader interleaves its open chunks.
    pub fn mixer(&self, epoch: u64) -> ChaCha8Rng {
        shuffle::mixer(self.shared.options.seed, epoch)
    }

    /// The sizes of `split`'s chunks, and how many a reader holds open, that decide what a
    /// stream of them holds.
    pub fn footprint(&self, split: Split) -> ChunkFootprint {
        let chunks = self.shared.manifest.chunks_of(split);
        ChunkFootprint::of_chunks(chunks.into_iter().map(|c| (c, self.samples_in(c))))
            .reading(self.mix(split))
    }

    /// Samples an epoch of `split` reads.
    pub fn sample_count(&self, split: Split) -> usize {
        self.shared
            .manifest
            .chunks_of(split)
            .into_iter()
            .map(|entry| self.samples_in(entry))
            .sum()
    }

    /// The promise: the training stream, reading ahead the source's prefetch, never holds
    /// more (see [`ChunkFootprint::stream_bytes`]).
    pub fn bound_bytes(&self) -> usize {
        self.footprint(Split::Train)
            .stream_bytes(self.shared.options.prefetch)
    }

    pub fn memory(&self) -> PipelineMemory {
        PipelineMemory {
            bytes_held: self.shared.gauge.bytes_held(),
            peak_bytes_held: self.shared.gauge.peak_bytes_held(),
            bound_bytes: self.bound_bytes(),
        }
    }

    pub fn gauge(&self) -> &MemoryGauge {
        &self.shared.gauge
    }

    pub fn transport_stats(&self) -> TransportStats {
        let c = &self.shared.counters;
        TransportStats {
            chunks_fetched: c.chunks.load(Ordering::Relaxed),
            bytes_fetched: c.bytes.load(Ordering::Relaxed),
            retries: c.retries.load(Ordering::Relaxed),
        }
    }

    /// The order in which `epoch` visits the chunks of `split`, as indices into the manifest.
    pub fn chunk_order(&self, split: Split, epoch: u64) -> Vec<usize> {
        let in_split: Vec<usize> = (0..self.shared.manifest.chunks.len())
            .filter(|&i| self.shared.manifest.chunks[i].split == split)
            .collect();
        let options = &self.shared.options;
        shuffle::chunk_order(options.seed, epoch, in_split.len(), options.shuffle)
            .into_iter()
            .map(|k| in_split[k])
            .collect()
    }

    /// Starts streaming one epoch of `split` in the background, reading ahead the source's
    /// prefetch; chunks arrive verified.
    pub fn epoch(&self, split: Split, epoch: u64) -> Result<EpochStream, DataError> {
        let window = Window::whole_epoch(self.shared.options.prefetch);
        self.stream(split, epoch, window)
    }

    /// Streams the chunks of `split`'s `epoch` that `window` names: those it revisits,
    /// then its run of the epoch's order.
    pub fn stream(&self, split: Split, epoch: u64, window: Window) -> Result<EpochStream, DataError> {
        let order = self.chunk_order(split, epoch);
        if order.is_empty() {
            return Err(DataError::EmptySplit { split });
        }
        let end = window
            .chunks
            .map_or(order.len(), |n| (window.first + n).min(order.len()));
        let chosen: Vec<usize> = window
            .revisit
            .iter()
            .filter_map(|&position| order.get(position).copied())
            .chain(order[window.first.min(end)..end].iter().copied())
            .collect();
        let (sender, receiver) = mpsc::unbounded_channel();
        let mix = self.mix(split);
        // The chunks being read and those fetched ahead.
        let slots = Arc::new(Semaphore::new(window.prefetch + mix));
        let remaining = chosen.len();
        platform::spawn(produce(self.shared.clone(), epoch, chosen, slots, sender));
        Ok(EpochStream {
            receiver,
            remaining,
            failed: false,
            mix,
            mixer: self.mixer(epoch),
        })
    }

    /// The number of chunks, from the start of `split`'s `epoch`, that hold its first
    /// `samples` samples.
    pub fn chunks_for(&self, split: Split, epoch: u64, samples: usize) -> usize {
        let chunks = &self.shared.manifest.chunks;
        let mut seen = 0;
        self.chunk_order(split, epoch)
            .into_iter()
            .take_while(|&i| {
                let more = seen < samples;
                seen += self.samples_in(&chunks[i]);
                more
            })
            .count()
    }
}

/// Which chunks of an epoch a stream reads, and how far ahead.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Window {
    /// Chunks fetched ahead of the ones being consumed.
    pub prefetch: usize,
    /// Positions in the epoch's chunk order read first: chunks a suspended reader had
    /// open.
    pub revisit: Vec<usize>,
    /// Position in the epoch's chunk order of the first chunk of the run read after them.
    pub first: usize,
    /// How many chunks that run holds; `None`: to the end of the epoch.
    pub chunks: Option<usize>,
}

impl Window {
    pub fn whole_epoch(prefetch: usize) -> Self {
        Window {
            prefetch,
            ..Window::default()
        }
    }
}

async fn produce(
    shared: Arc<Shared>,
    epoch: u64,
    order: Vec<usize>,
    slots: Arc<Semaphore>,
    sender: mpsc::UnboundedSender<Result<Chunk, DataError>>,
) {
    for index in order {
        // Taking a slot before fetching is what bounds memory: a slot is released only
        // when the consumer drops the chunk it was used for.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        if sender.is_closed() {
            return;
        }
        // A dropped stream (a reader suspended for evaluation, an evaluation cut short)
        // abandons the fetch at once, with the bytes it holds.
        let fetch = std::pin::pin!(fetch_chunk(&shared, epoch, index));
        let closed = std::pin::pin!(sender.closed());
        let result = match futures::future::select(fetch, closed).await {
            Either::Left((result, _)) => result,
            Either::Right(_) => return,
        };
        let result = result.map(|mut chunk| {
            chunk.attach_slot(slot);
            chunk
        });
        let failed = result.is_err();
        if sender.send(result).is_err() || failed {
            return;
        }
    }
}

async fn fetch_chunk(shared: &Shared, epoch: u64, index: usize) -> Result<Chunk, DataError> {
    let manifest = &shared.manifest;
    let entry = &manifest.chunks[index];
    let url = super::manifest::join_location(&shared.location, &entry.file);
    let _body_reserved = shared.gauge.hold(entry.compressed_bytes);
    let raw = with_retries(&shared.options.retry, &shared.counters, || async {
        // A body longer than promised is cut off where the promise ends.
        let body = platform::fetch_bytes(&url, entry.compressed_bytes).await?;
        verify_and_decode(manifest, entry, &body)
    })
    .await
    .map_err(|(attempts, cause)| DataError::Chunk {
        chunk: entry.file.clone(),
        url: url.clone(),
        attempts,
        cause,
    })?;
    shared.counters.chunks.fetch_add(1, Ordering::Relaxed);
    shared
        .counters
        .bytes
        .fetch_add(entry.compressed_bytes as u64, Ordering::Relaxed);
    Ok(epoch_chunk(
        manifest,
        &shared.options,
        epoch,
        index,
        raw,
        &shared.gauge,
    ))
}

/// Chunk `index`'s verified, decoded bytes as `epoch` reads them: records or windows, in
/// that epoch's seeded order.
pub(crate) fn epoch_chunk(
    manifest: &Manifest,
    options: &StreamOptions,
    epoch: u64,
    index: usize,
    raw: Vec<u8>,
    gauge: &MemoryGauge,
) -> Chunk {
    let entry = &manifest.chunks[index];
    let layout = layout(manifest, options, entry);
    let order = match layout {
        Layout::Records { samples, .. } => {
            shuffle::sample_order(options.seed, epoch, index, samples, options.shuffle)
        }
        Layout::Windows { tokens } => {
            shuffle::window_offsets(options.seed, epoch, index, entry.samples, tokens, options.shuffle)
        }
    };
    Chunk::new(index, entry, layout, raw, order, gauge)
}

fn layout(manifest: &Manifest, options: &StreamOptions, entry: &ChunkEntry) -> Layout {
    match options.window {
        Some(tokens) if manifest.is_text() => Layout::Windows { tokens },
        _ => Layout::Records {
            samples: entry.samples,
            sample_bytes: manifest.sample_bytes(),
        },
    }
}

/// A text dataset is read in windows that each chunk must hold at least one of.
pub(crate) fn check_window(manifest: &Manifest, window: Option<usize>) -> Result<(), DataError> {
    if !manifest.is_text() {
        return Ok(());
    }
    let Some(window) = window else {
        return Err(DataError::InvalidOption(format!(
            "{} is text: it is read in windows of the model's context + 1 tokens, and no window was set",
            manifest.name
        )));
    };
    match manifest.chunks.iter().find(|c| c.samples < window) {
        Some(short) => Err(DataError::InvalidOption(format!(
            "chunk {} holds {} tokens, fewer than a window of {window} (context {}); prepare the text with larger chunks or use a shorter context",
            short.file,
            short.samples,
            window - 1
        ))),
        None => Ok(()),
    }
}

/// One epoch's chunks, in shuffled order, each verified before it arrives.
pub struct EpochStream {
    receiver: mpsc::UnboundedReceiver<Result<Chunk, DataError>>,
    remaining: usize,
    failed: bool,
    /// Chunks its reader holds open at once; the stream has a slot for each.
    pub(super) mix: usize,
    /// The seeded draws that interleave them.
    pub(super) mixer: ChaCha8Rng,
}

impl EpochStream {
    /// The next chunk, `None` at the end of the epoch, or the error that ended it.
    pub async fn next_chunk(&mut self) -> Result<Option<Chunk>, DataError> {
        if self.remaining == 0 || self.failed {
            return Ok(None);
        }
        match self.receiver.recv().await {
            Some(Ok(chunk)) => {
                self.remaining -= 1;
                Ok(Some(chunk))
            }
            Some(Err(error)) => {
                self.failed = true;
                Err(error)
            }
            None => {
                self.failed = true;
                Err(DataError::StreamStopped)
            }
        }
    }
}
