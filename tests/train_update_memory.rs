//! The update made inside backward, measured: the device bytes a whole step holds (its
//! update included) with it and with the two-phase step. Alone in its binary: tests
//! running beside it on the same device would add their tensors to the pool's figures.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::one_batch;
use headroom::data::MemoryGauge;
use headroom::memory::MemoryTracker;
use headroom::model::ModelConfig;
use headroom::train::optimizer::Optimizer;
use headroom::train::step::{MicroSteps, accumulate_gradients, update_in_backward};
use headroom::train::{BackendKind, Moments, OptimizerConfig};

/// The peak of bytes in use over a second step of `model` under checkpointing (the first
/// made Adam's moments), its update inside backward or after it.
async fn second_step_peak(model: &ModelConfig, micro_batch: usize, in_backward: bool) -> u64 {
    let (batch, input) = one_batch(micro_batch).await;
    let device = BackendKind::Wgpu.device();
    let train_device = device.clone().autodiff();
    let mut model = model.init(&input, &train_device);
    let mut tracker = MemoryTracker::new(device, MemoryGauge::default());
    let mut optimizer = Optimizer::new(&OptimizerConfig::default(), Moments::F32);
    let steps = MicroSteps {
        recompute: true,
        ..MicroSteps::f32(micro_batch)
    };
    assert!(steps.updates_in_backward(batch.len()));
    for _ in 0..2 {
        tracker.take_step_peak();
        model = if in_backward {
            let update = |model, grads| optimizer.step(1e-3, model, grads);
            update_in_backward(
                model,
                &batch,
                steps,
                &input,
                &train_device,
                Some(&mut tracker),
                update,
            )
            .await
            .0
        } else {
            let step =
                accumulate_gradients(&model, &batch, steps, &input, &train_device, Some(&mut tracker)).await;
            optimizer.step(1e-3, model, step.grads)
        };
        tracker.sample();
    }
    tracker
        .take_step_peak()
        .gpu_bytes_in_use
        .expect("wgpu reports its pool")
}

/// Four equal hidden layers whose weights outweigh the batch's activations: after backward
/// the two-phase step holds every gradient for the update to read, the update in backward
/// one layer's. At least half of that difference must show in the step's peak.
#[tokio::test]
async fn the_update_in_backward_holds_one_segments_gradients_not_all() {
    let model = ModelConfig::Mlp { hidden: vec![512; 4] };
    let two_phase = second_step_peak(&model, 8, false).await;
    let in_backward = second_step_peak(&model, 8, true).await;
    let census = model.census(&one_batch(8).await.1);
    let segment_bytes: Vec<u64> = census
        .segment_parameters()
        .iter()
        .map(|tensors| 4 * tensors.iter().sum::<usize>() as u64)
        .collect();
    let all: u64 = segment_bytes.iter().sum();
    let largest = *segment_bytes.iter().max().unwrap();
    let saved = two_phase.saturating_sub(in_backward);
    assert!(
        2 * saved >= all - largest,
        "in use at the peak: {in_backward} bytes updating in backward, {two_phase} after it; \
         saved {saved} of the {} the census expects",
        all - largest
    );
}
