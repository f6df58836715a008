//! The conv3x3 (stride 1, same padding) on flex, computed from each image's nine shifted
//! windows: its forward (from two input channels on), its input gradient and its weight
//! gradient.
//!
//! The windows: per image, row (in, ky, kx) is the input shifted by (ky - 1, kx - 1), the
//! padding as zeros, images split over threads natively (`platform::for_each_chunk_mut`).
//! Then everything is one batched matmul over the images:
//! - forward: the kernel [out, (in, ky, kx)] times the windows, plus the bias: faster than
//!   flex's conv2d from two input channels on. With one input channel flex's conv (it has
//!   a path for few channels) was as fast, so it stays.
//! - weight gradient: each image's output gradient times its windows' transpose, summed
//!   over the images. burn's is another conv, the input with batch and channels swapped
//!   convolved with the output gradient as its kernel: its batch is then the input's
//!   channels, which flex splits over its threads (a first layer on one-channel images is
//!   one long task). This was faster than burn's on every shape measured. (One matmul over
//!   the whole batch was slower from four channels on, its transposed operand long and its
//!   small dimensions unsplit.)
//! - input gradient: the kernel's transpose times each image's output gradient (the
//!   windows' gradient), each window row added back where it was read, in place of flex's
//!   `conv_transpose2d`. Measured only in training (8 to 16 at 14x14 is the one layer that
//!   needs it in the comparison's CNN), where it sped the CNN up.
//!
//! The figures: docs/benchmarks.md, "the CNN's conv and pool on flex, op by op".
//!
//! The bias gradient is burn's, and so is what is kept for backward (the input, the weight,
//! the bias; the windows are freed as soon as they are multiplied), so the planner's census
//! does not move.
//!
//! A burn backend extension, like [`crate::ops::relu`]; only flex is routed here
//! (crate/model/conv.rs).

// burn marks ndarray deprecated in favour of flex; natively it is an opt-in CPU backend.
#![allow(deprecated)]

#[cfg(all(not(target_arch = "wasm32"), feature = "ndarray"))]
use burn::backend::NdArray;
use burn::backend::autodiff::NodeId;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn::backend::ops::{FloatTensorOps, ModuleOps};
use burn::backend::tensor::FloatTensor;
use burn::backend::{Autodiff, Backend, DType, Dispatch, Flex, TensorMetadata};
use burn::prelude::*;
use burn::tensor::TensorData;
use burn::tensor::ops::ConvOptions;
use burn_cubecl::CubeBackend;
use std::ops::Range;

/// A 3x3 window, stride 1, padded by 1: the output keeps the input's height and width.
pub fn same_padding() -> ConvOptions<2> {
    ConvOptions::new([1, 1], [1, 1], [1, 1], 1)
}

headroom_backend_extension! {
pub trait Conv3x3Same: Backend {
    /// conv3x3 with stride 1 and same padding, bias added: burn's conv2d.
    #[fusion(default)]
    fn conv3x3_same(x: FloatTensor<Self>, weight: FloatTensor<Self>, bias: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::conv2d(x, weight, Some(bias), same_padding())
    }

    /// The input's gradient of [`Conv3x3Same::conv3x3_same`]: burn's.
    #[fusion(default)]
    fn conv3x3_same_input_grad(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        Self::conv2d_x_backward(x, weight, output_grad, same_padding())
    }

    /// The weight's gradient of [`Conv3x3Same::conv3x3_same`]: burn's.
    #[fusion(default)]
    fn conv3x3_same_weight_grad(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        Self::conv2d_weight_backward(x, weight, output_grad, same_padding())
    }
}
}

impl Conv3x3Same for CubeBackend {}
#[cfg(all(not(target_arch = "wasm32"), feature = "ndarray"))]
impl Conv3x3Same for NdArray {}

