//! Training inside headless Chromium, in a dedicated worker as the page does it: on real
//! WebGPU (SwiftShader there) and on the CPU fallback, against a real `headroom serve`
//! that `tests/run-all` starts.
#![cfg(target_arch = "wasm32")]

use headroom::data::DataSource;
use headroom::model::ModelConfig;
use headroom::train::saved_run;
use headroom::train::{Duration, Moments, Precision, Progress, TrainConfig, TrainEvent, Trainer};
use headroom::wasm::device::{self, Preference};
use wasm_bindgen_test::wasm_bindgen_test;

mod wasm_config;

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_dedicated_worker);

const CAP: u64 = 256 * 1024 * 1024;

async fn dataset_url() -> String {
    format!("{}/synthetic", wasm_config::load().await.data_url)
}

fn config(precision: Precision) -> TrainConfig {
    let mut config = TrainConfig {
        model: ModelConfig::Mlp { hidden: vec![32] },
        effective_batch: 64,
        duration: Duration::Steps(12),
        precision: Some(precision),
        // Checkpointing is this file's own test's lever, not the planner's; 8-bit moments
        // would change the losses the micro-batch tests compare.
        checkpointing: Some(false),
        moments: Some(Moments::F32),
        cap: Some(CAP),
        evaluate: false,
        ..TrainConfig::default()
    };
    config.optimizer.learning_rate = 3e-3;
    config
}

/// Runs `config` to the end on the device `preference` gives; returns every event.
async fn train(preference: Preference, config: TrainConfig) -> (String, Vec<TrainEvent>) {
    let acquired = device::acquire(preference).await.expect("a device");
    let source = DataSource::open(&dataset_url().await, config.stream_options())
        .await
        .unwrap();
    let trainer = Trainer::new(config, &source, acquired.device, acquired.backend)
        .await
        .unwrap();
    let events = run_to_end(trainer, Progress::default(), &source).await;
    (acquired.backend.to_string(), events)
}

async fn run_to_end(mut trainer: Trainer, mut progress: Progress, source: &DataSource) -> Vec<TrainEvent> {
    let mut events = Vec::new();
    while progress.summary().is_none() {
        events.extend(progress.advance(&mut trainer, source).await.unwrap());
    }
    events
}

fn losses(events: &[TrainEvent]) -> Vec<f32> {
    events
        .iter()
        .filter_map(|e| match e {
            TrainEvent::Step(step) => Some(step.loss),
            _ => None,
        })
        .collect()
}

fn assert_learns(events: &[TrainEvent]) {
    let losses = losses(events);
    assert_eq!(losses.len(), 12, "{losses:?}");
    let first = losses[..3].iter().sum::<f32>() / 3.0;
    let last = losses[losses.len() - 3..].iter().sum::<f32>() / 3.0;
    assert!(last < first * 0.8, "the loss did not fall: {losses:?}");
}

#[wasm_bindgen_test]
async fn webgpu_training_lowers_the_loss_with_every_memory_sample_under_the_cap() {
    let (backend, events) = train(Preference::WebGpu, config(Precision::F32)).await;
    assert_eq!(backend, "webgpu");
    assert_learns(&events);
    for event in &events {
        if let TrainEvent::Step(step) = event {
            let reserved = step.memory.gpu_bytes_reserved.expect("WebGPU reports its pool");
            assert!(
                reserved > 0 && step.memory.gpu_bytes_in_use.unwrap() > 0,
                "{:?}",
                step.memory
            );
            assert!(
                step.memory.data_bytes_held > 0 || step.step > 1,
                "{:?}",
                step.memory
            );
            assert!(reserved + step.memory.data_bytes_held <= CAP, "{:?}", step.memory);
            assert!(step.memory.host_bytes.unwrap() > 0);
        }
    }
}

