//! Backward through the ReLU and from the recomputation's vector-Jacobian seed, measured
//! on wgpu (lavapipe here): neither builds a tensor of the activation's size, where burn's
//! `relu_backward` builds a 32-bit mask and `sum(output * upstream)` a product and a copy
//! of `upstream`. Alone in its binary: tests beside it on the same device would add their
//! tensors to the pool's figures.
#![cfg(not(target_arch = "wasm32"))]

use burn::prelude::*;
use burn::tensor::Distribution;
use headroom::ops::relu::relu;
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

#[test]
fn backward_through_the_relu_from_the_seed_reserves_nothing_more() {
    let device = BackendKind::Wgpu.device();
    let train = device.clone().autodiff();
    let x = Tensor::<2>::random(SHAPE, Distribution::Normal(0.0, 1.0), &train).require_grad();
    let upstream = Tensor::<2>::random(SHAPE, Distribution::Normal(0.0, 1.0), &device);
    let expected = upstream
        .clone()
        .mask_fill(x.clone().inner().lower_equal_elem(0.0), 0.0);
    let output = relu(x.clone());
    // Free pages would hide a new tensor: only the pages of live tensors stay.
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
