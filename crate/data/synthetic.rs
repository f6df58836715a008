//! Generated data with learnable structure, for tests and offline use: each class is a
//! smooth random prototype image, each sample its prototype plus noise and a small shift.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub const SIDE: usize = 28;
pub const CLASSES: usize = 10;

pub struct SyntheticImages {
    prototypes: Vec<Vec<u8>>,
    rng: ChaCha8Rng,
}

impl SyntheticImages {
    pub fn new(seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let prototypes = (0..CLASSES).map(|_| smooth_prototype(&mut rng)).collect();
        SyntheticImages { prototypes, rng }
    }

    pub fn class_names() -> Vec<String> {
        (0..CLASSES).map(|c| format!("pattern {c}")).collect()
    }

    /// The next sample: (label, 28x28 bytes).
    pub fn next_sample(&mut self) -> (u8, Vec<u8>) {
        let label = self.rng.random_range(0..CLASSES);
        let dx = self.rng.random_range(-1i32..=1);
        let dy = self.rng.random_range(-1i32..=1);
        let prototype = &self.prototypes[label];
        let mut image = vec![0u8; SIDE * SIDE];
        for y in 0..SIDE as i32 {
            for x in 0..SIDE as i32 {
                let (sx, sy) = ((x + dx).clamp(0, 27) as usize, (y + dy).clamp(0, 27) as usize);
                let noise = self.rng.random_range(-60i32..=60);
                let value = i32::from(prototype[sy * SIDE + sx]) + noise;
                image[y as usize * SIDE + x as usize] = value.clamp(0, 255) as u8;
            }
        }
        (label as u8, image)
    }
}

/// A 7x7 random grid, upsampled 4x: blobs a small network separates easily.
fn smooth_prototype(rng: &mut ChaCha8Rng) -> Vec<u8> {
    let coarse: Vec<u8> = (0..49)
        .map(|_| {
            if rng.random_bool(0.4) {
                rng.random_range(150..=255)
            } else {
                0
            }
        })
        .collect();
    (0..SIDE * SIDE)
        .map(|i| coarse[(i / SIDE / 4) * 7 + (i % SIDE) / 4])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    // In the browser (wasm-pack test, tests/run-all) these run as wasm-bindgen tests.
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn samples_are_reproducible_and_classes_differ() {
        let (mut a, mut b) = (SyntheticImages::new(3), SyntheticImages::new(3));
        for _ in 0..20 {
            assert_eq!(a.next_sample(), b.next_sample());
        }
        let distinct: std::collections::HashSet<_> = a.prototypes.iter().collect();
        assert_eq!(distinct.len(), CLASSES);
    }
}
