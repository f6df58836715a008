//! Adam's (and AdamW's) step with f32 moments as one kernel on the cubecl backends, on an
//! f32 parameter, or on an f16 one without a master copy (f16-pure): each invocation takes
//! one value, casts it and its gradient up, applies the step in f32 and writes the
//! parameter and the moments over the old ones. An f16 value's gradient is unscaled first
//! (and clipped by a factor the optimizer worked out on the device, where the run clips)
//! and its result rounded back to f16 stochastically.
//!
//! Why: as tensor ops burn's f32 step launches about twelve kernels a parameter and makes a
//! new parameter and two new moments beside the old ones. On a GPU a small model's step is
//! bound by launches (issue 43: the MLP 784-128-10 ran at 0.31x PyTorch's speed on an
//! H200). The f16-pure step as tensor ops held f32 copies of the parameter, its gradient,
//! the updated value and the rounding's hash and noise at once, and launched some forty
//! kernels: on the MLP 784-128-10 on lavapipe it reserved 1.13x what f32 does and took 2.5x
//! its step time (docs/benchmarks.md, "8-bit Adam and f16-pure Adam as one kernel each").
//!
//! The arithmetic is burn's step and `train::precision::stochastic_round_f16_from`'s
//! rounding, operation for operation, with f16's step at each value exact on both paths,
//! so the kernel leaves the bits the tensor ops leave (tested on lavapipe) and a resumed
//! run rounds as the first did.

use burn::backend::Backend;
use burn::backend::cubecl::dtype_to_storage_type;
use burn::backend::tensor::FloatTensor;
use burn_cubecl::CubeBackend;
use burn_cubecl::cubecl;
use burn_cubecl::cubecl::prelude::*;
use burn_cubecl::tensor::CubeTensor;

use super::adam8::{Adam8Hyper, AdamRule, adam_value, group_index, wrapped_grid, writable};

/// Invocations per workgroup, one value each.
const UNITS: usize = 256;

/// Adam's constants for one step, and for an f16 parameter its rounding.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MomentStep {
    pub adam: Adam8Hyper,
    /// `None` on an f32 parameter, which is stepped as burn steps it.
    pub rounding: Option<Rounding>,
}

/// What f16-pure's step needs beside Adam's constants: the gradient's unscaling (its loss
/// scale), whether the clipping factor applies, and the rounding's seed
/// (`train::optimizer::rounding_seed`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rounding {
    pub inverse_loss_scale: f32,
    pub clips: bool,
    pub seed: u32,
}

#[burn::backend::backend_extension(Cube, Fusion: cfg(feature = "fusion"))]
pub trait AdamStep: Backend {
    /// One step: the parameter and the two moments after it. `factor` (one f32 value) is
    /// read only where `step.rounding` clips.
    #[fusion(meta = |param, _grad, m, v, _factor, _step| (param.clone(), m.clone(), v.clone()))]
    fn adam_step(
        param: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        m: FloatTensor<Self>,
        v: FloatTensor<Self>,
        factor: FloatTensor<Self>,
        step: MomentStep,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>);
}

impl AdamStep for CubeBackend {
    fn adam_step(
        param: CubeTensor,
        grad: CubeTensor,
        m: CubeTensor,
        v: CubeTensor,
        factor: CubeTensor,
        step: MomentStep,
    ) -> (CubeTensor, CubeTensor, CubeTensor) {
        let elements = param.meta.shape().num_elements();
        let client = param.client.clone();
        let (value, float) = (param.dtype, m.dtype);
        let state = (writable(param), writable(m), writable(v));
        let cube_count = wrapped_grid(elements.div_ceil(UNITS));
        let rounding = step.rounding.unwrap_or(Rounding {
            inverse_loss_scale: 1.0,
            clips: false,
            seed: 0,
        });
        // Safety: every index is checked against the parameter's length in the kernel.
        unsafe {
            adam_kernel::launch_unchecked(
                &client,
                cube_count,
                CubeDim::new_1d(UNITS as u32),
                state.0.clone().into_tensor_arg(),
                grad.into_tensor_arg(),
                state.1.clone().into_tensor_arg(),
                state.2.clone().into_tensor_arg(),
                factor.into_tensor_arg(),
                step.adam.rule(),
                rounding.inverse_loss_scale,
                rounding.seed,
                step.rounding.is_some(),
                rounding.clips,
                [dtype_to_storage_type(float), dtype_to_storage_type(value)],
            )
        };
        state
    }
}

/// xorshift rounds per hash, and the hash's 23 bits that make the noise: the kernel's and
/// `train::precision`'s tensor ops'.
pub const HASH_ROUNDS: usize = 4;
pub const MANTISSA: u32 = 0x7f_ffff;
/// f16's normal exponents: below the least the step stays 2^-24 (the subnormals').
pub const F16_MIN_EXPONENT: i32 = -14;
pub const F16_MAX_EXPONENT: i32 = 15;

