//! A small GPT, after nanoGPT's `model.py`: token and learned position embeddings, pre-norm
//! blocks of causal multi-head self-attention and a 4x GELU MLP, a final LayerNorm and a
//! linear head predicting the next token at every position.

use burn::nn::{
    Embedding, EmbeddingConfig, Gelu, Initializer, LayerNorm, LayerNormConfig, Linear, LinearConfig,
};
use burn::prelude::*;
use serde::{Deserialize, Serialize};

use super::{Segment, TensorCensus};
use crate::ops::attention::causal_attention;
use crate::ops::matmul::linear_3d;

/// The GPT's size: `layers` blocks of `width` features split over `heads`, reading
/// `context` tokens.
#[cfg_attr(all(test, not(target_arch = "wasm32")), derive(tsify::Tsify))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GptShape {
    pub layers: usize,
    pub heads: usize,
    pub width: usize,
    pub context: usize,
}

impl GptShape {
    pub fn validate(&self) -> Result<(), String> {
        if self.layers == 0 || self.heads == 0 || self.width == 0 || self.context == 0 {
            return Err("the GPT needs at least 1 layer, 1 head, width 1 and context 1".into());
        }
        if !self.width.is_multiple_of(self.heads) {
            return Err(format!(
                "width {} does not split evenly over {} heads",
                self.width, self.heads
            ));
        }
        Ok(())
    }
}

/// nanoGPT's initialization: N(0, 0.02) weights.
fn normal() -> Initializer {
    Initializer::Normal { mean: 0.0, std: 0.02 }
}

fn linear(inputs: usize, outputs: usize, device: &Device) -> Linear {
    super::zero_bias_linear(
        LinearConfig::new(inputs, outputs)
            .with_initializer(normal())
            .init(device),
    )
}

/// Causal multi-head self-attention: the input projected to queries, keys and values,
/// split over the heads, attended ([`causal_attention`], which keeps nothing T×T for
/// backward) and projected back. The fields are those of burn's `MultiHeadAttention`, which
/// the GPT used before, so that the parameters keep their names.
#[derive(Module, Debug)]
pub struct SelfAttention {
    query: Linear,
    key: Linear,
    value: Linear,
    output: Linear,
    heads: usize,
}

impl SelfAttention {
    fn new(shape: &GptShape, device: &Device) -> Self {
        let d = shape.width;
        SelfAttention {
            query: linear(d, d, device),
            key: linear(d, d, device),
            value: linear(d, d, device),
            output: linear(d, d, device),
            heads: shape.heads,
        }
    }

    /// [batch, tokens, width] -> the same.
    fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let [batch, tokens, width] = x.dims();
        let heads = |projection: &Linear| {
            linear_3d(projection, x.clone())
                .reshape([batch, tokens, self.heads, width / self.heads])
                .swap_dims(1, 2)
        };
        let context = causal_attention(heads(&self.query), heads(&self.key), heads(&self.value));
        linear_3d(
            &self.output,
            context.swap_dims(1, 2).reshape([batch, tokens, width]),
        )
    }
}

#[derive(Module, Debug)]
pub struct Block {
    attention_norm: LayerNorm,
    attention: SelfAttention,
    mlp_norm: LayerNorm,
    expand: Linear,
    activation: Gelu,
    project: Linear,
}

impl Block {
    fn new(shape: &GptShape, device: &Device) -> Self {
        let d = shape.width;
        Block {
            attention_norm: LayerNormConfig::new(d).init(device),
            attention: SelfAttention::new(shape, device),
            mlp_norm: LayerNormConfig::new(d).init(device),
            expand: linear(d, 4 * d, device),
            activation: Gelu::new(),
            project: linear(4 * d, d, device),
        }
    }

    /// [batch, tokens, width] -> the same; position t attends to positions up to t only.
    fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let attended = self.attention.forward(self.attention_norm.forward(x.clone()));
        let x = x + attended;
        let hidden = self
            .activation
            .forward(linear_3d(&self.expand, self.mlp_norm.forward(x.clone())));
        x + linear_3d(&self.project, hidden)
    }
}

#[derive(Module, Debug)]
pub struct Gpt {
    token: Embedding,
    position: Embedding,
    blocks: Vec<Block>,
    norm: LayerNorm,
    head: Linear,
    /// Tokens a training window gives each position: segments pass [batch * context,
    /// width] between them and reshape by it.
    context: usize,
}

