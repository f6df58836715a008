//! The wasm tests' bodies, run both in a window and in a dedicated worker against a real
//! `headroom serve` that `tests/run-all` starts (its URL is read at run time, `wasm_config`).

/// Declares every streaming test in the including test binary, whose configuration picks
/// window or worker.
#[macro_export]
macro_rules! streaming_tests {
    ($($name:ident),* $(,)?) => {
        $(
            #[wasm_bindgen_test::wasm_bindgen_test]
            async fn $name() {
                wasm_common::$name().await;
            }
        )*
    };
}

#[macro_export]
macro_rules! all_streaming_tests {
    () => {
        streaming_tests!(
            an_epoch_arrives_verified_within_its_bound_and_in_the_same_order_as_natively,
            a_corrupt_chunk_is_reported_by_name_and_never_delivered,
            a_missing_dataset_is_a_clear_error,
            text_windows_arrive_in_the_same_order_as_natively,
        );
    };
}

use std::time::Duration;

use headroom::data::scan::scan_epoch;
use headroom::data::{DataError, DataSource, FetchCause, RetryPolicy, Split, StreamOptions};

use crate::wasm_config;

/// Options the native side used to compute the order digests.
fn options() -> StreamOptions {
    StreamOptions {
        seed: 7,
        retry: RetryPolicy {
            max_attempts: 2,
            initial_backoff: Duration::from_millis(20),
            max_backoff: Duration::from_millis(20),
            attempt_timeout: Duration::from_secs(20),
        },
        ..StreamOptions::default()
    }
}

pub async fn an_epoch_arrives_verified_within_its_bound_and_in_the_same_order_as_natively() {
    let config = wasm_config::load().await;
    let source = DataSource::open(&format!("{}/synthetic", config.data_url), options())
        .await
        .unwrap();
    let figures = scan_epoch(&source, Split::Train, 0, 64).await.unwrap();
    assert_eq!(figures.samples, source.manifest().count(Split::Train));
    assert!(figures.memory.peak_bytes_held > 0);
    assert!(
        figures.memory.peak_bytes_held <= figures.memory.bound_bytes,
        "{:?}",
        figures.memory
    );
    assert_eq!(figures.memory.bytes_held, 0);
    assert_eq!(
        figures.order_digest, config.order_digest,
        "wasm32 and native must shuffle alike"
    );
}

/// Windows of 33 tokens at seeded offsets: the digest of the windows, in order, matches
/// the one `headroom stream --window 33` computed natively.
pub async fn text_windows_arrive_in_the_same_order_as_natively() {
    let config = wasm_config::load().await;
    let options = StreamOptions {
        window: Some(33),
        ..options()
    };
    let source = DataSource::open(&format!("{}/text", config.data_url), options)
        .await
        .unwrap();
    let figures = scan_epoch(&source, Split::Train, 0, 64).await.unwrap();
    assert_eq!(figures.samples, source.sample_count(Split::Train));
    assert!(
        figures.memory.peak_bytes_held <= figures.memory.bound_bytes,
        "{:?}",
        figures.memory
    );
    assert_eq!(
        figures.order_digest, config.text_digest,
        "wasm32 and native must draw the same windows"
    );
}

pub async fn a_corrupt_chunk_is_reported_by_name_and_never_delivered() {
    let config = wasm_config::load().await;
    let source = DataSource::open(&format!("{}/synthetic-corrupt", config.data_url), options())
        .await
        .unwrap();
    let corrupt = config.corrupt_chunk.as_str();
    let mut stream = source.epoch(Split::Train, 0).unwrap();
    loop {
        match stream.next_chunk().await {
            Ok(Some(chunk)) => assert_ne!(chunk.file, corrupt, "the corrupt chunk was delivered"),
            Ok(None) => panic!("the epoch ended without reporting {corrupt}"),
            Err(DataError::Chunk {
                chunk,
                attempts,
                cause: FetchCause::Checksum { .. },
                ..
            }) => {
                assert_eq!(chunk, corrupt);
                assert_eq!(attempts, 2);
                return;
            }
            Err(other) => panic!("unexpected error: {other}"),
        }
    }
}

pub async fn a_missing_dataset_is_a_clear_error() {
    let data_url = wasm_config::load().await.data_url;
    let error = DataSource::open(&format!("{data_url}/no-such-dataset"), options())
        .await
        .err()
        .unwrap();
    assert!(
        matches!(
            error,
            DataError::ManifestFetch {
                cause: FetchCause::Status(404),
                attempts: 2,
                ..
            }
        ),
        "{error}"
    );
}
