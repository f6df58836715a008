//! Causal self-attention that keeps nothing of size T×T for backward.
//!
//! Plain attention keeps the scores and their softmax, batch x heads x T x T each, from
//! forward to backward: at context 512 those were most of what the GPT reserved, growing
//! with the square of the context (docs/benchmarks.md, "attention by blocks of queries").
//! Here, as in FlashAttention, forward keeps only the output and one log-sum-exp per row,
//! and backward recomputes the probabilities block by block from them. The work is done
//! in blocks of query rows with ordinary tensor ops, so it runs on every backend (wgpu,
//! WebGPU in the page, flex natively and in the wasm fallback, CUDA where built): a block
//! of `rows` queries sees only the keys up to its last row, so its scores are
//! batch x heads x rows x (at most) T, and a block is all that is alive of that size at
//! once. Causality also halves the products: no block multiplies the keys after it.
//!
//! Backward for a block of rows `r` (FlashAttention's, with `P = exp(S - L)`):
//! `dV += Pᵀ dO_r`, `dP = dO_r Vᵀ`, `dS = P ∘ (dP - Δ_r)` where `Δ = rowsum(dO ∘ O)`,
//! `dQ_r = dS K · scale`, `dK += dSᵀ Q_r · scale`.
//!
//! A burn backend extension, like [`crate::ops::relu`]: every backend runs the same blocks;
//! the autodiff backend's version differs in what it keeps and in its backward.

// burn marks ndarray deprecated in favour of flex; natively it is an opt-in CPU backend.
#![allow(deprecated)]

#[cfg(all(not(target_arch = "wasm32"), feature = "ndarray"))]
use burn::backend::NdArray;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::tensor::{BoolTensor, FloatTensor};
use burn::backend::{
    Autodiff, Backend, Dispatch, Flex, Shape, Slice, TensorMetadata, get_or_init_device_settings,
};
use burn::prelude::*;
use burn_cubecl::CubeBackend;

headroom_backend_extension! {
pub trait CausalAttention: Backend {
    /// `softmax(causal(Q Kᵀ / sqrt(width))) V` for `query`, `key` and `value` of shape
    /// [batch, heads, tokens, width]; position t attends to positions up to t only.
    #[fusion(default)]
    fn causal_attention(query: FloatTensor<Self>, key: FloatTensor<Self>, value: FloatTensor<Self>) -> FloatTensor<Self> {
        forward::<Self>(&query, &key, &value).output
    }
}
}

impl CausalAttention for CubeBackend {}
impl CausalAttention for Flex {}
#[cfg(all(not(target_arch = "wasm32"), feature = "ndarray"))]
impl CausalAttention for NdArray {}

/// Query rows per block: the head's width, so that a block's scores (batch x heads x rows x
/// tokens) are at most the size of the attention's input (batch x tokens x width), and at
/// least 16 so that narrow heads do not cut the work too fine.
fn block_rows<B: Backend>(query: &FloatTensor<B>) -> usize {
    let [_, _, _, width] = query.shape().dims::<4>();
    width.max(16)
}

/// `1 / sqrt(width)`, the scores' scale.
fn score_scale<B: Backend>(query: &FloatTensor<B>) -> f64 {
    let [_, _, _, width] = query.shape().dims::<4>();
    1.0 / (width as f64).sqrt()
}

/// What forward gives and backward needs besides the inputs.
#[derive(Clone, Debug)]
struct Forward<B: Backend> {
    /// [batch, heads, tokens, width].
    output: FloatTensor<B>,
    /// `log(sum(exp(scores)))` per query row: [batch, heads, tokens, 1].
    log_sum_exp: FloatTensor<B>,
}