/// `value` (f32) rounded to a neighbouring f16 value, up with probability (value - below) /
/// step, the draw a hash of `index` and `seed`: `train::precision::stochastic_round_f16_from`,
/// operation for operation but for the step, read here from the bits (the hash in i32 as
/// wgpu's int tensors are, so its right shifts are arithmetic).
#[cube]
fn stochastic_round<F: Float>(value: F, index: u32, seed: u32) -> F {
    let mut hash = i32::cast_from(index) ^ i32::cast_from(seed);
    #[unroll]
    for _ in 0..HASH_ROUNDS {
        hash ^= hash << 13i32;
        hash ^= hash >> 17i32;
        hash ^= hash << 5i32;
    }
    let bits = (hash >> 9i32) & i32::cast_from(MANTISSA);
    let uniform = F::cast_from(bits) / F::cast_from(MANTISSA + 1);
    // f16's step at the value, 2^(its exponent - 10), exactly: the exponent read from the
    // f32 bits (the tensor ops reach the same one by a corrected logarithm, `f16_step`).
    let bits = u32::reinterpret(F::abs(value));
    let exponent = i32::cast_from((bits >> 23u32) & 255u32) - 127i32;
    let exponent = exponent.clamp(F16_MIN_EXPONENT, F16_MAX_EXPONENT);
    let step = F::reinterpret(u32::cast_from(exponent - 10i32 + 127i32) << 23u32);
    let below = F::floor(value / step) * step;
    let up = (value - below) / step;
    // Added as 0 or 1 times the step, as the tensor ops do: `below + 0` turns -0 into +0.
    let rounded_up = F::cast_from(u32::cast_from(uniform < up));
    below + rounded_up * step
}

/// One value's step; `rounds` (an f16 parameter) unscales its gradient, clips it by
/// `factor[0]` where `clips`, and rounds the result stochastically, else the value is
/// stepped as burn steps it.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
fn adam_kernel<F: Float, H: Float>(
    param: &mut Tensor<H>,
    grad: &Tensor<H>,
    m: &mut Tensor<F>,
    v: &mut Tensor<F>,
    factor: &Tensor<F>,
    rule: &AdamRule,
    inverse_loss_scale: f32,
    seed: u32,
    #[comptime] rounds: bool,
    #[comptime] clips: bool,
    #[define(F, H)] _dtypes: [ElemType; 2],
) {
    let at = group_index() * CUBE_DIM_X as usize + UNIT_POS_X as usize;
    if at >= param.len() {
        terminate!();
    }
    let p = F::cast_from(param[at]);
    let mut g = F::cast_from(grad[at]);
    if rounds {
        g *= F::cast_from(inverse_loss_scale);
        if clips {
            g *= factor[0];
        }
    }
    let stepped = adam_value::<F>(p, g, m[at], v[at], rule);
    m[at] = stepped.m;
    v[at] = stepped.v;
    if rounds {
        param[at] = H::cast_from(stochastic_round::<F>(stepped.param, at as u32, seed));
    } else {
        param[at] = H::cast_from(stepped.param);
    }
}

/// One step of Adam on `param` (flattened; f32, or f16 with `step.rounding`) with f32
/// moments `m` and `v` (zeros before the first step): the parameter, `m` and `v` after it.
/// `clip` is the clipping factor (one value) where the rounding clips. Only where
/// [`super::adam8::runs_on`] the parameter's device.
pub fn adam_step(
    param: burn::Tensor<1>,
    grad: burn::Tensor<1>,
    m: burn::Tensor<1>,
    v: burn::Tensor<1>,
    clip: Option<burn::Tensor<1>>,
    step: MomentStep,
) -> (burn::Tensor<1>, burn::Tensor<1>, burn::Tensor<1>) {
    use burn::Tensor;
    use burn::backend::Dispatch;
    debug_assert_eq!(clip.is_some(), step.rounding.is_some_and(|r| r.clips));
    // Unread where nothing clips: a value no kernel fills (a binding cannot be left out).
    let factor = clip.unwrap_or_else(|| Tensor::empty([1], &param.device()));
    let (param, m, v) = <Dispatch as AdamStep>::adam_step(
        param.into_dispatch(),
        grad.into_dispatch(),
        m.into_dispatch(),
        v.into_dispatch(),
        factor.into_dispatch(),
        step,
    );
    (
        Tensor::from_dispatch(param),
        Tensor::from_dispatch(m),
        Tensor::from_dispatch(v),
    )
}
