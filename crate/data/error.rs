use std::time::Duration;

/// Why one attempt to get a chunk (or the manifest) failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum FetchCause {
    #[error("HTTP status {0}")]
    Status(u16),
    #[error("no answer within {0:?} (stalled connection)")]
    Timeout(Duration),
    #[error("connection failed: {0}")]
    Network(String),
    #[error("body truncated: got {got} of {expected} bytes")]
    Truncated { expected: usize, got: usize },
    #[error("body is {got} bytes, manifest says {expected}")]
    WrongLength { expected: usize, got: usize },
    #[error("body is longer than the {limit} bytes expected; cut off")]
    TooLarge { limit: usize },
    #[error("checksum mismatch: sha256 {actual}, manifest says {expected}")]
    Checksum { expected: String, actual: String },
    #[error("cannot decode: {0}")]
    Decode(String),
    #[error("cannot read file: {0}")]
    Io(String),
}

impl FetchCause {
    /// A missing local file will not appear by waiting; everything else may be passing.
    pub fn is_retryable(&self) -> bool {
        !matches!(self, FetchCause::Io(_))
    }
}

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
    pub fn io(path: impl AsRef<std::path::Path>, source: std::io::Error) -> Self {
        DataError::Io {
            path: path.as_ref().display().to_string(),
            source,
        }
    }
}