impl Gpt {
    pub fn new(shape: &GptShape, vocabulary: usize, device: &Device) -> Self {
        let embedding = |count: usize| {
            EmbeddingConfig::new(count, shape.width)
                .with_initializer(normal())
                .init(device)
        };
        Gpt {
            token: embedding(vocabulary),
            position: embedding(shape.context),
            blocks: (0..shape.layers).map(|_| Block::new(shape, device)).collect(),
            norm: LayerNormConfig::new(shape.width).init(device),
            head: linear(shape.width, vocabulary, device),
            context: shape.context,
        }
    }

    pub fn context(&self) -> usize {
        self.context
    }

    /// [batch, tokens] token ids -> [batch, tokens, width]; at most `context` tokens.
    pub fn embed(&self, tokens: Tensor<2, Int>) -> Tensor<3> {
        let [_, count] = tokens.dims();
        let device = tokens.device();
        let positions = Tensor::<1, Int>::arange(0..count as i64, &device).reshape([1, count]);
        self.token.forward(tokens) + self.position.forward(positions)
    }

    /// [batch, tokens] -> [batch, tokens, vocabulary] logits, every position its next
    /// token's.
    pub fn logits(&self, tokens: Tensor<2, Int>) -> Tensor<3> {
        let x = self
            .blocks
            .iter()
            .fold(self.embed(tokens), |x, block| block.forward(x));
        linear_3d(&self.head, self.norm.forward(x))
    }

    /// One segment per block, then the final norm and head.
    pub fn segment_count(&self) -> usize {
        self.blocks.len() + 1
    }

    /// [batch * context, width] -> the same for a block; the last gives [batch * context,
    /// vocabulary].
    pub fn segment(&self, index: usize, x: Tensor<2>) -> Tensor<2> {
        let [rows, width] = x.dims();
        let x = x.reshape([rows / self.context, self.context, width]);
        let out = match self.blocks.get(index) {
            Some(block) => block.forward(x),
            None => linear_3d(&self.head, self.norm.forward(x)),
        };
        out.flatten(0, 1)
    }
}

/// See [`TensorCensus::pool_slack`]: fitted on `headroom bench plan --set gpt-fitted` to what
/// the pool held there beyond the activations (docs/benchmarks.md, "the census fitted to the
/// GPT"); fitted again (0.4 -> 0.3) when the attention stopped keeping T×T ("attention by
/// blocks of queries").
const POOL_SLACK: f64 = 0.3;

/// Elements per window of `context` tokens (see [`TensorCensus`]).
pub(super) fn census(shape: &GptShape, vocabulary: usize) -> TensorCensus {
    let GptShape {
        layers,
        heads,
        width: d,
        context: t,
    } = *shape;
    let mut census = TensorCensus {
        pool_slack: POOL_SLACK,
        backward_transients: 1.5,
        ..TensorCensus::default()
    };
    census.parameters.extend([vocabulary * d, t * d]);
    let block_parameters = [
        d,
        d,
        d * d,
        d,
        d * d,
        d,
        d * d,
        d,
        d * d,
        d,
        d,
        d,
        d * 4 * d,
        4 * d,
        4 * d * d,
        d,
    ];
    let td = t * d;
    // The embeddings' gradients come with the first segment's (the stem runs again with it).
    let mut stem = 2;
    for _ in 0..layers {
        census.parameters.extend(block_parameters);
        // The attention's input (its norm's output), its query, key and value, its output
        // and one log-sum-exp per row and head (what the attention keeps: nothing T×T; the
        // output projection keeps a view of the same output); the residual stream and its norm's output heading into the MLP, the MLP's hidden
        // layer before and after GELU.
        census.segments.push(Segment {
            input: td,
            saved: vec![td, td, td, td, td, heads * t, td, td, 4 * td, 4 * td],
            output: td,
            parameters: std::mem::take(&mut stem) + block_parameters.len(),
        });
    }
    census.parameters.extend([d, d, d * vocabulary, vocabulary]);
    // The final norm's output, the logits and the loss's softmax of them.
    census.segments.push(Segment {
        input: td,
        saved: vec![td, t * vocabulary, t * vocabulary],
        output: t * vocabulary,
        parameters: stem + 4,
    });
    census
}