impl Conv3x3Same for Flex {
    fn conv3x3_same(x: FlexTensor, weight: FlexTensor, bias: FlexTensor) -> FlexTensor {
        let [_, in_channels, ..] = x.shape().dims::<4>();
        // With one input channel flex's own conv (a path for few channels) was as fast.
        if in_channels < 2 || !all_f32([&x, &weight, &bias]) {
            return Self::conv2d(x, weight, Some(bias), same_padding());
        }
        windows_forward(&x, weight, bias)
    }

    fn conv3x3_same_input_grad(x: FlexTensor, weight: FlexTensor, output_grad: FlexTensor) -> FlexTensor {
        if !all_f32([&x, &weight, &output_grad]) {
            return Self::conv2d_x_backward(x, weight, output_grad, same_padding());
        }
        windows_input_grad(weight, output_grad)
    }

    fn conv3x3_same_weight_grad(x: FlexTensor, weight: FlexTensor, output_grad: FlexTensor) -> FlexTensor {
        if !all_f32([&x, &weight, &output_grad]) {
            return Self::conv2d_weight_backward(x, weight, output_grad, same_padding());
        }
        windows_weight_grad(&x, output_grad)
    }
}

/// The windows are written for f32 only; other precisions take flex's own ops.
fn all_f32(tensors: [&FlexTensor; 3]) -> bool {
    tensors.iter().all(|tensor| tensor.dtype() == DType::F32)
}

/// The output as the kernel times each image's windows, plus the bias (module docs).
fn windows_forward(x: &FlexTensor, weight: FlexTensor, bias: FlexTensor) -> FlexTensor {
    let [batch, in_channels, height, width] = x.shape().dims::<4>();
    let out_channels = weight.shape().dims::<4>()[0];
    let (rows, pixels) = (in_channels * 9, height * width);
    let windows = FlexTensor::from_data(TensorData::new(
        window_rows(&x.to_contiguous(), height, width),
        [batch, rows, pixels],
    ));
    // [out, in, 3, 3] is already [out, (in, ky, kx)], the windows' row order.
    let kernel = Flex::float_reshape(weight, [1, out_channels, rows].into());
    let output = Flex::float_matmul(kernel, windows);
    let output = Flex::float_add(output, Flex::float_reshape(bias, [1, out_channels, 1].into()));
    Flex::float_reshape(output, [batch, out_channels, height, width].into())
}

/// The input gradient: each image's windows' gradient (the kernel's transpose times its
/// output gradient, one batched matmul), each window row added back where it was read.
fn windows_input_grad(weight: FlexTensor, output_grad: FlexTensor) -> FlexTensor {
    let [batch, out_channels, height, width] = output_grad.shape().dims::<4>();
    let in_channels = weight.shape().dims::<4>()[1];
    let (rows, pixels) = (in_channels * 9, height * width);
    let kernel = Flex::float_reshape(weight, [out_channels, rows].into());
    let kernel = Flex::float_reshape(Flex::float_transpose(kernel), [1, rows, out_channels].into());
    let output_grad = Flex::float_reshape(output_grad, [batch, out_channels, pixels].into());
    let window_grads = Flex::float_matmul(kernel, output_grad).to_contiguous();
    let input_grad = add_window_rows(&window_grads, in_channels, height, width);
    FlexTensor::from_data(TensorData::new(input_grad, [batch, in_channels, height, width]))
}

/// The input row that window row `y` of offset `ky` reads (y + ky - 1), or none where that
/// is padding.
fn window_source_row(y: usize, ky: usize, height: usize) -> Option<usize> {
    (y + ky).checked_sub(1).filter(|&row| row < height)
}

/// The columns of a window of offset `kx` that hold input, and the input columns they hold
/// (x + kx - 1); the one column left over is padding.
fn window_columns(kx: usize, width: usize) -> (Range<usize>, Range<usize>) {
    match kx {
        0 => (1..width, 0..width - 1),
        1 => (0..width, 0..width),
        _ => (0..width - 1, 1..width),
    }
}

