//! Mutated manifests and chunks: every case is a valid dataset or a clear error, never a
//! panic (`headroom bench inputs` runs 100,000 per dataset).
#![cfg(not(target_arch = "wasm32"))]

use headroom::data::mutate;

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
