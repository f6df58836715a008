//! Reproducible shuffling: the same seed gives the same order natively and in wasm32
//! (ChaCha is portable and rand's index sampling does not depend on pointer width).

use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn rng_for(seed: u64, epoch: u64, stream: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ stream);
    rng
}

/// Order in which an epoch visits the chunks of a split.
pub fn chunk_order(seed: u64, epoch: u64, chunks: usize, shuffle: bool) -> Vec<usize> {
    let mut order: Vec<usize> = (0..chunks).collect();
    if shuffle {
        order.shuffle(&mut rng_for(seed, epoch, u64::MAX));
    }
    order
}

/// Order in which an epoch visits the samples inside one chunk.
pub fn sample_order(seed: u64, epoch: u64, chunk_index: usize, samples: usize, shuffle: bool) -> Vec<u32> {
    let mut order: Vec<u32> = (0..samples as u32).collect();
    if shuffle {
        order.shuffle(&mut rng_for(seed, epoch, chunk_index as u64));
    }
    order
}

/// The draws that interleave the chunks a reader holds open (see `StreamOptions::mix`).
pub fn mixer(seed: u64, epoch: u64) -> ChaCha8Rng {
    rng_for(seed, epoch, u64::MAX - 1)
}

/// An index into `remaining`, drawn in proportion to its entries, so chunks read at once
/// run out together; `None` when nothing remains.
pub fn draw_weighted(rng: &mut ChaCha8Rng, remaining: &[usize]) -> Option<usize> {
    let total: usize = remaining.iter().sum();
    if total == 0 {
        return None;
    }
    let mut ticket = rng.random_range(0..total as u64) as usize;
    remaining.iter().position(|&left| {
        let here = ticket < left;
        ticket = ticket.saturating_sub(left);
        here
    })
}

/// Where an epoch's windows of `window` tokens start in a chunk of `tokens`: one window per
/// `window` tokens, at seeded offsets drawn anywhere in the chunk (as nanoGPT draws its
/// batches), or, unshuffled, the chunk cut into consecutive windows.
pub fn window_offsets(
    seed: u64,
    epoch: u64,
    chunk_index: usize,
    tokens: usize,
    window: usize,
    shuffle: bool,
) -> Vec<u32> {
    let count = tokens / window.max(1);
    if count == 0 {
        return Vec::new();
    }
    if !shuffle {
        return (0..count).map(|i| (i * window) as u32).collect();
    }
    let mut rng = rng_for(seed, epoch, chunk_index as u64);
    let last = (tokens - window) as u32;
    (0..count).map(|_| rng.random_range(0..=last)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    // In the browser (wasm-pack test, tests/run-all) these run as wasm-bindgen tests.
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn same_seed_same_order_and_epochs_differ() {
        assert_eq!(chunk_order(7, 0, 50, true), chunk_order(7, 0, 50, true));
        assert_ne!(chunk_order(7, 0, 50, true), chunk_order(7, 1, 50, true));
        assert_ne!(
            sample_order(7, 0, 3, 1000, true),
            sample_order(8, 0, 3, 1000, true)
        );
        let mut sorted = sample_order(7, 0, 3, 1000, true);
        sorted.sort();
        assert_eq!(sorted, (0..1000).collect::<Vec<u32>>());
    }

    #[test]
    fn weighted_draws_follow_the_weights_and_skip_the_empty() {
        let mut rng = mixer(1, 0);
        let mut counts = [0usize; 3];
        for _ in 0..3000 {
            counts[draw_weighted(&mut rng, &[1, 0, 2]).unwrap()] += 1;
        }
        assert_eq!(counts[1], 0);
        assert!((800..1200).contains(&counts[0]), "{counts:?}");
        assert_eq!(draw_weighted(&mut rng, &[0, 0]), None);
    }

    #[test]
    fn windows_fit_the_chunk_and_follow_the_seed() {
        let offsets = window_offsets(3, 0, 2, 1000, 65, true);
        assert_eq!(offsets.len(), 1000 / 65);
        assert!(offsets.iter().all(|&o| o as usize + 65 <= 1000));
        assert_eq!(offsets, window_offsets(3, 0, 2, 1000, 65, true));
        assert_ne!(offsets, window_offsets(3, 1, 2, 1000, 65, true));
        assert_eq!(window_offsets(3, 0, 2, 200, 65, false), vec![0, 65, 130]);
        assert!(window_offsets(3, 0, 2, 64, 65, true).is_empty());
    }

    #[test]
    fn without_shuffle_order_is_file_order() {
        assert_eq!(chunk_order(7, 3, 4, false), vec![0, 1, 2, 3]);
        assert_eq!(sample_order(7, 3, 1, 3, false), vec![0, 1, 2]);
    }
}