/// The reverse of [`window_rows`]: per image, row (in, ky, kx)'s value at column (y, x) is
/// added to the input at (y + ky - 1, x + kx - 1) where that is inside it. `window_grads`
/// is contiguous [batch, (in, ky, kx), (y, x)] f32.
fn add_window_rows(window_grads: &FlexTensor, in_channels: usize, height: usize, width: usize) -> Vec<f32> {
    let values: &[f32] = window_grads.storage();
    let pixels = height * width;
    let image_len = in_channels * pixels;
    let mut input_grad = vec![0.0; values.len() / 9];
    let add = |image, out: &mut [f32]| {
        let image_rows = &values[image * 9 * image_len..][..9 * image_len];
        for (row, grad) in image_rows.chunks_exact(pixels).enumerate() {
            let (channel, ky, kx) = (row / 9, row % 9 / 3, row % 3);
            let plane = &mut out[channel * pixels..][..pixels];
            let (window_columns, input_columns) = window_columns(kx, width);
            for y in 0..height {
                let Some(input_y) = window_source_row(y, ky, height) else {
                    continue;
                };
                let window = &grad[y * width..][window_columns.clone()];
                let input = &mut plane[input_y * width..][input_columns.clone()];
                for (input, window) in input.iter_mut().zip(window) {
                    *input += window;
                }
            }
        }
    };
    crate::platform::for_each_chunk_mut(&mut input_grad, image_len, add);
    input_grad
}

/// The weight gradient as each image's output gradient times its windows, summed over
/// the images (module docs).
fn windows_weight_grad(x: &FlexTensor, output_grad: FlexTensor) -> FlexTensor {
    let [batch, in_channels, height, width] = x.shape().dims::<4>();
    let out_channels = output_grad.shape().dims::<4>()[1];
    let (rows, pixels) = (in_channels * 9, height * width);
    let windows = FlexTensor::from_data(TensorData::new(
        window_rows(&x.to_contiguous(), height, width),
        [batch, rows, pixels],
    ));
    let output_grad = Flex::float_reshape(output_grad, [batch, out_channels, pixels].into());
    let per_image = Flex::float_matmul(output_grad, Flex::float_swap_dims(windows, 1, 2));
    let grad = Flex::float_sum_dim(per_image, 0);
    Flex::float_reshape(grad, [out_channels, in_channels, 3, 3].into())
}

/// Per image, row (in, ky, kx), column (y, x): the input at (y + ky - 1, x + kx - 1), zero
/// outside it. `x` is contiguous [batch, in, height, width] f32.
fn window_rows(x: &FlexTensor, height: usize, width: usize) -> Vec<f32> {
    let values: &[f32] = x.storage();
    let [batch, in_channels, ..] = x.shape().dims::<4>();
    let pixels = height * width;
    let image_len = in_channels * 9 * pixels;
    let mut windows = vec![0.0; batch * image_len];
    let fill = |image, out: &mut [f32]| {
        for (row, out) in out.chunks_exact_mut(pixels).enumerate() {
            let (channel, ky, kx) = (row / 9, row % 9 / 3, row % 3);
            let plane = &values[(image * in_channels + channel) * pixels..][..pixels];
            let (window_columns, input_columns) = window_columns(kx, width);
            for y in 0..height {
                // Out of the image the window stays zero (padding).
                let Some(input_y) = window_source_row(y, ky, height) else {
                    continue;
                };
                let input = &plane[input_y * width..][input_columns.clone()];
                out[y * width..][window_columns.clone()].copy_from_slice(input);
            }
        }
    };
    crate::platform::for_each_chunk_mut(&mut windows, image_len, fill);
    windows
}

