//! Faults between the server and the trainer: each is retried with backoff, then reported
//! with the chunk and the cause; a bad chunk never reaches training.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::time::Duration;

use common::fault_server::{Fault, FaultServer};
use common::{read_file, synthetic_dataset};
use headroom::data::scan::scan_epoch;
use headroom::data::{Codec, DataError, DataSource, FetchCause, RetryPolicy, Split, StreamOptions};

fn quick_retries() -> StreamOptions {
    StreamOptions {
        prefetch: 2,
        seed: 5,
        shuffle: true,
        retry: RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(40),
            attempt_timeout: Duration::from_millis(800),
        },
        window: None,
        mix: None,
    }
}

const ALL_FAULTS: [Fault; 6] = [
    Fault::NotFound,
    Fault::ServerError,
    Fault::Truncate,
    Fault::FlipByte,
    Fault::Stall,
    Fault::Reset,
];

fn cause_matches(fault: Fault, cause: &FetchCause) -> bool {
    match fault {
        Fault::NotFound => *cause == FetchCause::Status(404),
        Fault::ServerError => *cause == FetchCause::Status(500),
        Fault::Truncate => matches!(cause, FetchCause::Truncated { .. }),
        Fault::FlipByte => matches!(cause, FetchCause::Checksum { .. }),
        Fault::Stall => matches!(cause, FetchCause::Timeout(_)),
        Fault::Reset => matches!(cause, FetchCause::Network(_)),
    }
}

#[tokio::test]
async fn a_passing_fault_is_retried_and_the_epoch_is_identical_to_a_clean_one() {
    let dataset = synthetic_dataset(3000, 500, Codec::Lz4);
    let clean = DataSource::open(dataset.dir.to_str().unwrap(), quick_retries())
        .await
        .unwrap();
    let clean = scan_epoch(&clean, Split::Train, 0, 128).await.unwrap();
    let server = FaultServer::start(&dataset.dir, "synthetic").await;
    let victim = &dataset.manifest.chunks_of(Split::Train)[2].file;
    for fault in ALL_FAULTS {
        server.fail_next(victim, fault, 1);
        let before = server.requests_for(victim);
        let source = DataSource::open(&server.base_url, quick_retries()).await.unwrap();
        let figures = scan_epoch(&source, Split::Train, 0, 128)
            .await
            .unwrap_or_else(|e| panic!("{fault:?}: {e}"));
        assert_eq!(
            figures.order_digest, clean.order_digest,
            "{fault:?} changed the data"
        );
        assert_eq!(figures.transport.retries, 1, "{fault:?}");
        assert_eq!(server.requests_for(victim) - before, 2, "{fault:?}");
    }
}

#[tokio::test]
async fn a_lasting_fault_ends_the_epoch_with_an_error_naming_chunk_and_cause_and_no_bad_chunk() {
    let dataset = synthetic_dataset(3000, 500, Codec::Deflate);
    let server = FaultServer::start(&dataset.dir, "synthetic").await;
    let source = DataSource::open(&server.base_url, quick_retries()).await.unwrap();
    let order = source.chunk_order(Split::Train, 0);
    let victim_index = order[3];
    let victim = dataset.manifest.chunks[victim_index].file.clone();
    for fault in ALL_FAULTS {
        server.fail_always(&victim, fault);
        let mut stream = source.epoch(Split::Train, 0).unwrap();
        let mut delivered = Vec::new();
        let error = loop {
            match stream.next_chunk().await {
                Ok(Some(chunk)) => delivered.push(chunk.index),
                Ok(None) => panic!("{fault:?}: the epoch ended without an error"),
                Err(error) => break error,
            }
        };
        assert_eq!(
            delivered,
            order[..3],
            "{fault:?}: chunks before the bad one arrive, the bad one never does"
        );
        let message = error.to_string();
        assert!(
            message.contains(&victim),
            "{fault:?}: '{message}' does not name the chunk"
        );
        match error {
            DataError::Chunk {
                chunk,
                attempts,
                cause,
                ..
            } => {
                assert_eq!(chunk, victim);
                assert_eq!(attempts, 3, "{fault:?}: retries are bounded by the policy");
                assert!(cause_matches(fault, &cause), "{fault:?} reported as {cause:?}");
            }
            other => panic!("{fault:?}: unexpected error {other:?}"),
        }
        assert!(
            stream.next_chunk().await.unwrap().is_none(),
            "nothing follows the error"
        );
    }
}

