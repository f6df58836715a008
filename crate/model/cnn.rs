use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{Linear, LinearConfig, Relu};
use burn::prelude::*;

use super::conv::Conv3x3;
use super::{InputShape, glorot};

#[derive(Module, Debug)]
pub struct ConvBlock {
    conv: Conv3x3,
    pool: MaxPool2d,
    activation: Relu,
}

impl ConvBlock {
    fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        self.pool.forward(self.activation.forward(self.conv.forward(x)))
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
                activation: Relu::new(),
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

    pub fn forward(&self, images: Tensor<4>) -> Tensor<2> {
        let x = self.blocks.iter().fold(images, |x, block| block.forward(x));
        self.head.forward(x.flatten(1, 3))
    }
}

pub(super) fn census(input: &InputShape, channels: &[usize]) -> super::TensorCensus {
    let mut census = super::TensorCensus::default();
    let (mut height, mut width, mut in_channels) = (input.height, input.width, 1);
    census.saved_activations.push(height * width);
    for &out in channels {
        census.parameters.extend([in_channels * out * 9, out]);
        let conv_out = out * height * width;
        height /= 2;
        width /= 2;
        let pooled = out * height * width;
        // conv output, ReLU output, pooled output and the pool's argmax indices.
        census
            .saved_activations
            .extend([conv_out, conv_out, pooled, pooled]);
        census.kept_when_checkpointing.push(conv_out);
        in_channels = out;
    }
    let features = in_channels * height * width;
    census
        .parameters
        .extend([features * input.classes, input.classes]);
    census.saved_activations.push(input.classes);
    census.kept_when_checkpointing.push(input.classes);
    census
}
