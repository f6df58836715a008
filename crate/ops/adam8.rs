//! Adam's (and AdamW's) step on moments kept in 8 bits, as one kernel on the cubecl
//! backends: each workgroup takes one block of 256 values, decodes its moments, updates them
//! and the parameter, finds the block's new scales and encodes the moments again, with no
//! f32 copy of a moment in memory.
//!
//! Why: the same step as tensor ops (`train::quantize`, which flex and the page's CPU
//! fallback still run) launches some sixty kernels a chunk (a gather per decoded value, an
//! eight-step search of gathers per encoded one) and keeps several f32 copies of the chunk
//! alive at once. That made 8-bit moments cost 1.18x f32's step time on lavapipe, and on the
//! small MLP their temporaries overflowed the page f32 fits in (docs/benchmarks.md, "the
//! levers' own on lavapipe"). bitsandbytes' 8-bit Adam is one fused kernel for the same
//! reasons.
//!
//! The arithmetic is burn's `Adam`/`AdamW` step, operation for operation in f32, and the
//! codes are the ones `train::quantize` writes (the nearest map value, found by the same
//! binary search of midpoints), so a state saved by one path is read by the other.

use burn::backend::Backend;
use burn::backend::cubecl::dtype_to_storage_type;
use burn::backend::tensor::{FloatTensor, IntTensor};
use burn_cubecl::CubeBackend;
use burn_cubecl::cubecl;
use burn_cubecl::cubecl::prelude::*;
use burn_cubecl::tensor::CubeTensor;

use crate::settings::QUANT_BLOCK;

/// Invocations per block: four values (one packed word) each.
const UNITS: usize = QUANT_BLOCK / 4;

/// Workgroups along x before the grid wraps into y (WebGPU's per-dimension minimum limit:
/// a parameter of more than 16.7 M values wraps). Two in unit tests, so that their small
/// parameters wrap too.
const GRID_X: usize = if cfg!(test) { 2 } else { 65_535 };

/// The step's constants, worked out on the host as burn works them out: its scalars are
/// these f32 values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Adam8Hyper {
    pub beta_1: f32,
    pub beta_2: f32,
    pub correction: Correction,
    pub learning_rate: f32,
    pub decay: Decay,
}

/// How the moments' bias is corrected: burn's Adam and AdamW do it in different orders.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Correction {
    /// Adam's `m * combined / (sqrt(v) + epsilon)`, `combined = sqrt(1 - beta_2^t) / (1 -
    /// beta_1^t)` and epsilon already times `sqrt(1 - beta_2^t)`.
    Combined { combined: f32, epsilon: f32 },
    /// AdamW's `(m / first) / (sqrt(v / second) + epsilon)`, `first = 1 - beta_1^t`,
    /// `second = 1 - beta_2^t`.
    Separate { first: f32, second: f32, epsilon: f32 },
}

/// Adam's weight decay (added to the gradient) or AdamW's (the parameter scaled down).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Decay {
    None,
    /// `grad + penalty * param`.
    Coupled(f32),
    /// `param * factor` before the step, `factor = 1 - learning_rate * weight_decay`.
    Decoupled(f32),
}

/// Where each part of the maps tensor starts: the signed map's 256 values and 255
/// midpoints, then the unsigned map's. One tensor for the four: WebGPU guarantees a kernel
/// only 8 storage buffers.
pub const SIGNED_VALUES: usize = 0;
pub const SIGNED_MIDPOINTS: usize = 256;
pub const UNSIGNED_VALUES: usize = 511;
pub const UNSIGNED_MIDPOINTS: usize = 767;
/// The maps tensor's length.
pub const MAPS: usize = 1022;

#[burn::backend::backend_extension(Cube, Fusion: cfg(feature = "fusion"))]
pub trait Adam8Step: Backend {
    /// One step: the parameter and the two moments' words and scales after it.
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    #[fusion(meta = |param, _grad, m_words, m_scales, v_words, v_scales, _maps, _hyper| (
        param.clone(), m_words.clone(), m_scales.clone(), v_words.clone(), v_scales.clone()
    ))]
    fn adam8_step(
        param: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        m_words: IntTensor<Self>,
        m_scales: FloatTensor<Self>,
        v_words: IntTensor<Self>,
        v_scales: FloatTensor<Self>,
        maps: FloatTensor<Self>,
        hyper: Adam8Hyper,
    ) -> (
        FloatTensor<Self>,
        IntTensor<Self>,
        FloatTensor<Self>,
        IntTensor<Self>,
        FloatTensor<Self>,
    );
}

