//! The page's pool, natively: `HEADROOM_EXCLUSIVE_PAGES=1` gives lavapipe the pool WebGPU
//! gets in the browser (one page per allocation), and the planner its model of it. There a
//! parameter, moment or gradient sum made while the activations' pages are free took one
//! of them, many times its size, for the rest of the run: a 3-block GPT under
//! checkpointing reserved 3.1x its census in one pass and 1.9x accumulating. Made in the
//! persistent pool, they leave those pages to the activations.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use serde_json::Value;

/// The run's census, its peak (device reservation plus data held) and its last loss.
fn census_peak_loss(events: &[Value]) -> (f64, f64, f64) {
    let find = |kind: &str| events.iter().find(|e| e["event"] == kind).expect(kind);
    let peak = common::held(&find("finished")["peak_memory"]) as f64;
    let last = events.iter().rfind(|e| e["event"] == "step").expect("a step");
    let loss = last["loss"].as_f64().unwrap();
    (find("started")["predicted_peak"].as_f64().unwrap(), peak, loss)
}

#[test]
fn under_checkpointing_the_pages_hold_what_the_census_counts() {
    let dataset = common::text_dataset(&common::generated_text(40_000), 4096);
    let data = dataset.dir.to_str().unwrap();
    for micro_batch in ["8", "4"] {
        let flags = [
            "--model",
            "gpt",
            "--layers",
            "3",
            "--heads",
            "2",
            "--width",
            "64",
            "--context",
            "128",
            "--effective-batch",
            "8",
            "--micro-batch",
            micro_batch,
            "--checkpointing",
            "--steps",
            "3",
            "--no-calibrate",
        ];
        let exclusive =
            common::train_events_on_wgpu_with_env(data, &flags, &[("HEADROOM_EXCLUSIVE_PAGES", "1")]);
        let (census, peak, loss) = census_peak_loss(&exclusive);
        assert!(
            peak <= 1.25 * census,
            "micro-batch {micro_batch}: {peak} bytes reserved against a census of {census}"
        );
        // Where a tensor lives does not change what it holds.
        let sliced = common::train_events_on_wgpu(data, &flags);
        assert_eq!(loss, census_peak_loss(&sliced).2, "micro-batch {micro_batch}");
    }
}