/// Forward in blocks of [`block_rows`] query rows: per block the scores, their softmax (shifted by
/// the row's maximum) and its product with the values.
fn forward<B: Backend>(query: &FloatTensor<B>, key: &FloatTensor<B>, value: &FloatTensor<B>) -> Forward<B> {
    let (tokens, rows) = (query.shape().dims::<4>()[2], block_rows::<B>(query));
    let mut outputs = Vec::new();
    let mut log_sum_exps = Vec::new();
    for (start, end) in blocks(tokens, rows) {
        let scores = block_scores::<B>(query, key, start, end);
        let max = B::float_max_dim(scores.clone(), 3);
        let exp = B::float_exp(B::float_sub(scores, max.clone()));
        let sum = B::float_sum_dim(exp.clone(), 3);
        let weighted = B::float_matmul(exp, token_rows::<B>(value, 0, end));
        // Token-major ([batch, rows, heads, width]): see below.
        outputs.push(B::float_swap_dims(B::float_div(weighted, sum.clone()), 1, 2));
        log_sum_exps.push(B::float_add(max, B::float_log(sum)));
    }
    Forward {
        // Laid out [batch, tokens, heads, width] in memory and viewed as [batch, heads,
        // tokens, width]: the heads joined again (`swap_dims(1, 2)` and a reshape to
        // [batch, tokens, heads x width]) are then a view of the same buffer, so the output
        // projection keeps the very tensor this op keeps, not a copy of it.
        output: B::float_swap_dims(B::float_cat(outputs, 1), 1, 2),
        log_sum_exp: B::float_cat(log_sum_exps, 2),
    }
}

/// The gradients with respect to the query, the key and the value, from the output's
/// gradient `grad`, recomputing each block's probabilities from the log-sum-exp.
fn backward<B: Backend>(saved: Saved<B>, grad: FloatTensor<B>) -> [FloatTensor<B>; 3] {
    let Saved {
        query,
        key,
        value,
        forward,
    } = saved;
    let shape = query.shape();
    let tokens = shape.dims::<4>()[2];
    let (rows, scale) = (block_rows::<B>(&query), score_scale::<B>(&query));
    // Δ = rowsum(dO ∘ O): the softmax's backward term, per row.
    let delta = B::float_sum_dim(B::float_mul(grad.clone(), forward.output), 3);
    let zeros = || B::float_zeros(shape.clone(), &query.device(), query.dtype().into());
    let (mut key_grad, mut value_grad) = (zeros(), zeros());
    let mut query_grads = Vec::new();
    for (start, end) in blocks(tokens, rows) {
        let scores = block_scores::<B>(&query, &key, start, end);
        let probabilities = B::float_exp(B::float_sub(
            scores,
            token_rows::<B>(&forward.log_sum_exp, start, end),
        ));
        let grad_rows = token_rows::<B>(&grad, start, end);
        let to_values = B::float_matmul(B::float_transpose(probabilities.clone()), grad_rows.clone());
        value_grad = add_to_rows::<B>(value_grad, to_values, end);
        let to_probabilities =
            B::float_matmul(grad_rows, B::float_transpose(token_rows::<B>(&value, 0, end)));
        let to_scores = B::float_mul_scalar(
            B::float_mul(
                probabilities,
                B::float_sub(to_probabilities, token_rows::<B>(&delta, start, end)),
            ),
            scale.into(),
        );
        query_grads.push(B::float_matmul(to_scores.clone(), token_rows::<B>(&key, 0, end)));
        let to_keys = B::float_matmul(B::float_transpose(to_scores), token_rows::<B>(&query, start, end));
        key_grad = add_to_rows::<B>(key_grad, to_keys, end);
    }
    [B::float_cat(query_grads, 2), key_grad, value_grad]
}

/// `(start, end)` of each block of `rows` rows over `tokens`, the last one shorter where
/// `rows` does not divide `tokens`.
fn blocks(tokens: usize, rows: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..tokens)
        .step_by(rows)
        .map(move |start| (start, (start + rows).min(tokens)))
}

/// The scaled scores of query rows `start..end` against keys `0..end`, the keys after each
/// row masked to -inf: [batch, heads, end - start, end].
fn block_scores<B: Backend>(
    query: &FloatTensor<B>,
    key: &FloatTensor<B>,
    start: usize,
    end: usize,
) -> FloatTensor<B> {
    let scale = score_scale::<B>(query);
    // Scaling the block's queries costs rows x width, the scores' rows x end.
    let queries = B::float_mul_scalar(token_rows::<B>(query, start, end), scale.into());
    let scores = B::float_matmul(queries, B::float_transpose(token_rows::<B>(key, 0, end)));
    let mask = later_keys::<B>(&scores, start);
    B::float_mask_fill(scores, mask, f32::NEG_INFINITY.into())
}

