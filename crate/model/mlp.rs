use burn::nn::{Linear, LinearConfig, Relu};
use burn::prelude::*;

use super::{InputShape, glorot};

#[derive(Module, Debug)]
pub struct Mlp {
    layers: Vec<Linear>,
    activation: Relu,
}

impl Mlp {
    pub fn new(input: &InputShape, hidden: &[usize], device: &Device) -> Self {
        let widths: Vec<usize> = std::iter::once(input.pixels())
            .chain(hidden.iter().copied())
            .chain([input.classes])
            .collect();
        let layers = widths
            .windows(2)
            .map(|w| {
                LinearConfig::new(w[0], w[1])
                    .with_initializer(glorot())
                    .init(device)
            })
            .map(super::zero_bias_linear)
            .collect();
        Mlp {
            layers,
            activation: Relu::new(),
        }
    }

    pub fn forward(&self, images: Tensor<4>) -> Tensor<2> {
        let mut x: Tensor<2> = images.flatten(1, 3);
        let last = self.layers.len() - 1;
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward(x);
            if i < last {
                x = self.activation.forward(x);
            }
        }
        x
    }
}

pub(super) fn census(input: &InputShape, hidden: &[usize]) -> super::TensorCensus {
    let mut census = super::TensorCensus::default();
    let mut width = input.pixels();
    census.saved_activations.push(width);
    for &next in hidden {
        census.parameters.extend([width * next, next]);
        // The linear output feeds ReLU, whose output feeds the next linear.
        census.saved_activations.extend([next, next]);
        census.kept_when_checkpointing.push(next);
        width = next;
    }
    census.parameters.extend([width * input.classes, input.classes]);
    census.saved_activations.push(input.classes);
    census.kept_when_checkpointing.push(input.classes);
    census
}
