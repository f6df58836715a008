//! The CNN's 2x2 max-pool with stride 2, with a forward of its own on flex.
//!
//! flex's `max_pool2d_with_indices` is a general N-d loop: per output element it computes
//! each window's valid range, divides to find its plane and branches per input element
//! (on the comparison CNN's first pool, longer than that layer's conv: docs/benchmarks.md,
//! "the CNN's conv and pool on flex, op by op"). Here, on flex in f32, each pair of input rows is read
//! once and each 2x2 window is four compares. The values and the indices are those of
//! flex's own pool (the first maximum in row-major window order wins, NaN wins), so
//! backward is flex's `max_pool2d_with_indices_backward` unchanged, and what the op keeps
//! for backward (its input and the indices) is what burn's keeps: the planner's census
//! does not move. Every other backend and precision runs burn's pool.
//!
//! A burn backend extension, like [`crate::ops::relu`].

// burn marks ndarray deprecated in favour of flex; natively it is an opt-in CPU backend.
#![allow(deprecated)]

#[cfg(all(not(target_arch = "wasm32"), feature = "ndarray"))]
use burn::backend::NdArray;
use burn::backend::autodiff::NodeId;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind, unary};
use burn::backend::flex::FlexTensor;
use burn::backend::ops::ModuleOps;
use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::{Autodiff, Backend, DType, Dispatch, Flex, TensorMetadata, get_or_init_device_settings};
use burn::prelude::*;
use burn::tensor::{IntDType, TensorData};
use burn_cubecl::CubeBackend;

const WINDOW: [usize; 2] = [2, 2];
const NO_PADDING: [usize; 2] = [0, 0];
const NO_DILATION: [usize; 2] = [1, 1];

headroom_backend_extension! {
pub trait MaxPool2x2: Backend {
    /// 2x2 windows, stride 2: the maxima and, per maximum, its index within its input
    /// plane (`row * width + column`), as burn's `max_pool2d_with_indices` gives them.
    #[fusion(default)]
    fn max_pool_2x2_with_indices(x: FloatTensor<Self>) -> (FloatTensor<Self>, IntTensor<Self>) {
        let int_dtype = get_or_init_device_settings::<Self>(&x.device()).int_dtype;
        let pooled =
            Self::max_pool2d_with_indices(x, WINDOW, WINDOW, NO_PADDING, NO_DILATION, false, int_dtype);
        (pooled.output, pooled.indices)
    }
}
}

impl MaxPool2x2 for CubeBackend {}
#[cfg(all(not(target_arch = "wasm32"), feature = "ndarray"))]
impl MaxPool2x2 for NdArray {}

impl MaxPool2x2 for Flex {
    fn max_pool_2x2_with_indices(x: FloatTensor<Self>) -> (FloatTensor<Self>, IntTensor<Self>) {
        let int_dtype = get_or_init_device_settings::<Self>(&x.device()).int_dtype;
        let [batch, channels, height, width] = x.shape().dims::<4>();
        let fast = x.dtype() == DType::F32
            && height % 2 == 0
            && width % 2 == 0
            && matches!(int_dtype, IntDType::I64 | IntDType::I32);
        if !fast {
            let pooled =
                Self::max_pool2d_with_indices(x, WINDOW, WINDOW, NO_PADDING, NO_DILATION, false, int_dtype);
            return (pooled.output, pooled.indices);
        }
        let (maxima, indices) = pool_planes(&x.to_contiguous(), height, width);
        let shape = [batch, channels, height / 2, width / 2];
        let indices = match int_dtype {
            IntDType::I32 => TensorData::new(indices, shape),
            _ => TensorData::new(indices.into_iter().map(i64::from).collect(), shape),
        };
        (
            FlexTensor::from_data(TensorData::new(maxima, shape)),
            FlexTensor::from_data(indices),
        )
    }
}

/// The maxima and their in-plane indices of every [height, width] plane of a contiguous
/// f32 tensor, both even; the planes split over threads natively
/// (`platform::for_each_chunk_mut`).
fn pool_planes(x: &FlexTensor, height: usize, width: usize) -> (Vec<f32>, Vec<i32>) {
    let values: &[f32] = x.storage();
    let (plane_in, plane_out) = (height * width, height * width / 4);
    let mut maxima = vec![0.0; values.len() / 4];
    let mut indices = vec![0; values.len() / 4];
    // Each plane's two outputs, as one item to hand out.
    let mut outputs: Vec<(&mut [f32], &mut [i32])> = maxima
        .chunks_mut(plane_out)
        .zip(indices.chunks_mut(plane_out))
        .collect();
    crate::platform::for_each_chunk_mut(&mut outputs, 1, |plane, output| {
        let (maxima, indices) = &mut output[0];
        pool_plane(&values[plane * plane_in..][..plane_in], width, maxima, indices);
    });
    (maxima, indices)
}