/// True where a key comes after the query row (row `start + i`, key `j > start + i`), for
/// `scores` of shape [batch, heads, rows, keys].
fn later_keys<B: Backend>(scores: &FloatTensor<B>, start: usize) -> BoolTensor<B> {
    let [batch, heads, rows, keys] = scores.shape().dims::<4>();
    let device = scores.device();
    let settings = get_or_init_device_settings::<B>(&device);
    let arange = |range: std::ops::Range<usize>, shape: [usize; 2]| {
        let indices = B::int_arange(range.start as i64..range.end as i64, &device, settings.int_dtype);
        B::int_reshape(indices, Shape::new(shape))
    };
    let query_rows = arange(start..start + rows, [rows, 1]);
    let key_rows = arange(0..keys, [1, keys]);
    let later = B::int_lower(query_rows, key_rows, settings.bool_dtype);
    let later = B::bool_reshape(later, Shape::new([1, 1, rows, keys]));
    B::bool_expand(later, Shape::new([batch, heads, rows, keys]))
}

/// Rows `start..end` of the token axis (the third) of a [batch, heads, tokens, _] tensor.
fn token_rows<B: Backend>(tensor: &FloatTensor<B>, start: usize, end: usize) -> FloatTensor<B> {
    B::float_slice(tensor.clone(), &token_slices(start, end))
}

/// `tensor[.., .., 0..end, ..] += part`.
fn add_to_rows<B: Backend>(tensor: FloatTensor<B>, part: FloatTensor<B>, end: usize) -> FloatTensor<B> {
    let slices = token_slices(0, end);
    let sum = B::float_add(B::float_slice(tensor.clone(), &slices), part);
    B::float_slice_assign(tensor, &slices, sum)
}

fn token_slices(start: usize, end: usize) -> [Slice; 4] {
    [
        Slice::full(),
        Slice::full(),
        Slice::new(start as isize, Some(end as isize), 1),
        Slice::full(),
    ]
}

/// What backward keeps: the inputs and forward's output and log-sum-exp, nothing T×T.
#[derive(Clone, Debug)]
struct Saved<B: Backend> {
    query: FloatTensor<B>,
    key: FloatTensor<B>,
    value: FloatTensor<B>,
    forward: Forward<B>,
}

impl<B: Backend, C: CheckpointStrategy> CausalAttention for Autodiff<B, C> {
    fn causal_attention(
        query: FloatTensor<Self>,
        key: FloatTensor<Self>,
        value: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct AttentionBackward;

        impl<B: Backend> Backward<B, 3> for AttentionBackward {
            type State = Saved<B>;

            fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
                let grad = grads.consume::<B>(&ops.node);
                let gradients = backward::<B>(ops.state, grad);
                for (parent, gradient) in ops.parents.into_iter().zip(gradients) {
                    if let Some(parent) = parent {
                        grads.register::<B>(parent.id, gradient);
                    }
                }
            }
        }

        let nodes = [query.node(), key.node(), value.node()];
        let (query, key, value) = (
            query.into_primitive(),
            key.into_primitive(),
            value.into_primitive(),
        );
        let computed = forward::<B>(&query, &key, &value);
        // Compute-bound for burn's checkpointing strategies: what backward needs is kept as
        // this op's state, and none of it is T×T.
        match AttentionBackward.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let output = computed.output.clone();
                let saved = Saved {
                    query,
                    key,
                    value,
                    forward: computed,
                };
                prep.finish(saved, output)
            }
            OpsKind::UnTracked(prep) => prep.finish(computed.output),
        }
    }
}

/// Causal self-attention over `query`, `key` and `value` of shape [batch, heads, tokens,
/// width], keeping nothing T×T for backward (see the module's docs).
pub fn causal_attention(query: Tensor<4>, key: Tensor<4>, value: Tensor<4>) -> Tensor<4> {
    Tensor::from_dispatch(<Dispatch as CausalAttention>::causal_attention(
        query.into_dispatch(),
        key.into_dispatch(),
        value.into_dispatch(),
    ))
}

#[cfg(test)]
mod tests {
    use burn::tensor::module::attention_fallback;
    use burn::tensor::ops::AttentionModuleOptions;
    use burn::tensor::{Distribution, FloatDType, Tolerance};
    // In the browser (wasm-pack test, tests/run-all) these run as wasm-bindgen tests.
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    /// burn's attention as autodiff sees it: scores, mask, softmax and product, each kept.
    fn plain_attention(query: Tensor<4>, key: Tensor<4>, value: Tensor<4>) -> Tensor<4> {
        let options = AttentionModuleOptions {
            is_causal: true,
            ..Default::default()
        };
        attention_fallback(query, key, value, None, None, options)
    }

