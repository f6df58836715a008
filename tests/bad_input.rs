//! Mutated manifests and chunks: every case is a valid dataset or a clear error, never a
//! panic (`headroom bench inputs` runs 100,000 per dataset).
#![cfg(not(target_arch = "wasm32"))]

use headroom::bench::mutate;

#[test]
fn mutated_manifests_and_chunks_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    for (name, dataset) in mutate::sample_datasets(dir.path()).unwrap() {
        let figures = mutate::run(&dataset, 7, 3000);
        assert_eq!(figures.panics, 0, "{name}: {:?}", figures.panic_examples);
        // The mutations must reach both outcomes, or they test nothing.
        assert!(
            figures.refused > 300 && figures.valid > 100,
            "{name}: {figures:?}"
        );
    }
}

/// Draws read from a sequence proptest generates and shrinks: a failing case shrinks to
/// the fewest, smallest draws (so the simplest mutation) that still fail. Past its end the
/// sequence reads as zeros.
struct Tape {
    words: Vec<u32>,
    at: usize,
}

impl rand::TryRng for Tape {
    type Error = std::convert::Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
        let word = self.words.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        Ok(word)
    }

    fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
        let low = u64::from(self.try_next_u32()?);
        Ok(low | (u64::from(self.try_next_u32()?) << 32))
    }

    fn try_fill_bytes(&mut self, bytes: &mut [u8]) -> Result<(), Self::Error> {
        for chunk in bytes.chunks_mut(4) {
            let word = self.try_next_u32()?.to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
        Ok(())
    }
}

fn datasets() -> &'static [(String, mutate::DatasetFiles)] {
    static DATASETS: std::sync::OnceLock<Vec<(String, mutate::DatasetFiles)>> = std::sync::OnceLock::new();
    DATASETS.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        mutate::sample_datasets(dir.path()).unwrap()
    })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

    /// The same mutations, drawn by proptest: a panic fails with the smallest case.
    #[test]
    fn any_mutation_proptest_draws_is_a_dataset_or_an_error(
        which in 0..4usize,
        words in proptest::collection::vec(proptest::prelude::any::<u32>(), 0..48),
    ) {
        let (_, dataset) = &datasets()[which % datasets().len()];
        let mut tape = Tape { words, at: 0 };
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            mutate::mutate_and_read(dataset, &mut tape)
        }));
        proptest::prop_assert!(outcome.is_ok(), "panicked");
    }
}
