//! The MLP's ReLU forward and backward, and backward from the recomputation's
//! vector-Jacobian seed, measured on wgpu (lavapipe here): none builds a tensor of the
//! activation's size, where burn's `relu` and `relu_backward` build a 32-bit mask and
//! `sum(output * upstream)` a product and a copy of `upstream`. And a linear layer's weight
//! gradient, which takes no page of the activations' arena. Alone in its binary: tests
//! beside it on the same device would add their tensors to the pool's figures.
#![cfg(not(target_arch = "wasm32"))]

use burn::prelude::*;
use burn::tensor::Distribution;
use headroom::ops::linear::linear_gradient_kept;
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

// One test, so that the measurements do not run beside each other.
#[test]
fn the_relu_backward_from_the_seed_and_a_weight_gradient_reserve_nothing_more() {
    let device = BackendKind::Wgpu.device();
    relu_and_seed(&device);
    weight_gradient(&device);
}

fn relu_and_seed(device: &Device) {
    let train = device.clone().autodiff();
    let x = Tensor::<2>::random(SHAPE, Distribution::Normal(0.0, 1.0), &train).require_grad();
    let upstream = Tensor::<2>::random(SHAPE, Distribution::Normal(0.0, 1.0), device);
    let expected = upstream
        .clone()
        .mask_fill(x.clone().inner().lower_equal_elem(0.0), 0.0);
    // In a model the ReLU's input (a linear layer's output) is its alone, as this product
    // is; the ReLU writes over it. Where it ran at the recomputed segment's peak, burn's
    // mask cost the MLP 4x1024 a page of the checkpointing run's reservation.
    let alone = x.clone().mul_scalar(1.0);
    // Free pages would hide a new tensor: only the pages of live tensors stay.
    device.memory_cleanup();
    let before = reserved(device);
    let output = relu_over_input(alone);
    let after = reserved(device);
    assert!(
        after < before + BYTES,
        "the ReLU reserved {} bytes beyond the {before} its input held",
        after - before
    );

    device.memory_cleanup();
    let before = reserved(device);

    let grads = vjp_seed(output, upstream.autodiff()).backward();
    let gradient = x.grad(&grads).expect("x is a leaf");
    let after = reserved(device);

    gradient.into_data().assert_eq(&expected.into_data(), true);
    // The small-allocation pool's 8 MiB page comes back (the cleanup released it); a
    // tensor of the activation's size would take a page of 17 MiB.
    assert!(
        after < before + BYTES,
        "backward reserved {} bytes beyond the {before} its inputs held",
        after - before
    );
}

/// A linear layer's weight gradient, made while the arena's pages each hold an activation
/// (16 MiB on a 17 MiB page) and the weight is a parameter (in the persistent pool, as
/// burn makes parameters): in the persistent pool it reserves its own bytes, where burn's
/// linear put it on a new page of the arena. On the MLP 4x1024 such a gradient took
/// checkpointing's seventh page (docs/benchmarks.md).
fn weight_gradient(device: &Device) {
    const ROWS: usize = 4096;
    const WIDTH: usize = 1024;
    let normal = |shape: [usize; 2]| Tensor::<2>::random(shape, Distribution::Normal(0.0, 1.0), device);
    let weight = device.memory_persistent_allocations((), |_| normal([WIDTH, WIDTH]));
    let (x, upstream) = (normal([ROWS, WIDTH]), normal([ROWS, WIDTH]));
    // On the host: a device copy would leave room on its page for the gradient.
    let expected = x.clone().transpose().matmul(upstream.clone()).into_data();
    type Linear = fn(Tensor<2>, Tensor<2>, Tensor<1>) -> Tensor<2>;
    let backward_reserves = |linear: Linear| {
        let train = device.clone().autodiff();
        let weight = weight.clone().autodiff().require_grad();
        let bias = Tensor::<1>::zeros([WIDTH], &train).require_grad();
        // The input needs no gradient: only the weight's (and the bias's) is made.
        let root = vjp_seed(
            linear(x.clone().autodiff(), weight.clone(), bias),
            upstream.clone().autodiff(),
        );
        let _fillers = fill_the_arena(device);
        let before = reserved(device);
        let grads = root.backward();
        let gradient = weight.grad(&grads).expect("the weight is a leaf");
        let after = reserved(device);
        let tolerance = burn::tensor::Tolerance::rel_abs(1e-3, 1e-3);
        gradient.into_data().assert_approx_eq::<f32>(&expected, tolerance);
        after - before
    };
    let gradient_bytes = (WIDTH * WIDTH * 4) as u64;
    let ours = backward_reserves(linear_gradient_kept);
    // The gradient's bytes; a page of the arena is 17 MiB.
    assert!(
        ours < gradient_bytes + BYTES / 16,
        "the weight gradient reserved {ours} bytes"
    );
    // The measurement sees the page it guards against.
    let burns = backward_reserves(|x, weight, bias| burn::tensor::module::linear(x, weight, Some(bias)));
    assert!(
        burns >= BYTES,
        "burn's linear's weight gradient reserved {burns} bytes, expected a page"
    );
}

/// Tensors of 1 MiB that fill the arena's free space, so that the next allocation of more
/// than that there takes a new page: they are made until a page is added and filled, and
/// the one that began the page after it is let go with that page.
fn fill_the_arena(device: &Device) -> Vec<Tensor<1>> {
    const MIB_OF_F32: usize = 256 * 1024;
    device.memory_cleanup();
    let (mut fillers, mut pages_added, mut last) = (Vec::new(), 0, reserved(device));
    while pages_added < 2 {
        fillers.push(Tensor::<1>::zeros([MIB_OF_F32], device));
        let now = reserved(device);
        pages_added += usize::from(now > last);
        last = now;
    }
    fillers.pop();
    device.memory_cleanup();
    fillers
}