/// One plane's 2x2 windows, row by row, into `maxima` and `indices`.
fn pool_plane(plane: &[f32], width: usize, maxima: &mut [f32], indices: &mut [i32]) {
    let out_width = width / 2;
    let out_rows = maxima
        .chunks_exact_mut(out_width)
        .zip(indices.chunks_exact_mut(out_width));
    for (out_row, (maxima, indices)) in out_rows.enumerate() {
        let top = 2 * out_row * width;
        let (upper, lower) = plane[top..top + 2 * width].split_at(width);
        for (out_col, (maximum, index)) in maxima.iter_mut().zip(indices.iter_mut()).enumerate() {
            let col = 2 * out_col;
            // Row-major window order, the order flex's pool visits: a later element
            // replaces the maximum only when strictly greater, or NaN.
            let mut best = (upper[col], top + col);
            for (value, at) in [
                (upper[col + 1], top + col + 1),
                (lower[col], top + width + col),
                (lower[col + 1], top + width + col + 1),
            ] {
                if value > best.0 || value.is_nan() {
                    best = (value, at);
                }
            }
            *maximum = best.0;
            // A plane's index fits an i32: a plane of 2^31 f32 elements is 8 GiB, more
            // than a CPU step here ever holds.
            *index = best.1 as i32;
        }
    }
}

impl<B: MaxPool2x2, C: CheckpointStrategy> MaxPool2x2 for Autodiff<B, C> {
    fn max_pool_2x2_with_indices(x: FloatTensor<Self>) -> (FloatTensor<Self>, IntTensor<Self>) {
        #[derive(Debug)]
        struct MaxPool2x2Backward;

        impl<B: MaxPool2x2> Backward<B, 1> for MaxPool2x2Backward {
            type State = (NodeId, IntTensor<B>);

            fn backward(
                self,
                ops: Ops<Self::State, 1>,
                grads: &mut Gradients,
                checkpointer: &mut Checkpointer,
            ) {
                let (input, indices) = ops.state;
                let input = checkpointer.retrieve_node_output(input);
                unary::<B, _>(ops.parents, ops.node, grads, |grad| {
                    B::max_pool2d_with_indices_backward(
                        input,
                        WINDOW,
                        WINDOW,
                        NO_PADDING,
                        NO_DILATION,
                        false,
                        grad,
                        indices,
                    )
                    .x_grad
                });
            }
        }

        // As burn's max_pool2d: compute-bound, keeping its input and the indices.
        match MaxPool2x2Backward
            .prepare::<C>([x.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let input = prep.checkpoint(&x);
                let (maxima, indices) = B::max_pool_2x2_with_indices(x.into_primitive());
                (prep.finish((input, indices.clone()), maxima), indices)
            }
            OpsKind::UnTracked(prep) => {
                let (maxima, indices) = B::max_pool_2x2_with_indices(x.into_primitive());
                (prep.finish(maxima), indices)
            }
        }
    }
}

/// [batch, channels, h, w] -> [batch, channels, h/2, w/2]: the maximum of each 2x2 window.
pub fn max_pool_2x2(x: Tensor<4>) -> Tensor<4> {
    let (maxima, _indices) = <Dispatch as MaxPool2x2>::max_pool_2x2_with_indices(x.into_dispatch());
    Tensor::from_dispatch(maxima)
}

#[cfg(test)]
mod tests {
    use burn::nn::pool::MaxPool2dConfig;
    use burn::tensor::Distribution;
    // In the browser (wasm-pack test, tests/run-all) these run as wasm-bindgen tests.
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    /// The same maxima and the same input gradient as burn's pool, on inputs with ties (values
    /// whole numbers) so that which of equal maxima wins is checked too: on flex the
    /// pool's own forward runs, on wgpu burn's.
    #[test]
    fn equals_burns_pool_on_flex_ties_included() {
        equals_burns_pool_on(Device::flex().autodiff());
    }

    // The wgpu device is made asynchronously in the browser (tests/wasm_train.rs).
    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn equals_burns_pool_on_wgpu() {
        equals_burns_pool_on(crate::ops::backend::BackendKind::Wgpu.device().autodiff());
    }

    fn equals_burns_pool_on(device: Device) {
        let x = Tensor::<4>::random([3, 5, 8, 6], Distribution::Normal(0.0, 1.0), &device);
        // Whole numbers: most windows hold a maximum twice or more.
        let x = x.round();
        let upstream = Tensor::<4>::random([3, 5, 4, 3], Distribution::Normal(0.0, 1.0), &device);
        let run = |pool: &dyn Fn(Tensor<4>) -> Tensor<4>| {
            let leaf = x.clone().detach().require_grad();
            let output = pool(leaf.clone());
            let grads = (output.clone() * upstream.clone()).sum().backward();
            (output.inner().into_data(), leaf.grad(&grads).unwrap().into_data())
        };
        let burns_pool = MaxPool2dConfig::new([2, 2]).with_strides([2, 2]).init();
        let (ours, our_grad) = run(&max_pool_2x2);
        let (burns, burns_grad) = run(&|x| burns_pool.forward(x));
        ours.assert_eq(&burns, true);
        our_grad.assert_eq(&burns_grad, true);
    }

    /// NaN wins its window, as in flex's pool (and PyTorch's).
    #[test]
    fn nan_wins_its_window_on_flex() {
        let device = Device::flex();
        let x = Tensor::<4>::from_data([[[[1.0, f32::NAN], [3.0, 2.0]]]], &device);
        let pooled: Vec<f32> = max_pool_2x2(x).into_data().to_vec().unwrap();
        assert!(pooled[0].is_nan());
    }
}
