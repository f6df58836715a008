//! `--backend cuda` or `--backend ndarray` in a build without that feature says how to get one.
#![cfg(all(not(target_arch = "wasm32"), not(feature = "cuda")))]

mod common;

use headroom::data::Codec;

#[test]
fn cuda_without_the_feature_says_how_to_build_it() {
    let dataset = common::synthetic_dataset(256, 128, Codec::Lz4);
    let data = dataset.dir.to_str().unwrap();
    for command in ["train", "plan"] {
        let output = common::headroom(&[command, "--data", data, "--backend", "cuda"]);
        assert!(!output.status.success(), "{command} --backend cuda succeeded");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("built without CUDA"), "{stderr}");
        assert!(stderr.contains("--features cuda"), "{stderr}");
    }
}

#[cfg(not(feature = "ndarray"))]
#[test]
fn ndarray_without_the_feature_names_flex_and_the_feature() {
    let dataset = common::synthetic_dataset(256, 128, Codec::Lz4);
    let data = dataset.dir.to_str().unwrap();
    for command in ["train", "plan"] {
        let output = common::headroom(&[command, "--data", data, "--backend", "ndarray"]);
        assert!(!output.status.success(), "{command} --backend ndarray succeeded");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("built without ndarray"), "{stderr}");
        assert!(
            stderr.contains("--backend flex") && stderr.contains("--features ndarray"),
            "{stderr}"
        );
    }
}
