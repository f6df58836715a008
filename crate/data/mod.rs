//! Datasets as compressed, checksummed chunks described by a manifest, streamed with a
//! bounded prefetch so the whole set is never held in memory.

pub mod batch;
pub mod chunk;
pub mod codec;
pub mod error;
pub mod footprint;
pub mod gauge;
pub mod manifest;
pub mod retry;
pub mod scan;
pub mod shuffle;
pub mod stream;
pub mod synthetic;

#[cfg(not(target_arch = "wasm32"))]
pub mod idx;
#[cfg(not(target_arch = "wasm32"))]
pub mod images;
#[cfg(not(target_arch = "wasm32"))]
pub mod import;
pub mod text;
pub mod writer;

pub use batch::{Batch, BatchReader, ReaderPosition};
pub use chunk::Chunk;
pub use codec::Codec;
pub use error::{DataError, ErrorKind, FetchCause};
pub use footprint::ChunkFootprint;
pub use gauge::{MemoryGauge, PipelineMemory};
pub use manifest::{ChunkEntry, MAX_CHUNK_BYTES, MAX_MANIFEST_BYTES, Manifest, Split};
pub use retry::RetryPolicy;
pub use stream::{DataSource, EpochStream, StreamOptions, TEXT_MIX, Window};