/// The step's constants as the kernels read them (WGSL has no enums): one launch argument.
#[derive(CubeLaunch, CubeType)]
pub struct AdamRule {
    beta_1: f32,
    beta_2: f32,
    /// 0 Adam's correction (`first` is `combined`), 1 AdamW's.
    separate: u32,
    first: f32,
    second: f32,
    epsilon: f32,
    learning_rate: f32,
    /// 0 none, 1 Adam's (coupled: `decay` is the penalty), 2 AdamW's (the factor).
    decay_kind: u32,
    decay: f32,
}

impl Adam8Hyper {
    /// The kernels' launch argument for these constants.
    pub(super) fn rule(&self) -> AdamRuleLaunch {
        let (decay_kind, decay) = match self.decay {
            Decay::None => (0, 0.0),
            Decay::Coupled(penalty) => (1, penalty),
            Decay::Decoupled(factor) => (2, factor),
        };
        let (separate, first, second, epsilon) = match self.correction {
            Correction::Combined { combined, epsilon } => (0, combined, 1.0, epsilon),
            Correction::Separate {
                first,
                second,
                epsilon,
            } => (1, first, second, epsilon),
        };
        AdamRuleLaunch::new(
            self.beta_1,
            self.beta_2,
            separate,
            first,
            second,
            epsilon,
            self.learning_rate,
            decay_kind,
            decay,
        )
    }
}

/// One value's parameter and moments after the step.
#[derive(CubeType)]
pub(super) struct Stepped<F: Float> {
    pub param: F,
    pub m: F,
    pub v: F,
}

/// burn's Adam or AdamW step of one value `p` with gradient `g` and moments `m`, `v`,
/// operation for operation in the order burn's tensor ops take (the kernels leave their
/// bits): both kernels step through this one.
#[cube]
pub(super) fn adam_value<F: Float>(p: F, g: F, m: F, v: F, rule: &AdamRule) -> Stepped<F> {
    let mut g = g;
    if rule.decay_kind == 1 {
        g = p * F::cast_from(rule.decay) + g;
    }
    // burn's scalars: `1 - beta` is worked out in f32 on the host as here.
    let m = m * F::cast_from(rule.beta_1) + g * F::cast_from(1.0f32 - rule.beta_1);
    let v = v * F::cast_from(rule.beta_2) + g * g * F::cast_from(1.0f32 - rule.beta_2);
    let epsilon = F::cast_from(rule.epsilon);
    let mut step = m * F::cast_from(rule.first) / (F::sqrt(v) + epsilon);
    if rule.separate == 1 {
        step = m / F::cast_from(rule.first) / (F::sqrt(v / F::cast_from(rule.second)) + epsilon);
    }
    let mut kept = p;
    if rule.decay_kind == 2 {
        kept = p * F::cast_from(rule.decay);
    }
    Stepped::<F> {
        param: kept - step * F::cast_from(rule.learning_rate),
        m,
        v,
    }
}

/// A launch of `groups` workgroups, the grid wrapped into y past [`GRID_X`] along x, and one
/// workgroup at least (a parameter without values launches one that stops at once).
pub(super) fn wrapped_grid(groups: usize) -> CubeCount {
    let groups = groups.max(1);
    let x = groups.min(GRID_X);
    CubeCount::Static(x as u32, groups.div_ceil(x) as u32, 1)
}

/// This workgroup's place in a [`wrapped_grid`].
#[cube]
pub(super) fn group_index() -> usize {
    (CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X) as usize
}

/// `tensor` itself where the kernel may write over it (nothing else holds it, the usual
/// case: the optimizer hands over its only reference), else a copy of it.
pub(super) fn writable(tensor: CubeTensor) -> CubeTensor {
    match tensor.can_mut() && tensor.is_contiguous() {
        true => tensor,
        false => tensor.copy(),
    }
}

