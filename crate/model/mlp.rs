//! The MLP: linear layers with ReLU between them; each layer a segment of recomputation.

use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;

use super::{InputShape, Segment, glorot};
use crate::ops::linear::linear_keeping_gradient;
use crate::ops::relu::relu_over_input;

#[derive(Module, Debug)]
pub struct Mlp {
    layers: Vec<Linear>,
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
        Mlp { layers }
    }

    /// One segment per layer: recomputing a layer needs only its input.
    pub fn segment_count(&self) -> usize {
        self.layers.len()
    }

    /// Layer `index` and its ReLU (none after the last): [batch, in] -> [batch, out].
    pub fn segment(&self, index: usize, x: Tensor<2>) -> Tensor<2> {
        let x = linear_keeping_gradient(&self.layers[index], x);
        if index + 1 < self.layers.len() {
            relu_over_input(x)
        } else {
            x
        }
    }
}

pub(super) fn census(input: &InputShape, hidden: &[usize]) -> super::TensorCensus {
    let mut census = super::TensorCensus {
        // Its output gradient and half as much again, fitted on the `fitted` set.
        backward_transients: 1.5,
        ..super::TensorCensus::default()
    };
    let mut width = input.pixels();
    for &next in hidden {
        census.parameters.extend([width * next, next]);
        // The matmul keeps its input; ReLU keeps its output, which is the next segment's
        // input.
        census.segments.push(Segment {
            input: width,
            saved: vec![next],
            output: next,
            parameters: 2,
        });
        width = next;
    }
    census.parameters.extend([width * input.classes, input.classes]);
    // The loss keeps the logits.
    census.segments.push(Segment {
        input: width,
        saved: vec![input.classes],
        output: input.classes,
        parameters: 2,
    });
    census
}
