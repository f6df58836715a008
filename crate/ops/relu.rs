//! A ReLU whose backward keeps its output instead of its input.
//!
//! burn's ReLU keeps its input for backward, and the op after it (a matmul, a max-pool)
//! keeps its output: two activations of the same size alive per layer. The mask backward
//! needs, `x > 0`, is the same read from the output (`relu(x) > 0`), and the output is kept
//! anyway, so this op keeps only that and its input is freed as soon as the forward pass
//! moves on. On the MLP that is half the saved activations.
//!
//! A burn backend extension: the autodiff backend's version differs in what it saves and
//! how its backward masks. Two forwards: burn's `relu` ([`relu`]), and on the cubecl
//! backends a clamp that writes over its input ([`relu_over_input`]) where burn's `relu`
//! builds a mask beside it (see their impl).

// burn marks ndarray deprecated in favour of flex; natively it is an opt-in CPU backend.
#![allow(deprecated)]

#[cfg(all(not(target_arch = "wasm32"), feature = "ndarray"))]
use burn::backend::NdArray;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind, unary};
use burn::backend::ops::{ActivationOps, FloatTensorOps};
use burn::backend::tensor::FloatTensor;
use burn::backend::{Autodiff, Backend, Dispatch, Flex};
use burn::prelude::*;
use burn_cubecl::CubeBackend;

headroom_backend_extension! {
pub trait ReluKeepingOutput: Backend {
    /// `max(x, 0)`.
    #[fusion(default)]
    fn relu_keeping_output(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::relu(tensor)
    }

    /// `max(x, 0)`, written over `tensor` where the backend can and nothing else holds it.
    #[fusion(default)]
    fn relu_over_input_keeping_output(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::relu(tensor)
    }

    /// The gradient through the ReLU, from its output: the upstream gradient times
    /// sign(output), 1 where the ReLU passed its input, 0 where it cut. burn's
    /// `relu_backward` builds a bool mask for this, 32 bits an element on wgpu whatever the
    /// precision (twice an f16 activation); here the output, which nothing else holds by
    /// then, becomes the factor in place and the product is written over the gradient, so
    /// backward allocates nothing for the ReLU.
    #[fusion(default)]
    fn relu_backward_from_output(output: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::float_mul(grad, Self::float_sign(output))
    }
}
}

/// burn's `relu` on the cubecl backends builds a bool mask of `x <= 0` (32 bits an element
/// on wgpu, twice an f16 activation) beside the activation, then fills through it: for a
/// moment, one more tensor of the layer's size than the ReLU needs, and in a recomputed
/// segment that moment is where checkpointing peaks. A clamp to [0, inf) is one
/// elementwise kernel that writes over its input when nothing else holds it.
impl ReluKeepingOutput for CubeBackend {
    fn relu_over_input_keeping_output(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::float_clamp(tensor, 0.0.into(), f32::INFINITY.into())
    }
}

/// flex's `relu_backward` is one fused pass with no mask, where its `sign` is a scalar
/// loop followed by a second pass for the product, a visible part of a CNN step under perf
/// (docs/benchmarks.md, "the run with mimalloc (not shipped)").
impl ReluKeepingOutput for Flex {
    fn relu_backward_from_output(output: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::relu_backward(output, grad)
    }
}
#[cfg(all(not(target_arch = "wasm32"), feature = "ndarray"))]
impl ReluKeepingOutput for NdArray {}

impl<B: ReluKeepingOutput, C: CheckpointStrategy> ReluKeepingOutput for Autodiff<B, C> {
    fn relu_keeping_output(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        keeping_output::<B, C>(tensor, B::relu_keeping_output)
    }

    fn relu_over_input_keeping_output(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        keeping_output::<B, C>(tensor, B::relu_over_input_keeping_output)
    }
}