impl Adam8Step for CubeBackend {
    #[allow(clippy::too_many_arguments)]
    fn adam8_step(
        param: CubeTensor,
        grad: CubeTensor,
        m_words: CubeTensor,
        m_scales: CubeTensor,
        v_words: CubeTensor,
        v_scales: CubeTensor,
        maps: CubeTensor,
        hyper: Adam8Hyper,
    ) -> (CubeTensor, CubeTensor, CubeTensor, CubeTensor, CubeTensor) {
        let blocks = m_scales.meta.shape().num_elements();
        let client = param.client.clone();
        let (float, int) = (param.dtype, m_words.dtype);
        // The step is written over its inputs: separate outputs would take the kernel past
        // WebGPU's 8 storage buffers.
        let state = (
            writable(param),
            writable(m_words),
            writable(m_scales),
            writable(v_words),
            writable(v_scales),
        );
        let cube_count = wrapped_grid(blocks);
        // Safety: every index is checked against its tensor's length in the kernel (the
        // values past the parameter's end are the last block's padding), and the
        // workgroups past the last block stop before reading anything.
        unsafe {
            adam8_kernel::launch_unchecked(
                &client,
                cube_count,
                CubeDim::new_1d(UNITS as u32),
                state.0.clone().into_tensor_arg(),
                grad.into_tensor_arg(),
                state.1.clone().into_tensor_arg(),
                state.2.clone().into_tensor_arg(),
                state.3.clone().into_tensor_arg(),
                state.4.clone().into_tensor_arg(),
                maps.into_tensor_arg(),
                hyper.rule(),
                blocks as u32,
                [dtype_to_storage_type(float), dtype_to_storage_type(int)],
            )
        };
        state
    }
}

/// The code of the map value nearest `normalized`: how many of the 255 midpoints (from
/// `maps[at]` on) lie below it, found bit by bit from the top
/// (`train::quantize::Codebook::encode`'s search).
#[cube]
fn encode<F: Float>(normalized: F, maps: &Tensor<F>, at: usize) -> u32 {
    let mut code = 0u32;
    #[unroll]
    for bit in 0..8u32 {
        let candidate = code + (1u32 << (7 - bit));
        if normalized > maps[at + (candidate - 1) as usize] {
            code = candidate;
        }
    }
    code
}

#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
fn adam8_kernel<F: Float, I: Int>(
    param: &mut Tensor<F>,
    grad: &Tensor<F>,
    m_words: &mut Tensor<I>,
    m_scales: &mut Tensor<F>,
    v_words: &mut Tensor<I>,
    v_scales: &mut Tensor<F>,
    maps: &Tensor<F>,
    rule: &AdamRule,
    blocks: u32,
    #[define(F, I)] _dtypes: [ElemType; 2],
) {
    let block = group_index();
    // The same for every invocation of a workgroup, so none is left at the barrier below.
    if block >= blocks as usize {
        terminate!();
    }
    let unit = UNIT_POS_X as usize;
    let word = block * UNITS + unit;
    let elements = param.len();
    let old_m_scale = m_scales[block];
    let old_v_scale = v_scales[block];
    let old_m = m_words[word];
    let old_v = v_words[word];
    let mut m = Array::<F>::new(4usize);
    let mut v = Array::<F>::new(4usize);
    let mut m_max = F::new(0.0);
    let mut v_max = F::new(0.0);
    #[unroll]
    for k in 0..4usize {
        let at = word * 4 + k;
        m[k] = F::new(0.0);
        v[k] = F::new(0.0);
        if at < elements {
            let shift = I::cast_from(8 * k);
            let m_code = usize::cast_from((old_m >> shift) & I::cast_from(255u32));
            let v_code = usize::cast_from((old_v >> shift) & I::cast_from(255u32));
            let m_old = maps[SIGNED_VALUES + m_code] * old_m_scale;
            let v_old = maps[UNSIGNED_VALUES + v_code] * old_v_scale;
            let stepped = adam_value::<F>(param[at], grad[at], m_old, v_old, rule);
            param[at] = stepped.param;
            let (m_new, v_new) = (stepped.m, stepped.v);
            m[k] = m_new;
            v[k] = v_new;
            m_max = F::max(m_max, F::abs(m_new));
            v_max = F::max(v_max, F::abs(v_new));
        }
    }

    let mut shared = Shared::<[F]>::new_slice(2 * UNITS);
    shared[unit] = m_max;
    shared[UNITS + unit] = v_max;
    // Every invocation has read the block's old scales by now: they may be written over.
    sync_cube();
    // Every invocation reads all the partial maxima: one barrier, where a tree needs six.
    let mut m_scale = F::new(0.0);
    let mut v_scale = F::new(0.0);
    for other in 0..UNITS {
        m_scale = F::max(m_scale, shared[other]);
        v_scale = F::max(v_scale, shared[UNITS + other]);
    }
    if unit == 0 {
        m_scales[block] = m_scale;
        v_scales[block] = v_scale;
    }
    // A block of zeros divides by the smallest normal float rather than by zero.
    let tiny = F::new(f32::MIN_POSITIVE);
    let m_divisor = F::max(m_scale, tiny);
    let v_divisor = F::max(v_scale, tiny);
    let mut m_word = 0u32;
    let mut v_word = 0u32;
    #[unroll]
    for k in 0..4usize {
        let shift = (8 * k) as u32;
        m_word |= encode::<F>(m[k] / m_divisor, maps, SIGNED_MIDPOINTS) << shift;
        v_word |= encode::<F>(v[k] / v_divisor, maps, UNSIGNED_MIDPOINTS) << shift;
    }
    m_words[word] = I::cast_from(m_word);
    v_words[word] = I::cast_from(v_word);
}

