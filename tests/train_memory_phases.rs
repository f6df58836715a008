//! `headroom train --memory-phases`: every memory sample of a step with the phase it was
//! taken at, on wgpu (lavapipe here), checked against what the run itself reports and
//! against what recomputation and the plain forward pass keep alive.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use headroom::data::Codec;
use headroom::memory::{MemorySample, Phase, PhaseSample};
use headroom::model::{InputKind, InputShape, ModelConfig};
use serde_json::Value;

const BATCH: u64 = 1024;
const WIDTH: u64 = 512;
const INPUT: InputShape = InputShape {
    height: 28,
    width: 28,
    classes: 10,
    kind: InputKind::Images,
};

fn steps(events: &[Value]) -> Vec<&Value> {
    events.iter().filter(|e| e["event"] == "step").collect()
}

fn phases(step: &Value) -> Vec<PhaseSample> {
    serde_json::from_value(step["memory_phases"].clone()).expect("memory_phases")
}

fn sample(phase: Phase, phases: &[PhaseSample]) -> MemorySample {
    phases
        .iter()
        .find(|p| p.phase == phase)
        .expect("the phase was sampled")
        .memory
}

fn in_use(phase: Phase, phases: &[PhaseSample]) -> u64 {
    sample(phase, phases)
        .gpu_bytes_in_use
        .expect("wgpu reports its pool")
}

/// The events of two steps of the MLP of four `WIDTH` layers at `BATCH` on wgpu over
/// `data`, with `extra` flags and `env` set for the run.
fn mlp_events(data: &str, extra: &[&str], env: &[(&str, &str)]) -> Vec<Value> {
    let hidden = format!("{WIDTH},{WIDTH},{WIDTH},{WIDTH}");
    let batch = BATCH.to_string();
    let mut flags = vec![
        "--model",
        "mlp",
        "--hidden",
        &hidden,
        "--effective-batch",
        &batch,
        "--steps",
        "2",
    ];
    flags.extend(extra);
    common::train_events_on_wgpu_with_env(data, &flags, env)
}