#[wasm_bindgen_test]
async fn recomputing_checkpointing_trains_on_webgpu_with_the_losses_of_kept_activations() {
    let kept = losses(&train(Preference::WebGpu, config(Precision::F32)).await.1);
    let checkpointed = TrainConfig {
        checkpointing: Some(true),
        ..config(Precision::F32)
    };
    let (_, events) = train(Preference::WebGpu, checkpointed).await;
    assert_learns(&events);
    for (a, b) in kept.iter().zip(&losses(&events)) {
        assert!(
            (a - b).abs() <= 1e-3 * a.abs(),
            "{kept:?} vs {:?}",
            losses(&events)
        );
    }
}

#[wasm_bindgen_test]
async fn the_cpu_fallback_trains_the_same_model() {
    let (backend, events) = train(Preference::Cpu, config(Precision::F32)).await;
    assert_eq!(backend, "flex");
    assert_learns(&events);
    let TrainEvent::Step(first) = &events[1] else {
        panic!("{:?}", events[1])
    };
    assert_eq!(first.memory.gpu_bytes_reserved, None, "flex has no device pool");
    assert!(first.memory.host_bytes.unwrap() > 0, "the wasm memory is sampled");
}

#[wasm_bindgen_test]
async fn f16_without_shader_f16_falls_back_to_f32_and_says_so() {
    let (_, adapter) = device::webgpu().await.unwrap();
    let (_, events) = train(Preference::WebGpu, config(Precision::F16)).await;
    let TrainEvent::Started(started) = &events[0] else {
        panic!("{:?}", events[0])
    };
    if adapter.shader_f16 {
        assert_eq!(started.precision, Precision::F16);
        assert_eq!(started.precision_note, None);
    } else {
        assert_eq!(started.precision, Precision::F32);
        let note = started
            .precision_note
            .as_deref()
            .expect("the fallback is explained");
        assert!(note.contains("shader-f16"), "{note}");
    }
    assert_learns(&events);
}

#[wasm_bindgen_test]
async fn auto_prefers_the_cpu_to_a_software_adapter_and_says_why() {
    let (_, adapter) = device::webgpu().await.unwrap();
    let acquired = device::acquire(Preference::Auto).await.unwrap();
    if adapter.device_type == "Cpu" {
        assert_eq!(acquired.backend, "flex");
        let reason = acquired.fallback_reason.expect("the choice is explained");
        assert!(reason.contains("software renderer"), "{reason}");
    } else {
        assert_eq!(acquired.backend, "webgpu");
        assert_eq!(acquired.fallback_reason, None);
    }
}

/// The browser hides a shader that fails to compile (a warning, and a launch that looks
/// fine): WebGPU and the CPU fallback, started from the same weights (the CPU run's step-0
/// checkpoint: each backend draws its own) and fed the same batches, must give the same
/// losses for 20 steps.
#[wasm_bindgen_test]
async fn webgpu_gives_the_cpu_fallbacks_losses_from_the_same_weights() {
    let mut config = TrainConfig {
        duration: Duration::Steps(20),
        micro_batch: Some(32),
        cap: None,
        calibrate: false,
        ..config(Precision::F32)
    };
    config.seed = 9;
    let source = DataSource::open(&dataset_url().await, config.stream_options())
        .await
        .unwrap();
    let cpu = device::acquire(Preference::Cpu).await.unwrap();
    let on_cpu = Trainer::new(config, &source, cpu.device, cpu.backend)
        .await
        .unwrap();
    let start = saved_run::capture(&on_cpu, &Progress::default(), &source)
        .await
        .unwrap();
    let gpu = device::acquire(Preference::WebGpu).await.unwrap();
    let (on_gpu, progress) = saved_run::restore(&start, |_| {}, &source, gpu.device, gpu.backend)
        .await
        .unwrap();
    let gpu_losses = losses(&run_to_end(on_gpu, progress, &source).await);
    let cpu_losses = losses(&run_to_end(on_cpu, Progress::default(), &source).await);
    assert_eq!(cpu_losses.len(), 20);
    for (step, (cpu, gpu)) in cpu_losses.iter().zip(&gpu_losses).enumerate() {
        assert!(
            (cpu - gpu).abs() <= 1e-3 * cpu.abs().max(1.0),
            "step {}: CPU {cpu}, WebGPU {gpu}\nCPU {cpu_losses:?}\nWebGPU {gpu_losses:?}",
            step + 1
        );
    }
}
