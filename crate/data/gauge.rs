//! The bytes the data pipeline holds now and at its peak, against the bound it promises.

use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Counts the bytes the data pipeline holds right now and at its peak, so memory
/// monitoring and the enforcer can see the data side of a run.
#[derive(Clone, Debug, Default)]
pub struct MemoryGauge {
    inner: Arc<GaugeInner>,
}

#[derive(Debug, Default)]
struct GaugeInner {
    held: AtomicUsize,
    peak: AtomicUsize,
}

/// A figure the gauge reports; `bound_bytes` is what the pipeline promises never to pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PipelineMemory {
    pub bytes_held: usize,
    pub peak_bytes_held: usize,
    pub bound_bytes: usize,
}

impl MemoryGauge {
    pub fn hold(&self, bytes: usize) -> HeldBytes {
        let now = self.inner.held.fetch_add(bytes, Ordering::SeqCst) + bytes;
        self.inner.peak.fetch_max(now, Ordering::SeqCst);
        HeldBytes {
            gauge: self.inner.clone(),
            bytes,
        }
    }

    pub fn bytes_held(&self) -> usize {
        self.inner.held.load(Ordering::SeqCst)
    }

    pub fn peak_bytes_held(&self) -> usize {
        self.inner.peak.load(Ordering::SeqCst)
    }
}

/// Bytes counted by a gauge until this guard drops, so the figure cannot drift from the
/// buffers it describes.
#[derive(Debug)]
pub struct HeldBytes {
    gauge: Arc<GaugeInner>,
    bytes: usize,
}

impl Drop for HeldBytes {
    fn drop(&mut self) {
        self.gauge.held.fetch_sub(self.bytes, Ordering::SeqCst);
    }
}