#[test]
fn each_step_reports_its_phases_and_its_peak_is_theirs() {
    let dataset = common::synthetic_dataset(2048, 1024, Codec::Lz4);
    let data = dataset.dir.to_str().unwrap();
    let with_flag = |extra: &[&str]| mlp_events(data, extra, &[]);

    let plain = with_flag(&["--memory-phases"]);
    let recomputed = with_flag(&["--memory-phases", "--checkpointing"]);
    let unrecorded = with_flag(&[]);
    // One pass a step in f32: with checkpointing the update runs inside backward, and the
    // run says so; without, it does not.
    let started = |events: &[Value]| events.iter().find(|e| e["event"] == "started").unwrap().clone();
    assert_eq!(started(&recomputed)["updates_in_backward"], true);
    assert_eq!(started(&plain)["updates_in_backward"], false);
    assert!(
        steps(&unrecorded)
            .iter()
            .all(|s| s.get("memory_phases").is_none())
    );

    for (events, expected) in [
        (&plain, vec![Phase::Forward, Phase::Backward, Phase::Update]),
        (
            &recomputed,
            std::iter::once(Phase::Forward)
                .chain((0..5).rev().map(|segment| Phase::Recomputed { segment }))
                .chain([Phase::Backward, Phase::Update])
                .collect(),
        ),
    ] {
        for step in steps(events) {
            let phases = phases(step);
            let order: Vec<Phase> = phases.iter().map(|p| p.phase).collect();
            assert_eq!(order, expected);
            // The step's peak is made of exactly these samples.
            let peak = phases
                .iter()
                .fold(MemorySample::default(), |peak, p| peak.max(p.memory));
            let reported: MemorySample = serde_json::from_value(step["memory"].clone()).unwrap();
            assert_eq!(peak.gpu_bytes_reserved, reported.gpu_bytes_reserved);
            assert_eq!(peak.gpu_bytes_in_use, reported.gpu_bytes_in_use);
        }
    }

    // Recomputation keeps only the segments' inputs, and of a chain of equal layers not
    // even all of them: the planner drops segment 1's (recomputed from the batch for its
    // turn) and keeps segment 2's. In f32 without accumulation each segment's gradients go
    // into its update as soon as its backward yields them, so none pile up: from
    // recomputed layer 3 to layer 2 the bytes in use fall by one layer output (layer 3's
    // input, let go), and from layer 2 to layer 1 they stay (layer 2's input let go, layer
    // 1's made again in its place). Updating after backward, each step down held one more
    // layer's gradients (1 MiB); what is left is small tensors of the update (240 bytes
    // measured).
    let census = ModelConfig::Mlp {
        hidden: vec![WIDTH as usize; 4],
    }
    .census(&INPUT);
    assert_eq!(headroom::memory::recomputed_inputs(&census.segments), 0b10);
    let phases = phases(steps(&recomputed)[1]);
    let layer_gradients = (WIDTH * WIDTH + WIDTH) * 4;
    let at = |segment| in_use(Phase::Recomputed { segment }, &phases) as i64;
    let small = 4096;
    let first = at(3) - at(2) - (BATCH * WIDTH * 4) as i64;
    let second = at(2) - at(1);
    assert!(
        first.abs() < small && second.abs() < small,
        "off by {first} and {second} bytes; a layer's gradients are {layer_gradients}"
    );

    // After the plain forward pass each hidden layer holds one activation: its ReLU's
    // output, which the next matmul keeps as its input and the ReLU's backward reads its
    // mask from (burn's own ReLU kept its input too, a second one per layer). Step 2's
    // update leaves the weights and Adam's moments, which its forward pass held too: the
    // difference is what the forward pass keeps for backward.
    let plain_phases = self::phases(steps(&plain)[1]);
    let saved = in_use(Phase::Forward, &plain_phases) - in_use(Phase::Update, &plain_phases);
    let pixels = (INPUT.height * INPUT.width) as u64;
    let activations = BATCH * (pixels + 4 * WIDTH + INPUT.classes as u64) * 4;
    // Beside them only small tensors (the targets, the loss), far below one more
    // activation of BATCH x WIDTH.
    let layer_output = BATCH * WIDTH * 4;
    assert!(
        saved.abs_diff(activations) < layer_output / 16,
        "the forward pass kept {saved} bytes, its activations are {activations}"
    );
}

/// `HEADROOM_SEGMENT_SYNC` (a measurement switch: wait for the device after each segment)
/// lets a dropped activation go before the next segment allocates: step 2's forward pass
/// of a checkpointed run reserves less with it (43.0 against 38.0 MiB measured on lavapipe,
/// 2026-12-07), the bytes in use and the loss the same.
#[test]
fn waiting_after_each_segment_lets_the_forward_pass_reserve_less() {
    let dataset = common::synthetic_dataset(2048, 1024, Codec::Lz4);
    let data = dataset.dir.to_str().unwrap();
    let forward = |env: &[(&str, &str)]| {
        let events = mlp_events(data, &["--checkpointing", "--memory-phases"], env);
        let step = steps(&events)[1].clone();
        let memory = sample(Phase::Forward, &phases(&step));
        (
            memory.gpu_bytes_reserved.unwrap(),
            memory.gpu_bytes_in_use.unwrap(),
            step["loss"].clone(),
        )
    };
    let (reserved, in_use, loss) = forward(&[]);
    let (synced, synced_in_use, synced_loss) = forward(&[("HEADROOM_SEGMENT_SYNC", "1")]);
    assert!(
        synced < reserved,
        "{synced} bytes reserved with the waits, {reserved} without"
    );
    assert_eq!((synced_in_use, synced_loss), (in_use, loss));
}
