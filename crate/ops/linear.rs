//! burn's linear layer, with its weight gradient in cubecl's persistent pool.
//!
//! A weight gradient lives from its layer's backward to the optimizer's update, across the
//! rest of backward, where activations of the batch's size come and go. In cubecl's arena
//! (pages sized to the largest allocation, here an activation) each one sat on a page of
//! its own and left it too full for an activation, so the next activation took a new page:
//! on the MLP 4x1024 at batch 4096, checkpointing's seventh page of 17 MiB. The persistent
//! pool holds exact-size slices, reused by the next step's gradient of the same size, and
//! leaves the arena to the activations (docs/benchmarks.md, "the weight gradients in the
//! persistent pool").
//!
//! A burn backend extension, like [`crate::ops::relu`]: the autodiff backend's linear is
//! burn's, but for where its weight gradient is made. Only the cubecl backends have a
//! persistent pool. Under fusion the gradient is made where burn makes it: arming the
//! persistent mode there drains fusion's queue first, a sync in every layer's backward.

// burn marks ndarray deprecated in favour of flex; natively it is an opt-in CPU backend.
#![allow(deprecated)]

#[cfg(all(not(target_arch = "wasm32"), feature = "ndarray"))]
use burn::backend::NdArray;
use burn::backend::autodiff::NodeId;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::ops::ModuleOps;
use burn::backend::tensor::FloatTensor;
use burn::backend::{Autodiff, Backend, Dispatch, Flex, TensorMetadata};
use burn::nn::Linear;
use burn::prelude::*;
use burn_cubecl::CubeBackend;

use super::matmul::{MatmulRoutine, gpu_routine, linear};

headroom_backend_extension! {
pub trait LinearGradientKept: Backend {
    /// `x @ weight + bias`, burn's linear.
    #[fusion(default)]
    fn linear_gradient_kept(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        Self::linear(x, weight, Some(bias))
    }

    /// The weight's gradient, `x^T @ grad` over the rows: burn's, in the memory the
    /// backend keeps for what lives until the update.
    #[fusion(default)]
    fn linear_weight_gradient(x: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::linear_weight_backward(x, grad)
    }
}
}

