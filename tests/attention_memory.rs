//! The GPT's attention measured on wgpu (lavapipe here): the bytes a training step holds
//! grow linearly with the context, not with its square, because the attention keeps
//! nothing T×T for backward (crate/ops/attention.rs). Alone in its binary: tests running
//! beside it on the same device would add their tensors to the pool's figures.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::step_bytes;
use headroom::model::{GptShape, ModelConfig};

fn one_block(context: usize) -> ModelConfig {
    ModelConfig::Gpt(GptShape {
        layers: 1,
        heads: 4,
        width: 64,
        context,
    })
}

#[tokio::test]
async fn a_steps_bytes_grow_linearly_with_the_context() {
    // Plain attention keeps two tensors of batch x heads x T x T: at context 256 those are
    // 2 x 4 x 256 elements a token against the block's ~17 x 64, and doubling the context
    // would multiply the step's bytes by ~3.3. Linear growth doubles them; the bound leaves
    // room for the parameters' share and the pool's pages.
    let windows = 8;
    let short = step_bytes(one_block(256), windows, false).await;
    let long = step_bytes(one_block(512), windows, false).await;
    let ratio = long as f64 / short as f64;
    assert!(
        ratio <= 2.2,
        "context 256: {short} bytes, 512: {long} bytes ({ratio:.2}x)"
    );
}
