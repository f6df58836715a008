//! Streaming as training sees it: every sample once per epoch, reproducible shuffles, and
//! memory that stays under the promised bound whatever the dataset's size.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::time::Duration;

use common::{TestDataset, read_file, synthetic_dataset};
use headroom::data::scan::scan_epoch;
use headroom::data::{BatchReader, Codec, DataSource, Split, StreamOptions};
use headroom::server;

fn options(prefetch: usize, seed: u64, shuffle: bool) -> StreamOptions {
    StreamOptions {
        prefetch,
        seed,
        shuffle,
        ..Default::default()
    }
}

async fn open(dataset: &TestDataset, options: StreamOptions) -> DataSource {
    DataSource::open(dataset.dir.to_str().unwrap(), options)
        .await
        .unwrap()
}

/// The (label, features) records of one chunk, decoded straight from its file.
fn chunk_records(dataset: &TestDataset, entry: &headroom::data::ChunkEntry) -> Vec<Vec<u8>> {
    let raw = entry
        .codec
        .decompress(&read_file(&dataset.dir, &entry.file), entry.raw_bytes)
        .unwrap();
    let (labels, features) = raw.split_at(entry.samples);
    labels
        .iter()
        .zip(features.chunks_exact(dataset.manifest.sample_bytes()))
        .map(|(label, record)| [&[*label], record].concat())
        .collect()
}

/// Every record of a split, in file order.
fn records_in_file_order(dataset: &TestDataset, split: Split) -> Vec<Vec<u8>> {
    dataset
        .manifest
        .chunks_of(split)
        .into_iter()
        .flat_map(|entry| chunk_records(dataset, entry))
        .collect()
}

async fn records_streamed(source: &DataSource, split: Split, epoch: u64, batch: usize) -> Vec<Vec<u8>> {
    let sample_bytes = source.manifest().sample_bytes();
    let mut reader = BatchReader::new(source.epoch(split, epoch).unwrap(), sample_bytes);
    let mut records = Vec::new();
    while let Some(batch) = reader.next_batch(batch).await.unwrap() {
        for (label, record) in batch.labels.iter().zip(batch.features.chunks_exact(sample_bytes)) {
            records.push([&[*label], record].concat());
        }
    }
    records
}

#[tokio::test]
async fn an_epoch_delivers_every_sample_exactly_once_in_batches_across_chunk_boundaries() {
    let dataset = synthetic_dataset(2300, 500, Codec::Deflate);
    let source = open(&dataset, options(2, 9, true)).await;
    let sample_bytes = dataset.manifest.sample_bytes();
    let mut reader = BatchReader::new(source.epoch(Split::Train, 0).unwrap(), sample_bytes);
    let mut sizes = Vec::new();
    while let Some(batch) = reader.next_batch(300).await.unwrap() {
        assert_eq!(batch.features.len(), batch.len() * sample_bytes);
        sizes.push(batch.len());
    }
    assert_eq!(sizes, [vec![300; 7], vec![200]].concat());

    let mut streamed = records_streamed(&source, Split::Train, 1, 300).await;
    let mut expected = records_in_file_order(&dataset, Split::Train);
    assert_ne!(streamed, expected, "shuffling changes the order");
    streamed.sort();
    expected.sort();
    assert_eq!(streamed, expected, "the same multiset of samples");
}

#[tokio::test]
async fn without_shuffling_samples_arrive_in_file_order() {
    let dataset = synthetic_dataset(1200, 500, Codec::Lz4);
    let source = open(&dataset, options(1, 0, false)).await;
    assert_eq!(
        records_streamed(&source, Split::Test, 0, 64).await,
        records_in_file_order(&dataset, Split::Test)
    );
}

#[tokio::test]
async fn the_same_seed_and_epoch_give_the_same_order_and_others_differ() {
    let dataset = synthetic_dataset(2000, 400, Codec::Lz4);
    let digest = |seed: u64, epoch: u64| {
        let dataset = &dataset;
        async move {
            let source = open(dataset, options(2, seed, true)).await;
            scan_epoch(&source, Split::Train, epoch, 100)
                .await
                .unwrap()
                .order_digest
        }
    };
    let first = digest(3, 0).await;
    assert_eq!(first, digest(3, 0).await);
    assert_ne!(first, digest(3, 1).await);
    assert_ne!(first, digest(4, 0).await);
}

/// Holds each chunk for a while, as a slow training step would, so prefetch fills up.
async fn peak_with_slow_consumer(dataset: &TestDataset, prefetch: usize) -> (usize, usize) {
    let source = open(dataset, options(prefetch, 1, true)).await;
    let mut stream = source.epoch(Split::Train, 0).unwrap();
    while let Some(chunk) = stream.next_chunk().await.unwrap() {
        tokio::time::sleep(Duration::from_millis(15)).await;
        assert!(source.memory().bytes_held <= source.bound_bytes());
        drop(chunk);
    }
    assert_eq!(
        source.memory().bytes_held,
        0,
        "everything is released after the epoch"
    );
    (source.memory().peak_bytes_held, source.bound_bytes())
}

