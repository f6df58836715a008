//! Why reading a dataset failed, and which [`ErrorKind`] that is for the page.

pub use crate::error::{ErrorKind, FetchCause};

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("chunk {chunk} ({url}) failed after {attempts} attempt(s): {cause}")]
    Chunk {
        chunk: String,
        url: String,
        attempts: u32,
        cause: FetchCause,
    },
    #[error("manifest {url} could not be fetched after {attempts} attempt(s): {cause}")]
    ManifestFetch {
        url: String,
        attempts: u32,
        cause: FetchCause,
    },
    #[error("manifest {url} is malformed: {reason}")]
    ManifestMalformed { url: String, reason: String },
    #[error("dataset has no {split} chunks")]
    EmptySplit { split: super::Split },
    #[error("the background fetch task stopped before the epoch ended")]
    StreamStopped,
    #[error("{0}")]
    Import(String),
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("invalid option: {0}")]
    InvalidOption(String),
}

impl DataError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            DataError::Chunk { cause, .. } | DataError::ManifestFetch { cause, .. } => cause.kind(),
            DataError::StreamStopped => ErrorKind::Network,
            DataError::InvalidOption(_) => ErrorKind::BadSettings,
            DataError::ManifestMalformed { .. }
            | DataError::EmptySplit { .. }
            | DataError::Import(_)
            | DataError::Io { .. } => ErrorKind::BadDataset,
        }
    }

    pub fn io(path: impl AsRef<std::path::Path>, source: std::io::Error) -> Self {
        DataError::Io {
            path: path.as_ref().display().to_string(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    // In the browser (wasm-pack test, tests/run-all) these run as wasm-bindgen tests.
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn a_missing_dataset_a_flaky_server_and_a_bad_chunk_are_told_apart() {
        let fetch = |cause| DataError::ManifestFetch {
            url: "u".into(),
            attempts: 1,
            cause,
        };
        assert_eq!(fetch(FetchCause::Status(404)).kind(), ErrorKind::DatasetMissing);
        assert_eq!(fetch(FetchCause::Status(503)).kind(), ErrorKind::Network);
        assert_eq!(
            fetch(FetchCause::TooLarge { limit: 1 }).kind(),
            ErrorKind::BadDataset
        );
        assert_eq!(
            DataError::InvalidOption("x".into()).kind(),
            ErrorKind::BadSettings
        );
        // The names the page matches (web/page/protocol.js's ErrorKind).
        assert_eq!(
            serde_json::to_string(&ErrorKind::DatasetMissing).unwrap(),
            "\"dataset-missing\""
        );
        assert_eq!(
            serde_json::to_string(&ErrorKind::CapTooSmall).unwrap(),
            "\"cap-too-small\""
        );
    }
}