/// The maps tensor the kernel reads, laid out as [`SIGNED_VALUES`] and the rest say: each
/// map as its 256 values and the 255 midpoints its encoder searches, the signed map first.
pub fn maps(signed: [&burn::Tensor<1>; 2], unsigned: [&burn::Tensor<1>; 2]) -> burn::Tensor<1> {
    let parts = [signed, unsigned].into_iter().flatten().cloned().collect();
    let maps = burn::Tensor::cat(parts, 0);
    debug_assert_eq!(maps.shape().num_elements(), MAPS);
    maps
}

/// A moment's packed codes (four a word) and its block scales.
pub type Packed = (burn::Tensor<1, burn::tensor::Int>, burn::Tensor<1>);

/// Whether the optimizer's kernels ([`adam8_step`], `adam`) run on `device`: the
/// cubecl backends (wgpu natively and in the page, CUDA). Elsewhere (flex, ndarray) the
/// steps stay tensor ops.
pub fn runs_on(device: &burn::prelude::Device) -> bool {
    kernel_enabled() && on_cube(device)
}

/// Whether the optimizer's kernels are on: `HEADROOM_OPTIMIZER_KERNELS=0` keeps the steps
/// as tensor ops on every backend, to measure one against the other.
fn kernel_enabled() -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENABLED.get_or_init(|| std::env::var("HEADROOM_OPTIMIZER_KERNELS").map_or(true, |v| v != "0"))
}

fn on_cube(device: &burn::prelude::Device) -> bool {
    matches!(
        device.as_dispatch().clone().inner(),
        burn::backend::DispatchDevice::Cube(_)
    )
}

/// One step of Adam on `param` (f32, flattened) from the moments `m` and `v`, with `maps`
/// the two maps laid out as [`MAPS`] says: the parameter, `m` and `v` after it. Only where
/// [`runs_on`] the parameter's device.
pub fn adam8_step(
    param: burn::Tensor<1>,
    grad: burn::Tensor<1>,
    m: Packed,
    v: Packed,
    maps: &burn::Tensor<1>,
    hyper: Adam8Hyper,
) -> (burn::Tensor<1>, Packed, Packed) {
    use burn::Tensor;
    use burn::backend::Dispatch;
    let (param, m_words, m_scales, v_words, v_scales) = <Dispatch as Adam8Step>::adam8_step(
        param.into_dispatch(),
        grad.into_dispatch(),
        m.0.into_dispatch(),
        m.1.into_dispatch(),
        v.0.into_dispatch(),
        v.1.into_dispatch(),
        maps.clone().into_dispatch(),
        hyper,
    );
    (
        Tensor::from_dispatch(param),
        (Tensor::from_dispatch(m_words), Tensor::from_dispatch(m_scales)),
        (Tensor::from_dispatch(v_words), Tensor::from_dispatch(v_scales)),
    )
}
