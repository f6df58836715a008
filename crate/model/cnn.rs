//! The CNN: conv3x3 + ReLU + 2x2 max-pool blocks, then a linear head; each block a
//! segment of recomputation.

use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;

use super::conv::Conv3x3;
use super::{InputShape, Segment, glorot};
use crate::ops::matmul::linear;
use crate::ops::max_pool::max_pool_2x2;
use crate::ops::relu::relu;

#[derive(Module, Debug)]
pub struct ConvBlock {
    conv: Conv3x3,
    /// 2x2, stride 2. Kept for the records saved before the pool became
    /// [`max_pool_2x2`], which computes the same.
    pool: MaxPool2d,
    /// The input's height and width: a block is a segment, and segments pass
    /// [batch, features] between them.
    height: usize,
    width: usize,
}

impl ConvBlock {
    /// [batch, in * h * w] -> [batch, out * h/2 * w/2].
    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        let [batch, features] = x.dims();
        let images = x.reshape([
            batch,
            features / (self.height * self.width),
            self.height,
            self.width,
        ]);
        let pooled = max_pool_2x2(relu(self.conv.forward(images)));
        pooled.flatten(1, 3)
    }
}

#[derive(Module, Debug)]
pub struct Cnn {
    blocks: Vec<ConvBlock>,
    head: Linear,
}

impl Cnn {
    pub fn new(input: &InputShape, channels: &[usize], device: &Device) -> Self {
        let mut in_channels = 1;
        let (mut height, mut width) = (input.height, input.width);
        let mut blocks = Vec::new();
        for &out_channels in channels {
            let conv = Conv3x3::new(in_channels, out_channels, device);
            let pool = MaxPool2dConfig::new([2, 2]).with_strides([2, 2]).init();
            blocks.push(ConvBlock {
                conv,
                pool,
                height,
                width,
            });
            in_channels = out_channels;
            height /= 2;
            width /= 2;
        }
        let features = in_channels * height * width;
        let head = super::zero_bias_linear(
            LinearConfig::new(features, input.classes)
                .with_initializer(glorot())
                .init(device),
        );
        Cnn { blocks, head }
    }

    /// One segment per conv block, then the head.
    pub fn segment_count(&self) -> usize {
        self.blocks.len() + 1
    }

    /// Block `index` (the head after the last): [batch, features] in and out.
    pub fn segment(&self, index: usize, x: Tensor<2>) -> Tensor<2> {
        match self.blocks.get(index) {
            Some(block) => block.forward(x),
            None => linear(&self.head, x),
        }
    }
}

pub(super) fn census(input: &InputShape, channels: &[usize]) -> super::TensorCensus {
    let mut census = super::TensorCensus {
        // About the patch matrix burn's conv2d builds for its weight gradient
        // (`backward_width`; the planner leaves it out under checkpointing). Refitted when
        // the GPU's conv became burn's on the 15 CNN settings of `headroom bench plan` and
        // the comparison's: 0.88 keeps most of them close, with a few a page over or under;
        // lower factors left more under, and 0.95 with the patches counted under
        // checkpointing too left none under but checkpointing well over. The census sits on
        // the edges of pages (docs/benchmarks.md, "the CNN's backward-transients factor, refitted").
        backward_transients: 0.88,
        ..super::TensorCensus::default()
    };
    let (mut height, mut width, mut in_channels) = (input.height, input.width, 1);
    for &out in channels {
        census.parameters.extend([in_channels * out * 9, out]);
        let pixels = height * width;
        // burn's conv2d keeps its input (the segment's); the pool keeps its input (the
        // ReLU output, which is all the ReLU keeps) and its argmax indices. ndarray's
        // im2col (crate/model/conv.rs) keeps nine windows of the input besides: not
        // counted, as the census is the GPU's and the probe steps calibrate the rest.
        let conv_out = out * pixels;
        census.backward_width = census.backward_width.max(in_channels * 9 * pixels);
        height /= 2;
        width /= 2;
        let pooled = out * height * width;
        census.segments.push(Segment {
            input: in_channels * pixels,
            saved: vec![conv_out, pooled],
            output: pooled,
            parameters: 2,
        });
        in_channels = out;
    }
    let features = in_channels * height * width;
    census
        .parameters
        .extend([features * input.classes, input.classes]);
    census.segments.push(Segment {
        input: features,
        saved: vec![input.classes],
        output: input.classes,
        parameters: 2,
    });
    census
}
