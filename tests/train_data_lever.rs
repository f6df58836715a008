//! The data pipeline as a planned lever, on real Fashion-MNIST chunks and wgpu: under a
//! 16 MiB cap the small MLP trains with the data settings the planner picked, and a cap
//! only smaller chunks would meet is refused with that advice.
#![cfg(not(target_arch = "wasm32"))]

mod common;

const MIB: u64 = 1 << 20;
const CAP: u64 = 16 * MIB;

/// Fashion-MNIST from the Debian package, cut into chunks of `chunk_samples`.
fn fashion_mnist(chunk_samples: usize) -> (tempfile::TempDir, String) {
    let root = tempfile::tempdir().expect("temp dir");
    let out = root.path().to_str().unwrap();
    let output = common::headroom(&[
        "prepare",
        "--chunk-samples",
        &chunk_samples.to_string(),
        "--out-root",
        out,
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let dir = root.path().join("fashion-mnist").to_str().unwrap().to_string();
    (root, dir)
}

const RUN: &[&str] = &[
    "--hidden",
    "256",
    "--effective-batch",
    "256",
    "--steps",
    "20",
    "--eval-every",
    "10",
    "--eval-samples",
    "1000",
    "--backend",
    "wgpu",
];

/// `headroom train` of the small MLP on `data`, with `extra` flags.
fn train_args<'a>(data: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["train", "--data", data];
    args.extend(RUN);
    args.extend(extra);
    args
}

#[test]
fn under_16_mib_the_small_mlp_trains_with_the_data_settings_the_planner_picked() {
    let (_root, data) = fashion_mnist(256);
    let cap = CAP.to_string();
    let events = common::headroom_events(&train_args(&data, &["--cap", &cap]));
    let of = |kind: &'static str| events.iter().filter(move |e| e["event"] == kind);
    let started = of("started").next().unwrap();
    let finished = of("finished").next().unwrap();
    assert_eq!(finished["steps"], 20);
    // Every sample the run took, training and evaluating, is under the cap.
    let mut samples = 0;
    for event in of("step").chain(of("eval")) {
        let counted = common::held(&event["memory"]);
        assert!(counted <= CAP, "{event}");
        samples += 1;
    }
    assert_eq!(samples, 20 + 2);
    // The planner's figure for the pipeline against the most it held at any moment.
    let predicted = started["predicted"]["data"].as_u64().unwrap() as f64;
    let held = finished["data_peak_bytes"].as_u64().unwrap() as f64;
    assert!(
        (predicted - held).abs() <= 0.1 * held,
        "data: predicted {predicted}, held {held} with {}",
        started["data"]
    );
}

#[test]
fn a_cap_only_smaller_chunks_meet_is_refused_with_that_advice() {
    let (_root, data) = fashion_mnist(4096);
    let output = common::headroom(&train_args(&data, &["--cap", &CAP.to_string()]));
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("a cap of 16.0 MiB fits no setting"), "{stderr}");
    // The chunks it names are those the first test trains on, under this very cap. Whether
    // it says they fit rests on the f32 probes' excess carried to f16 (the first test's run
    // picks f16): only a probe of the f32 setting that accumulates, at 14.4 MiB measured,
    // could say, and 14.4 MiB of device leaves no headroom under 16.
    assert!(
        stderr.contains("with chunks of 256 samples, made by headroom prepare --chunk-samples 256"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}
