//! How a device allocator turns live tensors into reserved bytes. Mirrors cubecl 0.11's
//! pools closely enough to predict a reservation, not to replay one.

use serde::Serialize;

const MIB: u64 = 1024 * 1024;
/// cubecl's small-allocation pool: slices up to 64 KiB from 8 MiB pages. Kernel metadata
/// lives there too, so a run always holds at least one page.
const SMALL_PAGE: u64 = 8 * MIB;
const SMALL_SLICE: u64 = 64 * 1024;
/// The adaptive arena: pages sized to the largest allocation plus 1 MiB of slack, in
/// whole MiB, at least 2 MiB.
const MIN_ARENA_PAGE: u64 = 2 * MIB;
const ARENA_SLACK: u64 = MIB;
/// The exclusive pools' buckets: 24 sizes spaced geometrically from 32 KiB to the largest
/// buffer the device allows.
const MIN_BUCKET: u64 = 32 * 1024;

const BUCKETS: usize = 24;

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PoolModel {
    /// Sub-sliced pages (cubecl's adaptive pools): native wgpu and CUDA.
    Sliced { alignment: u64 },
    /// One page per allocation, in size buckets: cubecl on wasm32 (WebGPU).
    Exclusive { alignment: u64, max_buffer: u64 },
    /// The host allocator (ndarray, flex): about the bytes asked for.
    Host,
}

impl PoolModel {
    /// The model for the backend this build runs `backend` on.
    pub fn for_backend(backend: &str) -> PoolModel {
        match backend {
            "ndarray" | "flex" => PoolModel::Host,
            _ if crate::ops::backend::exclusive_pages() => PoolModel::Exclusive {
                alignment: 256,
                max_buffer: 1024 * MIB,
            },
            _ => PoolModel::Sliced { alignment: 256 },
        }
    }

    /// Bytes reserved to hold `live` allocations at once.
    pub fn reserved(&self, live: &[u64]) -> u64 {
        match *self {
            PoolModel::Host => live.iter().sum(),
            PoolModel::Sliced { alignment } => sliced_reserved(live, alignment),
            PoolModel::Exclusive {
                alignment,
                max_buffer,
            } => {
                let buckets = bucket_sizes(max_buffer, alignment);
                live.iter()
                    .map(|&size| buckets.iter().copied().find(|&b| b >= size).unwrap_or(size))
                    .sum()
            }
        }
    }
}

fn sliced_reserved(live: &[u64], alignment: u64) -> u64 {
    let aligned = |size: u64| size.next_multiple_of(alignment);
    let small: u64 = live
        .iter()
        .filter(|&&s| s <= SMALL_SLICE)
        .map(|&s| aligned(s))
        .sum();
    let small_pages = small.div_ceil(SMALL_PAGE).max(1);
    let large: Vec<u64> = live
        .iter()
        .filter(|&&s| s > SMALL_SLICE)
        .map(|&s| aligned(s))
        .collect();
    let Some(&largest) = large.iter().max() else {
        return small_pages * SMALL_PAGE;
    };
    let page = if largest <= MIN_ARENA_PAGE {
        MIN_ARENA_PAGE
    } else {
        (largest + ARENA_SLACK).next_multiple_of(MIB)
    };
    // Slices pack pages tightly once they are sized; what is lost is the last page's tail.
    let large_bytes: u64 = large.iter().sum();
    small_pages * SMALL_PAGE + large_bytes.div_ceil(page) * page
}

fn bucket_sizes(max_size: u64, alignment: u64) -> Vec<u64> {
    let log_min = (MIN_BUCKET as f64).ln();
    let log_range = (max_size as f64).ln() - log_min;
    let mut sizes: Vec<u64> = (0..BUCKETS)
        .map(|i| {
            let position = i as f64 / (BUCKETS - 1) as f64;
            ((log_min + log_range * position).exp() as u64).next_multiple_of(alignment)
        })
        .collect();
    sizes.dedup();
    sizes
}
