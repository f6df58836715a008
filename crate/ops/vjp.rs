//! The seed of a vector-Jacobian product, for backward through a recomputed segment.
//!
//! Backward from `sum(output * upstream)` reaches `output` with `upstream` as its
//! gradient, but on the way it builds the product in the forward pass and, in backward,
//! multiplies `upstream` by the sum's broadcast gradient: one more tensor of the output's
//! size beside `upstream` while the segment's activations are all alive, which is where
//! checkpointing peaks. Backward from [`vjp_seed`] hands `upstream` itself to `output` as
//! its gradient, so nothing of that size is built.
//!
//! A burn backend extension, like [`crate::ops::relu`]: only the autodiff backend's
//! version does anything beyond its value.

// burn marks ndarray deprecated in favour of flex; natively it is an opt-in CPU backend.
#![allow(deprecated)]

#[cfg(all(not(target_arch = "wasm32"), feature = "ndarray"))]
use burn::backend::NdArray;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind, unary};
use burn::backend::tensor::FloatTensor;
use burn::backend::{Autodiff, Backend, Dispatch, Flex, TensorMetadata};
use burn::prelude::*;
use burn_cubecl::CubeBackend;

headroom_backend_extension! {
pub trait VjpSeed: Backend {
    /// A one-element zero whose gradient with respect to `output` is `upstream`. Only its
    /// gradient means anything, and only as the root backward starts from.
    #[fusion(default)]
    fn vjp_seed(output: FloatTensor<Self>, upstream: FloatTensor<Self>) -> FloatTensor<Self> {
        drop(upstream);
        one_zero::<Self>(&output)
    }
}
}

/// A one-element zero on `like`'s device, in its precision.
fn one_zero<B: Backend>(like: &FloatTensor<B>) -> FloatTensor<B> {
    B::float_zeros([1].into(), &like.device(), like.dtype().into())
}

impl VjpSeed for CubeBackend {}
impl VjpSeed for Flex {}
#[cfg(all(not(target_arch = "wasm32"), feature = "ndarray"))]
impl VjpSeed for NdArray {}

impl<B: Backend, C: CheckpointStrategy> VjpSeed for Autodiff<B, C> {
    fn vjp_seed(output: FloatTensor<Self>, upstream: FloatTensor<Self>) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct Seed;

        impl<B: Backend> Backward<B, 1> for Seed {
            type State = FloatTensor<B>;

            fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
                // The root's own gradient is 1: `output`'s is `upstream`, moved, not copied.
                let upstream = ops.state;
                unary::<B, _>(ops.parents, ops.node, grads, |_one| upstream);
            }
        }

        let node = output.node();
        let zero = one_zero::<B>(&output.into_primitive());
        match Seed.prepare::<C>([node]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish(upstream.into_primitive(), zero),
            OpsKind::UnTracked(prep) => prep.finish(zero),
        }
    }
}

/// A root for backward that gives `output` the gradient `upstream` (see the module's docs).
pub fn vjp_seed<const D: usize>(output: Tensor<D>, upstream: Tensor<D>) -> Tensor<1> {
    Tensor::from_dispatch(<Dispatch as VjpSeed>::vjp_seed(
        output.into_dispatch(),
        upstream.into_dispatch(),
    ))
}

#[cfg(test)]
mod tests {
    use burn::tensor::Distribution;
    // In the browser (wasm-pack test, tests/run-all) these run as wasm-bindgen tests.
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    /// The same gradient as backward from `sum(output * upstream)`, through a layer so the
    /// gradient reaches a leaf below the seeded tensor.
    #[test]
    fn gives_the_gradient_of_the_dot_product_with_upstream() {
        let device = Device::flex().autodiff();
        let x = Tensor::<2>::random([16, 8], Distribution::Normal(0.0, 1.0), &device);
        let weights = Tensor::<2>::random([8, 12], Distribution::Normal(0.0, 1.0), &device);
        let upstream = Tensor::<2>::random([16, 12], Distribution::Normal(0.0, 1.0), &device);
        let gradient = |seed: fn(Tensor<2>, Tensor<2>) -> Tensor<1>| {
            let leaf = x.clone().detach().require_grad();
            let output = leaf.clone().matmul(weights.clone()).tanh();
            let grads = seed(output, upstream.clone().detach()).backward();
            leaf.grad(&grads).unwrap().into_data()
        };
        let ours = gradient(vjp_seed);
        let product = gradient(|output, upstream| (output * upstream).sum());
        ours.assert_approx_eq::<f32>(&product, burn::tensor::Tolerance::rel_abs(1e-6, 1e-6));
    }
}
