//! Reproducible shuffling: the same seed gives the same order natively and in wasm32
//! (ChaCha is portable and rand's index sampling does not depend on pointer width).

use rand::SeedableRng;
use rand::seq::SliceRandom;
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn without_shuffle_order_is_file_order() {
        assert_eq!(chunk_order(7, 3, 4, false), vec![0, 1, 2, 3]);
        assert_eq!(sample_order(7, 3, 1, 3, false), vec![0, 1, 2]);
    }
}
