//! The planner against the device: for a handful of settings on wgpu (lavapipe here), MLP
//! and CNN, each lever, the census's device reservation must stay within 15% of the
//! measured one and the calibrated figure (after the probe steps) within 10%. A model or
//! allocator change that moves the real peak without the census following it fails here,
//! not in a user's run. `headroom bench plan` prints the wider
//! table, held-out settings included.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use headroom::data::Codec;

/// Settings and the lever each exercises.
const SETTINGS: &[&str] = &[
    "--model mlp --hidden 512,256 --effective-batch 256 --micro-batch 256",
    "--model mlp --hidden 1024,1024 --effective-batch 256 --micro-batch 256",
    "--model mlp --hidden 512 --effective-batch 2048 --micro-batch 256",
    "--model mlp --hidden 512,256 --effective-batch 256 --micro-batch 256 --precision f16",
    "--model mlp --hidden 1024,1024,1024,1024 --effective-batch 1024 --micro-batch 1024 --precision f16 --checkpointing",
    "--model cnn --channels 16,32 --effective-batch 64 --micro-batch 64",
    "--model cnn --channels 16,32 --effective-batch 64 --micro-batch 64 --precision f16",
    "--model cnn --channels 16,32 --effective-batch 64 --micro-batch 64 --checkpointing",
];

/// The census's, the calibrated and the measured peak device reservation of 3 steps of
/// `setting`, in its own process (a fresh pool).
fn predicted_and_measured(data: &str, setting: &str) -> (u64, u64, u64) {
    let flags: Vec<&str> = ["--steps", "3"].into_iter().chain(setting.split(' ')).collect();
    let events = common::train_events_on_wgpu(data, &flags);
    let find = |kind: &str| events.iter().find(|e| e["event"] == kind).unwrap();
    let predicted: headroom::memory::Breakdown =
        serde_json::from_value(find("started")["predicted"].clone()).unwrap();
    let calibrated = find("started")["calibrated_peak"]
        .as_u64()
        .expect("wgpu calibrates")
        - predicted.data;
    let measured = find("finished")["peak_memory"]["gpu_bytes_reserved"]
        .as_u64()
        .expect("wgpu reports its pool");
    (predicted.device(), calibrated, measured)
}

#[test]
fn the_census_stays_within_15_percent_and_the_calibrated_plan_within_10_of_the_measured_peak() {
    let dataset = common::synthetic_dataset(4096, 2048, Codec::Lz4);
    let data = dataset.dir.to_str().unwrap();
    let mut misses = Vec::new();
    for setting in SETTINGS {
        let (census, calibrated, measured) = predicted_and_measured(data, setting);
        for (figure, predicted, bound) in [("census", census, 0.15), ("calibrated", calibrated, 0.10)] {
            let error = (predicted as f64 - measured as f64) / measured as f64;
            if error.abs() > bound {
                misses.push(format!(
                    "{setting}: {figure} {predicted}, measured {measured} ({:+.1}%)",
                    100.0 * error
                ));
            }
        }
    }
    assert!(misses.is_empty(), "the plan missed:\n{}", misses.join("\n"));
}
