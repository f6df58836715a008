//! The networks Headroom trains, built from a serializable config. The trainer only sees
//! `Model`: images or tokens in, logits out.

mod cnn;
mod conv;
pub mod generate;
mod gpt;
mod mlp;

use burn::prelude::*;
use serde::{Deserialize, Serialize};

pub use cnn::Cnn;
pub use gpt::{Gpt, GptShape};
pub use mlp::Mlp;

/// What the model sees of the data: one channel of `height x width` pixels, `classes`
/// outputs; or, for text, tokens of `classes` symbols (height and width 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputShape {
    pub height: usize,
    pub width: usize,
    pub classes: usize,
    #[serde(default)]
    pub kind: InputKind,
}

impl InputShape {
    /// One channel of `height x width` pixels in `classes` classes.
    pub fn images(height: usize, width: usize, classes: usize) -> Self {
        InputShape {
            height,
            width,
            classes,
            kind: InputKind::Images,
        }
    }

    /// Tokens of `classes` symbols.
    pub fn tokens(classes: usize) -> Self {
        InputShape {
            height: 1,
            width: 1,
            classes,
            kind: InputKind::Tokens,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InputKind {
    #[default]
    Images,
    Tokens,
}

/// A micro-batch on the device, as the model's first segment takes it.
pub enum ModelInput {
    /// [batch, 1, height, width], scaled to [0, 1].
    Images(Tensor<4>),
    /// [batch, context] token ids.
    Tokens(Tensor<2, Int>),
}

impl ModelInput {
    /// The same values outside autodiff.
    pub fn inner(self) -> Self {
        match self {
            ModelInput::Images(images) => ModelInput::Images(images.inner()),
            ModelInput::Tokens(tokens) => ModelInput::Tokens(tokens.inner()),
        }
    }
}

impl InputShape {
    pub fn pixels(&self) -> usize {
        self.height * self.width
    }
}

#[cfg_attr(all(test, not(target_arch = "wasm32")), derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ModelConfig {
    /// Fully connected layers of the given widths, ReLU between them.
    Mlp { hidden: Vec<usize> },
    /// conv3x3 (same padding) + ReLU + maxpool2 per entry of `channels`, then a linear head.
    Cnn { channels: Vec<usize> },
    /// A GPT over windows of text (see [`Gpt`]).
    Gpt(GptShape),
}

impl ModelConfig {
    pub fn mlp_default() -> Self {
        ModelConfig::Mlp {
            hidden: vec![512, 256],
        }
    }

    pub fn cnn_default() -> Self {
        ModelConfig::Cnn {
            channels: vec![16, 32],
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            ModelConfig::Mlp { .. } => "mlp",
            ModelConfig::Cnn { .. } => "cnn",
            ModelConfig::Gpt(_) => "gpt",
        }
    }

    /// Tokens per sample the data stream must cut from text: the context and the token
    /// its last position predicts. `None` for the image models.
    pub fn text_window(&self) -> Option<usize> {
        match self {
            ModelConfig::Gpt(shape) => Some(shape.context + 1),
            _ => None,
        }
    }

    pub fn validate(&self, input: &InputShape) -> Result<(), String> {
        match (self, input.kind) {
            (ModelConfig::Gpt(_), InputKind::Images) => {
                return Err("the GPT reads text: pick a text dataset (headroom prepare --text)".into());
            }
            (ModelConfig::Mlp { .. } | ModelConfig::Cnn { .. }, InputKind::Tokens) => {
                return Err(format!(
                    "the {} reads images; for a text dataset pick the GPT (--model gpt)",
                    self.name().to_uppercase()
                ));
            }
            _ => {}
        }
        match self {
            ModelConfig::Gpt(shape) => shape.validate(),
            ModelConfig::Mlp { hidden } if hidden.contains(&0) => {
                Err("MLP hidden widths must be at least 1".into())
            }
            ModelConfig::Cnn { channels } if channels.is_empty() || channels.contains(&0) => {
                Err("CNN needs at least one block, each with at least 1 channel".into())
            }
            ModelConfig::Cnn { channels } => {
                let shrink = 1usize << channels.len();
                if input.height < shrink || input.width < shrink {
                    Err(format!(
                        "{} pooling blocks shrink {}x{} images below one pixel",
                        channels.len(),
                        input.height,
                        input.width
                    ))
                } else {
                    Ok(())
                }
            }
            ModelConfig::Mlp { .. } => Ok(()),
        }
    }

    pub fn init(&self, input: &InputShape, device: &Device) -> Model {
        match self {
            ModelConfig::Mlp { hidden } => Model::Mlp(Mlp::new(input, hidden, device)),
            ModelConfig::Cnn { channels } => Model::Cnn(Cnn::new(input, channels, device)),
            ModelConfig::Gpt(shape) => Model::Gpt(Gpt::new(shape, input.classes, device)),
        }
    }
}

// One per run, and burn's Module derive records each variant as it is: not worth a Box.
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub enum Model {
    Mlp(Mlp),
    Cnn(Cnn),
    Gpt(Gpt),
}

impl Model {
    /// [samples, classes] logits: one row an image, or one row a token position.
    pub fn forward(&self, input: ModelInput) -> Tensor<2> {
        (0..self.segment_count()).fold(self.stem(input), |x, index| self.segment(index, x))
    }

    /// What the first segment takes: the images flattened, or the tokens embedded
    /// ([batch * context, width]).
    pub fn stem(&self, input: ModelInput) -> Tensor<2> {
        match (self, input) {
            (Model::Gpt(model), ModelInput::Tokens(tokens)) => model.embed(tokens).flatten(0, 1),
            (_, ModelInput::Images(images)) => images.flatten(1, 3),
            (_, ModelInput::Tokens(_)) => {
                unreachable!("the config's validation pairs image models with images")
            }
        }
    }

    /// The forward pass is a chain of segments (a layer of the MLP, a conv block of the
    /// CNN, the head), the unit activation checkpointing recomputes.
    pub fn segment_count(&self) -> usize {
        match self {
            Model::Mlp(model) => model.segment_count(),
            Model::Cnn(model) => model.segment_count(),
            Model::Gpt(model) => model.segment_count(),
        }
    }

    /// Segment `index`: [batch, features] -> [batch, features]; the first takes the
    /// flattened images, the last returns the logits.
    pub fn segment(&self, index: usize, x: Tensor<2>) -> Tensor<2> {
        match self {
            Model::Mlp(model) => model.segment(index, x),
            Model::Cnn(model) => model.segment(index, x),
            Model::Gpt(model) => model.segment(index, x),
        }
    }
}

/// Glorot-uniform kernels and zero biases, the common baseline other frameworks use too.
fn glorot() -> burn::nn::Initializer {
    burn::nn::Initializer::XavierUniform { gain: 1.0 }
}

fn zero_bias_linear(mut layer: burn::nn::Linear) -> burn::nn::Linear {
    // Tracked only where autodiff runs: a model built for inference or export has no
    // gradients to require.
    layer.bias = layer.bias.map(|bias| {
        bias.map(|b| {
            let zeros = b.zeros_like();
            if zeros.is_autodiff() {
                zeros.require_grad()
            } else {
                zeros
            }
        })
    });
    layer
}

/// The tensors a model holds and saves, counted in elements, for the memory planner.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TensorCensus {
    /// Elements of each parameter tensor.
    pub parameters: Vec<usize>,
    /// The forward pass, segment by segment (see [`Model::segment`]).
    pub segments: Vec<Segment>,
    /// What a sliced device pool holds beyond the activations, as a share of them: pages
    /// sized to the largest tensor keep tails that tensors of that same size cannot fill,
    /// and the GPT's are mostly of two sizes (the attention scores, the MLP's hidden
    /// layer). Fitted for the GPT on lavapipe (`headroom bench plan --set gpt-fitted`);
    /// 0 for the MLP and CNN, whose workspace factors were fitted with their pages.
    pub pool_slack: f64,
    /// How many of the widest saved activation backward holds besides the saved ones at
    /// its peak (the output gradient of a layer and what its backward builds from it), in
    /// the storage precision. Fitted per model on lavapipe over `headroom bench plan`'s
    /// settings (each model's census says on which).
    pub backward_transients: f64,
    /// Elements per sample of the widest tensor backward builds that no segment saves (a
    /// conv's patch matrix for its weight gradient), where it is wider than every saved
    /// activation; `backward_transients` counts in it then.
    pub backward_width: usize,
}

/// One segment's activations, in elements per sample.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Segment {
    /// Its input: what checkpointing keeps.
    pub input: usize,
    /// What its backward needs besides the input: what checkpointing recomputes.
    pub saved: Vec<usize>,
    pub output: usize,
    /// How many of the census's parameter tensors, next in its order, this segment's
    /// backward yields gradients for (segment 0 also the stem's, the GPT's embeddings).
    pub parameters: usize,
}