impl<B: Conv3x3Same, C: CheckpointStrategy> Conv3x3Same for Autodiff<B, C> {
    fn conv3x3_same(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct Conv3x3SameBackward;

        impl<B: Conv3x3Same> Backward<B, 3> for Conv3x3SameBackward {
            type State = (NodeId, NodeId, NodeId);

            fn backward(
                self,
                ops: Ops<Self::State, 3>,
                grads: &mut Gradients,
                checkpointer: &mut Checkpointer,
            ) {
                let [x_node, weight_node, bias_node] = ops.parents;
                let grad = grads.consume::<B>(&ops.node);
                let (x, weight, bias) = ops.state;
                let x: FloatTensor<B> = checkpointer.retrieve_node_output(x);
                let weight: FloatTensor<B> = checkpointer.retrieve_node_output(weight);
                let bias: FloatTensor<B> = checkpointer.retrieve_node_output(bias);
                if let Some(node) = x_node {
                    let x_grad = B::conv3x3_same_input_grad(x.clone(), weight.clone(), grad.clone());
                    grads.register::<B>(node.id, x_grad);
                }
                if let Some(node) = weight_node {
                    let weight_grad = B::conv3x3_same_weight_grad(x.clone(), weight, grad.clone());
                    grads.register::<B>(node.id, weight_grad);
                }
                if let Some(node) = bias_node {
                    grads.register::<B>(node.id, B::conv2d_bias_backward(x, bias, grad));
                }
            }
        }

        // As burn's conv2d: compute-bound, keeping its input, weight and bias.
        match Conv3x3SameBackward
            .prepare::<C>([x.node(), weight.node(), bias.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let state = (
                    prep.checkpoint(&x),
                    prep.checkpoint(&weight),
                    prep.checkpoint(&bias),
                );
                let output =
                    B::conv3x3_same(x.into_primitive(), weight.into_primitive(), bias.into_primitive());
                prep.finish(state, output)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::conv3x3_same(
                x.into_primitive(),
                weight.into_primitive(),
                bias.into_primitive(),
            )),
        }
    }
}

/// `[batch, in, h, w]` by `[out, in, 3, 3]`, plus `[out]` -> `[batch, out, h, w]` (see the module's docs).
pub fn conv3x3_same(x: Tensor<4>, weight: Tensor<4>, bias: Tensor<1>) -> Tensor<4> {
    Tensor::from_dispatch(<Dispatch as Conv3x3Same>::conv3x3_same(
        x.into_dispatch(),
        weight.into_dispatch(),
        bias.into_dispatch(),
    ))
}

#[cfg(test)]
mod tests {
    use burn::tensor::module::conv2d;
    use burn::tensor::{Distribution, Tolerance};
    // In the browser (wasm-pack test, tests/run-all) these run as wasm-bindgen tests.
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    /// The same output and the same three gradients as burn's conv2d on flex, with one,
    /// two and three input channels, on images that are neither square nor a multiple of
    /// anything.
    #[test]
    fn equals_burns_conv2d_forward_and_backward_on_flex() {
        for in_channels in [1, 2, 3] {
            equals_burns_conv2d(in_channels);
        }
    }

    fn equals_burns_conv2d(in_channels: usize) {
        let device = Device::flex().autodiff();
        let random = |shape: [usize; 4]| Tensor::<4>::random(shape, Distribution::Normal(0.0, 1.0), &device);
        let x = random([3, in_channels, 7, 5]);
        let weight = random([4, in_channels, 3, 3]);
        let bias = Tensor::<1>::random([4], Distribution::Normal(0.0, 1.0), &device);
        let upstream = random([3, 4, 7, 5]);
        let run = |conv: &dyn Fn(Tensor<4>, Tensor<4>, Tensor<1>) -> Tensor<4>| {
            let leaves = (
                x.clone().require_grad(),
                weight.clone().require_grad(),
                bias.clone().require_grad(),
            );
            let output = conv(leaves.0.clone(), leaves.1.clone(), leaves.2.clone());
            let grads = (output.clone() * upstream.clone()).sum().backward();
            [
                output.inner().into_data(),
                leaves.0.grad(&grads).unwrap().into_data(),
                leaves.1.grad(&grads).unwrap().into_data(),
                leaves.2.grad(&grads).unwrap().into_data(),
            ]
        };
        let ours = run(&conv3x3_same);
        let burns = run(&|x, weight, bias| conv2d(x, weight, Some(bias), same_padding()));
        for (ours, burns) in ours.iter().zip(&burns) {
            ours.assert_approx_eq::<f32>(burns, Tolerance::rel_abs(1e-5, 1e-5));
        }
    }
}