#[tokio::test]
async fn held_bytes_stay_within_prefetch_plus_one_chunks_and_prefetch_really_happens() {
    let dataset = synthetic_dataset(6000, 300, Codec::Deflate);
    let decoded = |c: &headroom::data::ChunkEntry| c.raw_bytes + 4 * c.samples;
    let chunks = &dataset.manifest.chunks;
    let largest_decoded = chunks.iter().map(decoded).max().unwrap();
    let largest_body = chunks.iter().map(|c| c.compressed_bytes).max().unwrap();
    let decoded = chunks.iter().map(decoded).min().unwrap();
    let body = chunks.iter().map(|c| c.compressed_bytes).min().unwrap();
    for prefetch in [0, 1, 3] {
        let (peak, bound) = peak_with_slow_consumer(&dataset, prefetch).await;
        assert_eq!(bound, (prefetch + 1) * largest_decoded + largest_body);
        assert!(peak <= bound, "prefetch {prefetch}: peak {peak} > bound {bound}");
        // With a slow consumer the window fills: all prefetch + 1 slots hold a decoded
        // chunk while the next one's body is decoded. The bound is the planner's
        // prediction, so it must be reached, not only respected.
        assert!(
            peak >= (prefetch + 1) * decoded + body,
            "prefetch {prefetch}: peak {peak} shows no prefetching"
        );
    }
}

#[tokio::test]
async fn peak_memory_does_not_grow_with_the_dataset() {
    let small = synthetic_dataset(1500, 300, Codec::Lz4);
    let large = synthetic_dataset(15000, 300, Codec::Lz4);
    let (small_peak, small_bound) = peak_with_slow_consumer(&small, 2).await;
    let (large_peak, large_bound) = peak_with_slow_consumer(&large, 2).await;
    assert!(large_peak <= large_bound && small_peak <= small_bound);
    assert!(
        large_bound <= small_bound + small_bound / 20,
        "bound {large_bound} vs {small_bound}"
    );
}

