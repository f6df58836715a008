//! The MLP's ReLU forward and backward, and backward from the recomputation's
//! vector-Jacobian seed, measured on wgpu (lavapipe here): none builds a tensor of the
//! activation's size, where burn's `relu` and `relu_backward` build a 32-bit mask and
//! `sum(output * upstream)` a product and a copy of `upstream`. Alone in its binary: tests
//! beside it on the same device would add their tensors to the pool's figures.
#![cfg(not(target_arch = "wasm32"))]

use burn::prelude::*;
use burn::tensor::Distribution;
use headroom::ops::relu::relu_over_input;
use headroom::ops::vjp::vjp_seed;
use headroom::train::BackendKind;

/// 16 MiB in f32: each tensor of this shape takes a page of its own.
const SHAPE: [usize; 2] = [1024, 4096];
const BYTES: u64 = 1024 * 4096 * 4;

fn reserved(device: &Device) -> u64 {
    device.sync().expect("the device runs");
    device
        .memory_pool_usage()
        .expect("wgpu reports its pool")
        .bytes_reserved
}

// One test, so that the two measurements do not run beside each other.
#[test]
fn the_relu_and_backward_from_the_seed_reserve_nothing_more() {
    let device = BackendKind::Wgpu.device();
    let train = device.clone().autodiff();
    let x = Tensor::<2>::random(SHAPE, Distribution::Normal(0.0, 1.0), &train).require_grad();
    let upstream = Tensor::<2>::random(SHAPE, Distribution::Normal(0.0, 1.0), &device);
    let expected = upstream
        .clone()
        .mask_fill(x.clone().inner().lower_equal_elem(0.0), 0.0);
    // In a model the ReLU's input (a linear layer's output) is its alone, as this product
    // is; the ReLU writes over it. Where it ran at the recomputed segment's peak, burn's
    // mask cost the MLP 4x1024 a page of the checkpointing run's reservation.
    let alone = x.clone().mul_scalar(1.0);
    // Free pages would hide a new tensor: only the pages of live tensors stay.
    device.memory_cleanup();
    let before = reserved(&device);
    let output = relu_over_input(alone);
    let after = reserved(&device);
    assert!(
        after < before + BYTES,
        "the ReLU reserved {} bytes beyond the {before} its input held",
        after - before
    );

    device.memory_cleanup();
    let before = reserved(&device);

    let grads = vjp_seed(output, upstream.autodiff()).backward();
    let gradient = x.grad(&grads).expect("x is a leaf");
    let after = reserved(&device);

    gradient.into_data().assert_eq(&expected.into_data(), true);
    // The small-allocation pool's 8 MiB page comes back (the cleanup released it); a
    // tensor of the activation's size would take a page of 17 MiB.
    assert!(
        after < before + BYTES,
        "backward reserved {} bytes beyond the {before} its inputs held",
        after - before
    );
}