    type Attention = fn(Tensor<4>, Tensor<4>, Tensor<4>) -> Tensor<4>;

    /// The output and the three gradients, through a random weighting of the output so
    /// that every gradient is not the same sum.
    fn output_and_gradients(attention: Attention, inputs: &[Tensor<4>; 4]) -> Vec<TensorData> {
        let [query, key, value, weights] = inputs.clone();
        let leaves = [query, key, value].map(|x| x.detach().require_grad());
        let [query, key, value] = leaves.clone();
        let output = attention(query, key, value);
        let grads = (output.clone() * weights).sum().backward();
        let mut results = vec![output.inner().cast(FloatDType::F32).into_data()];
        for leaf in leaves {
            results.push(
                leaf.grad(&grads)
                    .expect("a leaf")
                    .cast(FloatDType::F32)
                    .into_data(),
            );
        }
        results
    }

    /// Queries, keys, values and a weighting of the output, [batch, heads, tokens, width].
    fn inputs(shape: [usize; 4], device: &Device, precision: FloatDType) -> [Tensor<4>; 4] {
        [0; 4].map(|_| Tensor::<4>::random(shape, Distribution::Normal(0.0, 1.0), device).cast(precision))
    }

    fn equals_plain_attention_on(
        device: Device,
        shape: [usize; 4],
        precision: FloatDType,
        tolerance: Tolerance<f32>,
    ) {
        let inputs = inputs(shape, &device, precision);
        let ours = output_and_gradients(causal_attention, &inputs);
        let plain = output_and_gradients(plain_attention, &inputs);
        for (name, (ours, plain)) in ["output", "query grad", "key grad", "value grad"]
            .iter()
            .zip(ours.iter().zip(&plain))
        {
            assert_eq!(ours.shape(), plain.shape(), "{name}");
            let values = ours.to_vec::<f32>().unwrap();
            assert!(values.iter().all(|x| x.is_finite()), "{name}: not finite");
            ours.assert_approx_eq::<f32>(plain, tolerance);
        }
    }

    /// Width 16 gives blocks of 16 rows: 37 tokens are blocks of 16, 16 and 5.
    const SHAPES: [[usize; 4]; 3] = [[2, 1, 37, 16], [2, 3, 37, 16], [1, 2, 8, 32]];

    #[test]
    fn equals_plain_attention_and_its_gradients_on_flex() {
        for shape in SHAPES {
            equals_plain_attention_on(
                Device::flex().autodiff(),
                shape,
                FloatDType::F32,
                Tolerance::rel_abs(1e-4, 1e-5),
            );
        }
    }

    // The wgpu device is made asynchronously in the browser (tests/wasm_train.rs).
    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn equals_plain_attention_and_its_gradients_on_wgpu() {
        let device = crate::ops::backend::BackendKind::Wgpu.device().autodiff();
        for shape in SHAPES {
            equals_plain_attention_on(
                device.clone(),
                shape,
                FloatDType::F32,
                Tolerance::rel_abs(1e-4, 1e-5),
            );
        }
    }

    /// In f16 both sides round every op to 11 significant bits: the two orders of rounding
    /// agree to a few units of that, not to f32's 1e-4.
    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn equals_plain_attention_in_f16_on_wgpu() {
        let device = crate::ops::backend::BackendKind::Wgpu.device().autodiff();
        for shape in SHAPES {
            equals_plain_attention_on(
                device.clone(),
                shape,
                FloatDType::F16,
                Tolerance::rel_abs(2e-2, 2e-2),
            );
        }
    }

    /// The first position sees only itself: its output is its own value, whatever the rest.
    #[test]
    fn the_first_position_attends_to_itself_alone() {
        let device = Device::flex();
        let [query, key, value, _] = inputs([1, 2, 20, 16], &device, FloatDType::F32);
        let output = causal_attention(query, key, value.clone());
        output
            .slice([0..1, 0..2, 0..1, 0..16])
            .into_data()
            .assert_approx_eq::<f32>(
                &value.slice([0..1, 0..2, 0..1, 0..16]).into_data(),
                Tolerance::rel_abs(1e-6, 1e-6),
            );
    }
}
