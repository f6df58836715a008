//! Recomputation measured: the device bytes a step holds, with and without it. Alone in
//! its binary: tests running beside it on the same device would add their tensors to the
//! pool's figures.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::step_bytes;
use headroom::model::{GptShape, ModelConfig};

#[tokio::test]
async fn recomputation_holds_one_segments_activations_at_a_time() {
    // Each case with the largest share of the kept bytes recomputation may hold.
    let cases = [
        // Four equal layers, activations well above the parameters: kept, every layer's
        // output is alive at the peak (the ReLU keeps only its output, which the next
        // matmul keeps anyway); recomputed, three of those (the planner recomputes the
        // first from the batch) and one layer's working set: 0.79 measured.
        (ModelConfig::Mlp { hidden: vec![256; 4] }, 2048, 0.85),
        // Two conv blocks, the first's ReLU output and pool indices the bulk (burn's conv2d
        // keeps only its input, the block's): recomputed, the first block's and the second's
        // working set. 0.79 measured (0.70 when the conv kept nine windows of its input).
        (
            ModelConfig::Cnn {
                channels: vec![16, 32],
            },
            256,
            0.85,
        ),
        // Four blocks whose attention scores and 4x MLP dominate: recomputed, one block's
        // working set and the blocks' inputs (0.29 measured).
        (
            ModelConfig::Gpt(GptShape {
                layers: 4,
                heads: 4,
                width: 64,
                context: 64,
            }),
            32,
            0.7,
        ),
    ];
    for (model, micro_batch, bound) in cases {
        let kept = step_bytes(model.clone(), micro_batch, false).await;
        let recomputed = step_bytes(model.clone(), micro_batch, true).await;
        let ratio = recomputed as f64 / kept as f64;
        assert!(
            ratio < bound,
            "{model:?}: {recomputed} bytes recomputed, {kept} kept ({ratio:.2})"
        );
    }
}