#[tokio::test]
async fn the_same_data_streams_from_a_path_a_file_url_and_headroom_serve() {
    let dataset = synthetic_dataset(1000, 400, Codec::Deflate);
    let addr = server::spawn_local(dataset.root.path().to_path_buf(), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let locations = [
        dataset.dir.to_str().unwrap().to_string(),
        format!("file://{}/manifest.json", dataset.dir.display()),
        format!("http://{addr}/synthetic"),
        format!("http://{addr}/synthetic/manifest.json"),
    ];
    let mut digests = Vec::new();
    for location in &locations {
        let source = DataSource::open(location, options(2, 8, true)).await.unwrap();
        digests.push(
            scan_epoch(&source, Split::Train, 0, 50)
                .await
                .unwrap()
                .order_digest,
        );
    }
    assert!(digests.windows(2).all(|w| w[0] == w[1]), "{digests:?}");
}

#[tokio::test]
async fn bad_options_are_refused_with_a_reason() {
    let dataset = synthetic_dataset(300, 300, Codec::Lz4);
    let mut bad = options(2, 0, true);
    bad.retry.max_attempts = 0;
    let error = DataSource::open(dataset.dir.to_str().unwrap(), bad)
        .await
        .err()
        .unwrap();
    assert!(
        error.to_string().contains("max_attempts must be at least 1"),
        "{error}"
    );
    let error = DataSource::open(dataset.dir.to_str().unwrap(), options(1000, 0, true))
        .await
        .err()
        .unwrap();
    assert!(error.to_string().contains("prefetch 1000"), "{error}");
}

/// Every record `reader` gives in batches of `batch`, suspending it after each batch and
/// checking that it then holds nothing; and how many times it was suspended.
async fn read_suspending_after_each_batch(
    source: &DataSource,
    mut reader: BatchReader,
    batch: usize,
) -> (Vec<Vec<u8>>, usize) {
    let sample_bytes = source.manifest().sample_bytes();
    let (mut records, mut suspended) = (Vec::new(), 0);
    while let Some(batch) = reader.next_batch(batch).await.unwrap() {
        for (label, record) in batch.labels.iter().zip(batch.features.chunks_exact(sample_bytes)) {
            records.push([&[*label], record].concat());
        }
        reader.suspend();
        // The producer drops what it was fetching as soon as it notices.
        for _ in 0..100 {
            if source.memory().bytes_held == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        assert_eq!(source.memory().bytes_held, 0, "a suspended reader holds no chunk");
        suspended += 1;
    }
    (records, suspended)
}

/// A reader suspended (as for evaluation) between batches holds nothing while suspended,
/// and reads on with exactly the batches an uninterrupted reader gives.
#[tokio::test]
async fn a_suspended_reader_releases_its_chunks_and_reads_on_from_the_same_sample() {
    let dataset = synthetic_dataset(2300, 500, Codec::Deflate);
    let source = open(&dataset, options(2, 5, true)).await;
    let all = records_streamed(&source, Split::Train, 3, 300).await;
    let reader = BatchReader::suspendable(&source, Split::Train, 3, 2);
    let (records, suspended) = read_suspending_after_each_batch(&source, reader, 300).await;
    assert_eq!(suspended, 8);
    assert_eq!(records, all, "the same samples in the same order");
}

fn mixing(prefetch: usize, seed: u64, mix: usize) -> StreamOptions {
    StreamOptions {
        mix: Some(mix),
        ..options(prefetch, seed, true)
    }
}

/// Which training chunk each record comes from, by its bytes (synthetic records are
/// distinct).
fn chunk_of_records(dataset: &TestDataset) -> std::collections::HashMap<Vec<u8>, usize> {
    let chunks = dataset.manifest.chunks_of(Split::Train);
    let mut chunk_of = std::collections::HashMap::new();
    for (index, entry) in chunks.into_iter().enumerate() {
        chunk_of.extend(
            chunk_records(dataset, entry)
                .into_iter()
                .map(|record| (record, index)),
        );
    }
    chunk_of
}

/// Mixing chunks draws each batch from several of them, still reads every sample once,
/// follows the seed, and a reader suspended between batches reads on exactly.
#[tokio::test]
async fn a_mixing_reader_draws_batches_from_several_chunks_and_reads_every_sample_once() {
    let dataset = synthetic_dataset(2300, 200, Codec::Deflate);
    let chunk_of = chunk_of_records(&dataset);
    let plain = records_streamed(&open(&dataset, options(1, 5, true)).await, Split::Train, 0, 40).await;
    let source = open(&dataset, mixing(1, 5, 4)).await;
    let mixed = records_streamed(&source, Split::Train, 0, 40).await;
    let chunks_in_first_batch = |records: &[Vec<u8>]| {
        records[..40]
            .iter()
            .map(|r| chunk_of[r])
            .collect::<std::collections::HashSet<_>>()
            .len()
    };
    assert_eq!(chunks_in_first_batch(&plain), 1);
    assert!(
        chunks_in_first_batch(&mixed) >= 3,
        "a batch mixes the 4 open chunks"
    );
    let sorted = |mut records: Vec<Vec<u8>>| {
        records.sort();
        records
    };
    assert_eq!(sorted(mixed.clone()), sorted(plain), "every sample once");
    assert_eq!(
        mixed,
        records_streamed(&source, Split::Train, 0, 40).await,
        "seeded"
    );

    let reader = BatchReader::suspendable(&source, Split::Train, 0, 1);
    let (records, _) = read_suspending_after_each_batch(&source, reader, 40).await;
    assert_eq!(
        records, mixed,
        "suspended and resumed: the same samples in the same order"
    );
}

/// The chunks a mixing reader holds open count in the bound, and a slow reader reaches it.
#[tokio::test]
async fn a_mixing_stream_holds_its_open_chunks_and_prefetch_within_the_bound() {
    let dataset = synthetic_dataset(6000, 300, Codec::Deflate);
    let chunks = &dataset.manifest.chunks;
    let decoded = |c: &headroom::data::ChunkEntry| c.raw_bytes + 4 * c.samples;
    let largest_decoded = chunks.iter().map(decoded).max().unwrap();
    let smallest_decoded = chunks.iter().map(decoded).min().unwrap();
    let largest_body = chunks.iter().map(|c| c.compressed_bytes).max().unwrap();
    let source = open(&dataset, mixing(1, 2, 3)).await;
    assert_eq!(source.bound_bytes(), (1 + 3) * largest_decoded + largest_body);
    let mut reader = BatchReader::new(
        source.epoch(Split::Train, 0).unwrap(),
        dataset.manifest.sample_bytes(),
    );
    let mut peak_open = 0;
    while reader.next_batch(64).await.unwrap().is_some() {
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(source.memory().bytes_held <= source.bound_bytes());
        peak_open = peak_open.max(source.memory().bytes_held);
    }
    assert!(
        peak_open >= 4 * smallest_decoded,
        "three open chunks and one fetched ahead: {peak_open}"
    );
    let refused = DataSource::open(dataset.dir.to_str().unwrap(), mixing(1, 2, 0))
        .await
        .err()
        .unwrap();
    assert!(refused.to_string().contains("mixing 0 chunks"), "{refused}");
}
