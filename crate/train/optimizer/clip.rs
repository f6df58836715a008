//! burn's gradient clipping by norm (`GradientClipping::Norm`: the norm in f32, a factor of
//! `threshold / (norm + f32::MIN_POSITIVE)` at most 1), with the norm summed in a fixed
//! order. burn's `sum` of a whole tensor on the cubecl backends adds its workgroups' partial
//! sums by atomics, in the order they finish: on lavapipe two runs of the MLP 784-128-10
//! with `--clip-norm 0.5` ended a unit of the last place apart by step 30 (0.83920705 and
//! 0.839207), so a clipped run neither repeated nor resumed bit for bit. `sum_dim` reduces
//! each output within one workgroup, in an order fixed by the shapes. The squares are
//! summed chunk by chunk, as a chunked update sums them (`chunked`), whether or not the
//! update is chunked: both clip alike, bit for bit.

use burn::prelude::*;
use burn::tensor::FloatDType;

/// Values summed in one row of the two-level sum: rows are summed side by side, then
/// their sums.
const ROW: usize = 4096;

/// The sum of the flattened `values`, in an order fixed by their count.
fn ordered_sum(values: Tensor<1>) -> Tensor<1> {
    let count = values.shape().num_elements();
    if count <= ROW {
        return values.sum_dim(0);
    }
    let whole = count - count % ROW;
    let rows = whole / ROW;
    let sums = values
        .clone()
        .slice(0..whole)
        .reshape([rows, ROW])
        .sum_dim(1)
        .reshape([rows]);
    let sum = ordered_sum(sums);
    match whole < count {
        true => sum + values.slice(whole..count).sum_dim(0),
        false => sum,
    }
}

/// The sum of `grad`'s squares in f32 (an f16 one's would overflow past a norm of ~256).
pub(super) fn sum_of_squares<const D: usize>(grad: Tensor<D>) -> Tensor<1> {
    let count = grad.shape().num_elements();
    ordered_sum(grad.cast(FloatDType::F32).reshape([count]).square())
}

/// burn's clipping factor for a gradient whose squares sum to `squares`.
pub(super) fn factor(squares: Tensor<1>, threshold: f32) -> Tensor<1> {
    let norm = squares.sqrt();
    (norm.add_scalar(f32::MIN_POSITIVE).recip() * threshold).clamp_max(1.0)
}