#[tokio::test]
async fn retries_wait_with_growing_backoff() {
    let dataset = synthetic_dataset(600, 300, Codec::Lz4);
    let server = FaultServer::start(&dataset.dir, "synthetic").await;
    let mut options = quick_retries();
    options.retry.initial_backoff = Duration::from_millis(200);
    options.retry.max_backoff = Duration::from_secs(1);
    server.fail_next("manifest.json", Fault::ServerError, 2);
    let started = std::time::Instant::now();
    DataSource::open(&server.base_url, options).await.unwrap();
    // Waits of 200 ms then 400 ms precede the second and third attempts.
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_malformed_or_inconsistent_manifest_is_a_clear_error() {
    let dataset = synthetic_dataset(600, 300, Codec::Lz4);
    let server = FaultServer::start(&dataset.dir, "synthetic").await;
    let cases = [
        ("{ not json", "line 1 column"),
        (r#"{"format": "something-else"}"#, "missing field"),
    ];
    for (text, expected) in cases {
        server.set_file("manifest.json", text.as_bytes().to_vec());
        let error = DataSource::open(&server.base_url, quick_retries())
            .await
            .err()
            .expect("must fail");
        assert!(matches!(error, DataError::ManifestMalformed { .. }), "{error:?}");
        assert!(error.to_string().contains(expected), "{error}");
    }
    let mut inconsistent = dataset.manifest.clone();
    inconsistent.counts.insert(Split::Train, 999);
    server.set_file("manifest.json", serde_json::to_vec(&inconsistent).unwrap());
    let error = DataSource::open(&server.base_url, quick_retries())
        .await
        .err()
        .expect("must fail");
    assert!(
        error
            .to_string()
            .contains("counts says 999 samples, chunks hold 600"),
        "{error}"
    );

    let mut escaping = dataset.manifest.clone();
    escaping.chunks[0].file = "../../etc/passwd".into();
    server.set_file("manifest.json", serde_json::to_vec(&escaping).unwrap());
    let error = DataSource::open(&server.base_url, quick_retries())
        .await
        .err()
        .expect("must fail");
    assert!(error.to_string().contains("plain file name"), "{error}");
}

#[tokio::test]
async fn a_missing_local_file_fails_at_once_without_retries() {
    let dataset = synthetic_dataset(600, 300, Codec::Lz4);
    let victim = dataset.manifest.chunks_of(Split::Train)[0].file.clone();
    std::fs::remove_file(dataset.dir.join(&victim)).unwrap();
    let source = DataSource::open(dataset.dir.to_str().unwrap(), quick_retries())
        .await
        .unwrap();
    let error = scan_epoch(&source, Split::Train, 0, 64)
        .await
        .expect_err("must fail");
    assert!(
        matches!(
            error,
            DataError::Chunk {
                attempts: 1,
                cause: FetchCause::Io(_),
                ..
            }
        ),
        "{error:?}"
    );
}

/// Figures a manifest could use to make the reader allocate or overflow are refused at
/// open, with the field named; nothing is fetched beyond what the manifest promised.
#[tokio::test]
async fn manifest_figures_that_overflow_or_allocate_too_much_are_refused() {
    let dataset = synthetic_dataset(600, 300, Codec::Lz4);
    let server = FaultServer::start(&dataset.dir, "synthetic").await;
    let refused = |manifest: headroom::data::Manifest| {
        let server = server.clone();
        async move {
            server.set_file("manifest.json", serde_json::to_vec(&manifest).unwrap());
            DataSource::open(&server.base_url, quick_retries())
                .await
                .err()
                .expect("must fail")
                .to_string()
        }
    };
    // The pixel count wraps to 0 in 64 bits: 2^32 x 2^32.
    let mut wrapping = dataset.manifest.clone();
    wrapping.sample_shape = vec![1 << 32, 1 << 32];
    for chunk in &mut wrapping.chunks {
        chunk.raw_bytes = chunk.samples;
    }
    let error = refused(wrapping).await;
    assert!(error.contains("sample_shape [4294967296, 4294967296]"), "{error}");

    let mut huge = dataset.manifest.clone();
    huge.chunks[0].compressed_bytes = usize::MAX;
    let error = refused(huge).await;
    assert!(error.contains("at most 536870912 each"), "{error}");

    let mut duplicated = dataset.manifest.clone();
    duplicated.chunks[1].file = duplicated.chunks[0].file.clone();
    let error = refused(duplicated).await;
    assert!(error.contains("listed twice"), "{error}");

    server.set_file(
        "manifest.json",
        vec![b' '; headroom::data::MAX_MANIFEST_BYTES + 1],
    );
    let error = DataSource::open(&server.base_url, quick_retries())
        .await
        .err()
        .unwrap();
    assert!(
        matches!(
            error,
            DataError::ManifestFetch {
                cause: FetchCause::TooLarge { .. },
                ..
            }
        ),
        "{error:?}"
    );
}

/// A chunk body longer than its manifest entry is cut off at the promised size, not read
/// to its end.
#[tokio::test]
async fn a_chunk_longer_than_promised_is_cut_off() {
    let dataset = synthetic_dataset(600, 300, Codec::Lz4);
    let server = FaultServer::start(&dataset.dir, "synthetic").await;
    let victim = dataset.manifest.chunks_of(Split::Train)[0].clone();
    let mut longer = read_file(&dataset.dir, &victim.file);
    longer.extend(vec![0; 10 << 20]);
    server.set_file(&victim.file, longer);
    let source = DataSource::open(&server.base_url, quick_retries()).await.unwrap();
    let error = scan_epoch(&source, Split::Train, 0, 64)
        .await
        .expect_err("must fail");
    assert!(
        matches!(&error, DataError::Chunk { cause: FetchCause::TooLarge { limit }, .. } if *limit == victim.compressed_bytes),
        "{error:?}"
    );
}
