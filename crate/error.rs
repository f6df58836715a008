//! The crate-wide error kinds, at the bottom of the layers: what a caller (the page, the
//! command line) acts on without reading an error's text, and why one fetch failed (the
//! platform's transport reports it, the data layer retries on it).

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

/// What kind of failure, for a caller (the page) to act on without reading the text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    /// The manifest or a chunk is not on the server (HTTP 404) or not on disk.
    DatasetMissing,
    /// The server did not answer, answered with an error, or stalled.
    Network,
    /// The dataset is there but wrong: a malformed manifest, a chunk that fails its checks.
    BadDataset,
    /// The settings asked for are not valid.
    BadSettings,
    /// No setting of this run fits the cap.
    CapTooSmall,
    /// A step held more than the cap and nothing smaller frees more.
    CapExceeded,
    /// The loss became infinite or NaN.
    Diverged,
    /// No device to train on (no WebGPU adapter, for one).
    NoDevice,
    /// The GPU device was lost mid-run.
    DeviceLost,
    /// Reading results back from the device failed.
    Readback,
    /// A request came while the run was busy with another.
    Busy,
    /// A saved run cannot be read or does not fit the dataset and model it names.
    BadCheckpoint,
}

impl FetchCause {
    pub fn kind(&self) -> ErrorKind {
        match self {
            FetchCause::Status(404) | FetchCause::Io(_) => ErrorKind::DatasetMissing,
            FetchCause::Status(_)
            | FetchCause::Timeout(_)
            | FetchCause::Network(_)
            | FetchCause::Truncated { .. } => ErrorKind::Network,
            FetchCause::WrongLength { .. }
            | FetchCause::TooLarge { .. }
            | FetchCause::Checksum { .. }
            | FetchCause::Decode(_) => ErrorKind::BadDataset,
        }
    }

    /// A missing local file will not appear by waiting; everything else may be passing.
    pub fn is_retryable(&self) -> bool {
        !matches!(self, FetchCause::Io(_))
    }
}