/// The autodiff op around the inner backend's `forward`: it saves the output, and backward
/// masks by it.
fn keeping_output<B: ReluKeepingOutput, C: CheckpointStrategy>(
    tensor: FloatTensor<Autodiff<B, C>>,
    forward: fn(FloatTensor<B>) -> FloatTensor<B>,
) -> FloatTensor<Autodiff<B, C>> {
    #[derive(Debug)]
    struct ReluFromOutput;

    impl<B: ReluKeepingOutput> Backward<B, 1> for ReluFromOutput {
        type State = FloatTensor<B>;

        fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
            let output = ops.state;
            unary::<B, _>(ops.parents, ops.node, grads, |grad| {
                B::relu_backward_from_output(output, grad)
            });
        }
    }

    // Compute-bound for burn's checkpointing strategies: the output is kept as this op's
    // state, so there is nothing to recompute.
    match ReluFromOutput
        .prepare::<C>([tensor.node()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let output = forward(tensor.into_primitive());
            prep.finish(output.clone(), output)
        }
        OpsKind::UnTracked(prep) => prep.finish(forward(tensor.into_primitive())),
    }
}

/// `max(x, 0)`, keeping only its output for backward (see the module's docs), computed
/// with burn's `relu`. The CNN's: there the clamp of [`relu_over_input`] saved at most a
/// 2 MiB page (CNN 32,64 with checkpointing 87.5 -> 87.4 MiB on lavapipe), and which
/// page depends on the timing of cubecl's asynchronous reservation: with it the
/// calibration probe of the CNN 16,32 in f16 read a page more than its run held, in 1 to
/// 5 of 12 runs (docs/benchmarks.md, "the ReLU writes over its input").
pub fn relu<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    Tensor::from_dispatch(<Dispatch as ReluKeepingOutput>::relu_keeping_output(
        x.into_dispatch(),
    ))
}

/// [`relu`] written over its input on the cubecl backends, where nothing else holds the
/// input (a linear layer's output never is held): no mask of the activation's size beside
/// it. The MLP's: in a recomputed segment that mask set checkpointing's peak (MLP 4x1024
/// at batch 4096 on lavapipe: 160.2 -> 143.2 MiB reserved, 0.90x -> 0.81x of f32's).
pub fn relu_over_input<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    Tensor::from_dispatch(<Dispatch as ReluKeepingOutput>::relu_over_input_keeping_output(
        x.into_dispatch(),
    ))
}

#[cfg(test)]
mod tests {
    use burn::tensor::Distribution;
    use burn::tensor::activation;
    // In the browser (wasm-pack test, tests/run-all) these run as wasm-bindgen tests.
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    /// The same values and the same gradient as burn's ReLU, zeros (whose gradient burn
    /// takes as 0) included, through a product so the gradient is not all ones. On wgpu the
    /// trait's own backward runs (the sign product).
    // The wgpu device is made asynchronously in the browser (tests/wasm_train.rs).
    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn equals_burns_relu_forward_and_backward() {
        equals_burns_relu_on(crate::ops::backend::BackendKind::Wgpu.device().autodiff());
    }

    #[cfg(feature = "ndarray")]
    #[test]
    fn equals_burns_relu_forward_and_backward_on_ndarray() {
        equals_burns_relu_on(Device::ndarray().autodiff());
    }

    /// flex takes its own backward (its fused `relu_backward`), not the sign product.
    #[test]
    fn equals_burns_relu_forward_and_backward_on_flex() {
        equals_burns_relu_on(Device::flex().autodiff());
    }

    fn equals_burns_relu_on(device: Device) {
        let x = Tensor::<2>::random([64, 48], Distribution::Normal(0.0, 1.0), &device);
        let x = x.clone().mask_fill(x.abs().lower_elem(0.05), 0.0);
        let weights = Tensor::<2>::random([64, 48], Distribution::Normal(0.0, 1.0), &device);
        let run = |activation: fn(Tensor<2>) -> Tensor<2>| {
            let leaf = x.clone().detach().require_grad();
            let output = activation(leaf.clone());
            let grads = (output.clone() * weights.clone()).sum().backward();
            (output.inner().into_data(), leaf.grad(&grads).unwrap().into_data())
        };
        let (burns, burns_grad) = run(activation::relu);
        for ours in [relu, relu_over_input] {
            let (ours, our_grad) = run(ours);
            ours.assert_eq(&burns, true);
            our_grad.assert_eq(&burns_grad, true);
        }
    }
}
