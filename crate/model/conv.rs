//! conv3x3 with stride 1 and same padding: burn's own conv2d on the GPU, Headroom's on flex
//! (crate/ops/conv_flex.rs: each image's windows and batched matmuls), and on ndarray
//! one computed here as nine shifted windows of the padded input and one matmul per image (im2col):
//! burn-ndarray's own conv2d backward computes the input gradient with a scalar
//! `conv_transpose2d` loop that took most of a CNN step
//! (docs/benchmarks.md, "burn-ndarray's conv2d backward").

use burn::module::Param;
use burn::prelude::*;
use burn::tensor::module::conv2d;

use crate::ops::conv_flex::{conv3x3_same, same_padding};
use crate::ops::matmul::matmul;

#[derive(Module, Debug)]
pub struct Conv3x3 {
    /// [out_channels, in_channels, 3, 3], as burn's Conv2d lays it out.
    weight: Param<Tensor<4>>,
    bias: Param<Tensor<1>>,
}

impl Conv3x3 {
    /// Glorot-uniform kernel (fans counted over the 3x3 window), zero bias.
    pub fn new(in_channels: usize, out_channels: usize, device: &Device) -> Self {
        let weight = super::glorot().init_with(
            [out_channels, in_channels, 3, 3],
            Some(in_channels * 9),
            Some(out_channels * 9),
            device,
        );
        let bias = Param::from_tensor(Tensor::zeros([out_channels], device));
        Conv3x3 { weight, bias }
    }

    /// [batch, in, h, w] -> [batch, out, h, w].
    pub fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        // Side by side on the comparison's CNN, flex ran burn's conv2d faster than this
        // im2col, and ndarray ran this im2col several times faster than burn's
        // (docs/benchmarks.md, "flex as the CPU backend"). Since 2026-12-04 flex takes
        // conv_flex's windows, which keep only the input as burn's does; with the pool of
        // its own they nearly doubled the CNN's speed (docs/benchmarks.md, "the CNN on flex").
        if x.device() == Device::flex() {
            return conv3x3_same(x, self.weight.val(), self.bias.val());
        }
        let [batch, _, height, width] = x.dims();
        let [out_channels, ..] = self.weight.dims();
        let product = self.product_without_bias(x);
        // The bias spread over the pixels by a matmul with a row of ones, so that its
        // gradient is a matmul over the pixels (and a sum over the batch, as in a linear
        // layer): as a broadcast add over every pixel of the batch, its gradient was one
        // long sum that came out wrong on wgpu (the 4x64 vs 1x256 accumulation test).
        // In the product's dtype, which is the bias's too (half under f16).
        let ones = Tensor::ones([1, height * width], (&product.device(), product.dtype()));
        let bias = matmul(self.bias.val().reshape([out_channels, 1]), ones);
        (product + bias.unsqueeze::<3>()).reshape([batch, out_channels, height, width])
    }

    /// [batch, in, h, w] -> [batch, out, h * w] without the bias.
    fn product_without_bias(&self, x: Tensor<4>) -> Tensor<3> {
        // ndarray is native only, and an opt-in feature.
        #[cfg(all(not(target_arch = "wasm32"), feature = "ndarray"))]
        #[allow(deprecated)]
        if x.device() == Device::ndarray() {
            return self.im2col_product(x);
        }
        let [batch, _, height, width] = x.dims();
        let [out_channels, ..] = self.weight.dims();
        // On the GPU, burn's conv2d: faster than the im2col on lavapipe and on SwiftShader,
        // and it reserves less, as it keeps its input instead of nine windows of it
        // (docs/benchmarks.md, "the GPU's conv as burn's conv2d").
        conv2d(x, self.weight.val(), None, same_padding()).reshape([batch, out_channels, height * width])
    }

    /// [batch, in, h, w] -> [batch, out, h * w] without the bias: nine shifted windows of the
    /// padded input and one matmul per image. ndarray's own conv2d computes its input
    /// gradient with a scalar `conv_transpose2d` loop (most of a CNN step); every op here
    /// has a vectorized backward there.
    #[cfg(all(not(target_arch = "wasm32"), feature = "ndarray"))]
    fn im2col_product(&self, x: Tensor<4>) -> Tensor<3> {
        let [batch, in_channels, height, width] = x.dims();
        let [out_channels, ..] = self.weight.dims();
        let padded = x.pad((1, 1, 1, 1), burn::tensor::ops::PadMode::Constant(0.0));
        let windows: Vec<Tensor<4>> = (0..3)
            .flat_map(|dy| (0..3).map(move |dx| (dy, dx)))
            .map(|(dy, dx)| {
                padded
                    .clone()
                    .slice([0..batch, 0..in_channels, dy..dy + height, dx..dx + width])
            })
            .collect();
        // Per image, the windows stacked are already its patch matrix, [(ky, kx, in),
        // pixel], and the kernel times it is the output, channels first: one copy of the
        // patches (the stack) and none of the output. burn's broadcast matmul: ndarray takes
        // no GPU routine.
        let patches = Tensor::stack::<5>(windows, 1).reshape([batch, 9 * in_channels, height * width]);
        let kernel = self
            .weight
            .val()
            .permute([0, 2, 3, 1])
            .reshape([1, out_channels, 9 * in_channels]);
        kernel.matmul(patches)
    }
}

// Native only: the GPU's device is made asynchronously in the browser (tests/wasm_train.rs
// trains the CNN there), and flex's own conv is tested in crate/ops/conv_flex.rs.
#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use burn::tensor::{Distribution, Tolerance};

    use super::*;

    /// The GPU's path: burn's conv2d, the bias through a matmul.
    #[test]
    fn equals_burns_conv2d_with_same_padding() {
        equals_burns_conv2d_on(crate::ops::backend::BackendKind::Wgpu.device());
    }

    /// ndarray's path: the im2col product.
    #[cfg(feature = "ndarray")]
    #[test]
    fn equals_burns_conv2d_with_same_padding_on_ndarray() {
        #[allow(deprecated)]
        equals_burns_conv2d_on(Device::ndarray());
    }

    fn equals_burns_conv2d_on(device: Device) {
        let conv = Conv3x3::new(3, 5, &device);
        let conv = Conv3x3 {
            bias: Param::from_tensor(Tensor::random([5], Distribution::Default, &device)),
            ..conv
        };
        let x = Tensor::<4>::random([2, 3, 7, 6], Distribution::Default, &device);
        let ours = conv.forward(x.clone());
        let reference = conv2d(x, conv.weight.val(), Some(conv.bias.val()), same_padding());
        ours.into_data()
            .assert_approx_eq::<f32>(&reference.into_data(), Tolerance::rel_abs(1e-5, 1e-5));
    }
}