impl TensorCensus {
    /// Every activation the backward pass needs without checkpointing, in forward order.
    pub fn saved_activations(&self) -> Vec<usize> {
        self.segments
            .iter()
            .flat_map(|s| std::iter::once(s.input).chain(s.saved.iter().copied()))
            .collect()
    }

    /// Each segment's parameter tensors (elements each), in segment order.
    pub fn segment_parameters(&self) -> Vec<&[usize]> {
        let mut rest = &self.parameters[..];
        self.segments
            .iter()
            .map(|segment| {
                let (mine, others) = rest.split_at(segment.parameters.min(rest.len()));
                rest = others;
                mine
            })
            .collect()
    }
}

impl ModelConfig {
    pub fn census(&self, input: &InputShape) -> TensorCensus {
        match self {
            ModelConfig::Mlp { hidden } => mlp::census(input, hidden),
            ModelConfig::Cnn { channels } => cnn::census(input, channels),
            ModelConfig::Gpt(shape) => gpt::census(shape, input.classes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    // In the browser (wasm-pack test, tests/run-all) these run as wasm-bindgen tests.
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// Export and inference build models on a device without autodiff.
    #[test]
    fn models_build_and_run_without_autodiff() {
        let device = Device::flex();
        let input = InputShape {
            height: 28,
            width: 28,
            classes: 10,
            kind: InputKind::Images,
        };
        for config in [ModelConfig::mlp_default(), ModelConfig::cnn_default()] {
            let model = config.init(&input, &device);
            let logits = model.forward(ModelInput::Images(Tensor::zeros([2, 1, 28, 28], &device)));
            assert_eq!(logits.dims(), [2, 10]);
        }
    }
}