impl LinearGradientKept for CubeBackend {
    fn linear_weight_gradient(x: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> {
        let device = x.device();
        Self::memory_persistent_allocations(&device, (x, grad), |(x, grad)| {
            Self::linear_weight_backward(x, grad)
        })
    }
}
impl LinearGradientKept for Flex {}
#[cfg(all(not(target_arch = "wasm32"), feature = "ndarray"))]
impl LinearGradientKept for NdArray {}

impl<B: LinearGradientKept, C: CheckpointStrategy> LinearGradientKept for Autodiff<B, C> {
    fn linear_gradient_kept(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct LinearBackward;

        impl<B: LinearGradientKept> Backward<B, 3> for LinearBackward {
            /// The input (kept for the weight's gradient) and the weight (for the input's),
            /// as burn's linear keeps them.
            type State = (Option<NodeId>, Option<NodeId>);

            fn backward(
                self,
                ops: Ops<Self::State, 3>,
                grads: &mut Gradients,
                checkpointer: &mut Checkpointer,
            ) {
                let [x_node, weight_node, bias_node] = ops.parents;
                let grad = grads.consume::<B>(&ops.node);
                let (x, weight) = ops.state;
                let x = x.map(|id| checkpointer.retrieve_node_output::<FloatTensor<B>>(id));
                let weight = weight.map(|id| checkpointer.retrieve_node_output::<FloatTensor<B>>(id));
                // burn's order: the input's gradient, the weight's, the bias's.
                if let (Some(node), Some(weight)) = (x_node, weight) {
                    grads.register::<B>(node.id, B::linear_x_backward(weight, grad.clone()));
                }
                if let (Some(node), Some(x)) = (weight_node, x) {
                    grads.register::<B>(node.id, B::linear_weight_gradient(x, grad.clone()));
                }
                if let Some(node) = bias_node {
                    grads.register::<B>(node.id, B::linear_bias_backward(grad));
                }
            }
        }

        let (x_tracked, weight_tracked) = (x.is_tracked(), weight.is_tracked());
        // As burn's linear: compute-bound, the input kept only for the weight's gradient and
        // the weight only for the input's.
        match LinearBackward
            .prepare::<C>([x.node(), weight.node(), bias.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let x_state = weight_tracked.then(|| prep.checkpoint(&x));
                let weight_state = x_tracked.then(|| prep.checkpoint(&weight));
                let output = B::linear(
                    x.into_primitive(),
                    weight.into_primitive(),
                    Some(bias.into_primitive()),
                );
                prep.finish((x_state, weight_state), output)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::linear(
                x.into_primitive(),
                weight.into_primitive(),
                Some(bias.into_primitive()),
            )),
        }
    }
}

/// [`crate::ops::matmul::linear`] (burn's `Linear::forward` on the GPU's matmul routine),
/// with the weight gradient in the persistent pool where the routine is burn's and the
/// layer has a bias. The MLP's. The CNN's head keeps burn's: its gradient is 125 KB at
/// most, and with it in the persistent pool the CNN 32,64 at batch 256 reserved a page
/// of 27 MB more than before in 2 of 4 runs on lavapipe (139.6 against 113.6 MiB).
pub fn linear_keeping_gradient(layer: &Linear, x: Tensor<2>) -> Tensor<2> {
    match &layer.bias {
        Some(bias) if gpu_routine() == MatmulRoutine::Burn => {
            linear_gradient_kept(x, layer.weight.val(), bias.val())
        }
        _ => linear(layer, x),
    }
}

/// `x @ weight + bias` for `x` of [rows, in], its weight gradient in the persistent pool
/// (see the module's docs).
pub fn linear_gradient_kept(x: Tensor<2>, weight: Tensor<2>, bias: Tensor<1>) -> Tensor<2> {
    Tensor::from_dispatch(<Dispatch as LinearGradientKept>::linear_gradient_kept(
        x.into_dispatch(),
        weight.into_dispatch(),
        bias.into_dispatch(),
    ))
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Distribution, Tolerance};
    // In the browser (wasm-pack test, tests/run-all) these run as wasm-bindgen tests.
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    /// burn's linear's value and all three gradients, through a product so the gradient is
    /// not all ones, on a shape no tile divides.
    fn equals_burns_linear_on(device: Device) {
        let normal = |shape: [usize; 2]| Tensor::<2>::random(shape, Distribution::Normal(0.0, 1.0), &device);
        let (x, weight, weights) = (normal([37, 29]), normal([29, 11]), normal([37, 11]));
        let bias = normal([1, 11]).reshape([11]);
        let run = |forward: fn(Tensor<2>, Tensor<2>, Tensor<1>) -> Tensor<2>| {
            let (x, weight, bias) = (
                x.clone().detach().require_grad(),
                weight.clone().detach().require_grad(),
                bias.clone().detach().require_grad(),
            );
            let output = forward(x.clone(), weight.clone(), bias.clone());
            let grads = (output.clone() * weights.clone()).sum().backward();
            let grad = |t: &Tensor<2>| t.grad(&grads).unwrap().into_data();
            let bias_grad = bias.grad(&grads).unwrap().into_data();
            [output.inner().into_data(), grad(&x), grad(&weight), bias_grad]
        };
        let burns = run(|x, weight, bias| burn::tensor::module::linear(x, weight, Some(bias)));
        for (ours, burns) in run(linear_gradient_kept).iter().zip(&burns) {
            ours.assert_approx_eq::<f32>(burns, Tolerance::rel_abs(1e-5, 1e-5));
        }
    }

    // The wgpu device is made asynchronously in the browser (tests/wasm_train.rs).
    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn equals_burns_linear_on_wgpu() {
        equals_burns_linear_on(crate::ops::backend::BackendKind::Wgpu.device().autodiff());
    }

    #[test]
    fn equals_burns_linear_on_flex() {
        equals_burns_linear_on(Device::flex().autodiff());
    }
}
