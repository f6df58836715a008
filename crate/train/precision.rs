//! Mixed precision: f16 copies of the f32 master weights for forward and backward,
//! gradients brought back to f32 and unscaled, and a loss scale that adapts to overflow.
//! Without the master copy (`Precision::F16Pure`), the f16 parameters are the only ones,
//! and each update is rounded back to f16 stochastically.

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::tensor::FloatDType;

use crate::model::Model;
use crate::ops::adam::{self, HASH_ROUNDS};

/// `f` applied outside autodiff. A tracked `t` gives a fresh leaf with its checkpointing
/// (an op recorded in the graph would not be a leaf, and leaves are what gradients land
/// on); an untracked one (evaluation) stays untracked.
fn outside_autodiff<const D: usize>(t: Tensor<D>, f: impl FnOnce(Tensor<D>) -> Tensor<D>) -> Tensor<D> {
    if !t.is_autodiff() {
        return f(t);
    }
    let strategy = t.gradient_checkpointing_strategy();
    let result = f(t.inner()).autodiff();
    match strategy {
        Some(strategy) => result.with_gradient_checkpointing_strategy(strategy),
        None => result,
    }
    .require_grad()
}

struct CastTo(FloatDType);

impl ModuleMapper for CastTo {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        // A fresh leaf under the master's id, so its gradients land where the optimizer
        // looks for the master's.
        param.map(|t| outside_autodiff(t, |t| t.cast(self.0)))
    }
}

/// The model's parameters as f16 leaves with the master weights' ids.
pub fn half_copy(model: &Model) -> Model {
    model.clone().map(&mut CastTo(FloatDType::F16))
}

/// The model's parameters as f32 leaves with the same ids.
pub fn full_copy(model: &Model) -> Model {
    model.clone().map(&mut CastTo(FloatDType::F32))
}

struct ToMaster<'a> {
    half: &'a mut GradientsParams,
    master: GradientsParams,
    inverse_scale: f32,
}

impl ModuleVisitor for ToMaster<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(grad) = self.half.remove::<D>(param.id) {
            let grad = grad.cast(FloatDType::F32).mul_scalar(self.inverse_scale);
            self.master.register(param.id, grad);
        }
    }
}

/// f16 gradients of a scaled loss, as f32 gradients of the true loss.
pub fn to_master(model: &Model, mut half: GradientsParams, loss_scale: f32) -> GradientsParams {
    let mut visitor = ToMaster {
        half: &mut half,
        master: GradientsParams::new(),
        inverse_scale: 1.0 / loss_scale,
    };
    model.visit(&mut visitor);
    visitor.master
}

struct AbsSum<'a> {
    grads: &'a GradientsParams,
    sum: Option<Tensor<1>>,
}

impl ModuleVisitor for AbsSum<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(grad) = self.grads.get::<D>(param.id) {
            // In f32: f16 gradients (f16-pure) could sum past f16's range where none
            // overflowed.
            let part = grad.abs().cast(FloatDType::F32).sum();
            self.sum = Some(match self.sum.take() {
                Some(sum) => sum + part,
                None => part,
            });
        }
    }
}

/// The sum of every gradient's magnitude, on the device: infinite or NaN exactly when some
/// gradient overflowed, so one scalar read answers for the whole model.
pub fn gradient_magnitude(model: &Model, grads: &GradientsParams) -> Option<Tensor<1>> {
    let mut visitor = AbsSum { grads, sum: None };
    model.visit(&mut visitor);
    visitor.sum
}

/// `values` (f32) rounded to f16 stochastically: down to the f16 value below or up to the
/// one above, up with probability (value - below) / step, so that the expected result is
/// the value itself and an update far below f16's step still moves a parameter on average
/// (Gupta et al., "Deep Learning with Limited Numerical Precision", 2015). The draw is a
/// hash of each element's index and `seed` in bitwise ops only (xorshift): the same on
/// every run on a backend, so a resumed run rounds as the first one did.
pub fn stochastic_round_f16<const D: usize>(values: Tensor<D>, seed: u32) -> Tensor<D> {
    stochastic_round_f16_from(values, seed, 0)
}

/// [`stochastic_round_f16`] of a slice of a larger tensor that starts at element `first`:
/// each element draws what it would draw in the whole, so an update made in chunks rounds
/// as one made at once.
pub fn stochastic_round_f16_from<const D: usize>(values: Tensor<D>, seed: u32, first: usize) -> Tensor<D> {
    let shape = values.shape();
    let device = values.device();
    let first = first as i64;
    let count = shape.num_elements() as i64;
    // The seed as an i32: a scalar must fit every backend's int type (wgpu's is i32).
    let seed = i64::from(seed as i32);
    let mut hash = Tensor::<1, Int>::arange(first..first + count, &device).bitwise_xor_scalar(seed);
    // Neighbouring indices differ in few bits: rounds enough to spread them, and the high
    // bits taken, which the left shifts have mixed most.
    for _ in 0..HASH_ROUNDS {
        hash = hash
            .clone()
            .bitwise_xor(hash.clone().bitwise_left_shift_scalar(13));
        hash = hash
            .clone()
            .bitwise_xor(hash.clone().bitwise_right_shift_scalar(17));
        hash = hash
            .clone()
            .bitwise_xor(hash.clone().bitwise_left_shift_scalar(5));
    }
    let uniform = hash
        .bitwise_right_shift_scalar(9)
        .bitwise_and_scalar(MANTISSA)
        .float()
        .div_scalar((MANTISSA + 1) as f32)
        .reshape(shape);
    let step = f16_step(values.clone());
    // Exact in f32: the step is a power of two.
    let below = values.clone().div(step.clone()).floor().mul(step.clone());
    let up = values.sub(below.clone()).div(step.clone());
    let rounded_up = uniform.lower(up).float();
    (below + rounded_up * step).cast(FloatDType::F16)
}

/// f16's step at each of `values`, exactly: 2^(its exponent - 10), 2^-24 among the
/// subnormals. The exponent comes from a logarithm, which can land one off near a power of
/// two, so it is checked against that power of two and corrected; and `exp` gives a power of
/// two a few units of the last place off, so each goes through f16 (which holds 2^-24 ..
/// 2^15 exactly) to land on it. An inexact step moved values already on f16: a probe's
/// step at a vanishing rate changed an f16-pure GPT's weights (docs/benchmarks.md, "8-bit
/// Adam and f16-pure Adam as one kernel each"). `ops::adam` reads the same exponent
/// from the bits.
fn f16_step<const D: usize>(values: Tensor<D>) -> Tensor<D> {
    let ln_2 = std::f32::consts::LN_2;
    let power_of_two = |exponent: Tensor<D>| {
        exponent
            .mul_scalar(ln_2)
            .exp()
            .cast(FloatDType::F16)
            .cast(FloatDType::F32)
    };
    let magnitude = values.abs();
    let estimate = magnitude
        .clone()
        .log()
        .div_scalar(ln_2)
        .floor()
        .clamp(F16_MIN_EXPONENT, F16_MAX_EXPONENT);
    let power = power_of_two(estimate.clone());
    let exponent = estimate
        + magnitude
            .clone()
            .greater_equal(power.clone().mul_scalar(2.0))
            .float()
        - magnitude.lower(power).float();
    power_of_two(
        exponent
            .clamp(F16_MIN_EXPONENT, F16_MAX_EXPONENT)
            .sub_scalar(10.0),
    )
}

/// f16's normal exponents: below the least the step stays 2^-24 (the subnormals').
const F16_MIN_EXPONENT: f32 = adam::F16_MIN_EXPONENT as f32;
const F16_MAX_EXPONENT: f32 = adam::F16_MAX_EXPONENT as f32;

/// 23 of the hash's bits make the noise (as an i64: a scalar of the int tensors).
const MANTISSA: i64 = adam::MANTISSA as i64;

/// Dynamic loss scaling: start high, halve on overflow (the step is skipped), double after
/// a run of clean steps.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct LossScaler {
    scale: f32,
    clean_steps: u32,
    growth_interval: u32,
}

impl LossScaler {
    const INITIAL: f32 = 65536.0;
    const MIN: f32 = 1.0;
    const MAX: f32 = 16_777_216.0;

    pub fn new(growth_interval: u32) -> Self {
        LossScaler {
            scale: Self::INITIAL,
            clean_steps: 0,
            growth_interval,
        }
    }

    pub fn scale(&self) -> f32 {
        self.scale
    }

    /// Records a step's outcome; returns whether the update may be applied.
    pub fn update(&mut self, overflowed: bool) -> bool {
        if overflowed {
            self.scale = (self.scale / 2.0).max(Self::MIN);
            self.clean_steps = 0;
            return false;
        }
        self.clean_steps += 1;
        if self.clean_steps >= self.growth_interval {
            self.scale = (self.scale * 2.0).min(Self::MAX);
            self.clean_steps = 0;
        }
        true
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod rounding_tests {
    use super::*;
    use burn::tensor::f16;

    /// Every value already on f16 stays where it is, whatever the draw: every third f16
    /// below infinity, both signs, subnormals and zero, and every power of two f16 holds.
    /// With the step from an uncorrected logarithm and exponential, values moved: a probe's
    /// step at a vanishing rate changed an f16-pure GPT's weights.
    #[test]
    fn a_value_already_on_f16_stays_where_it_is() {
        let device = Device::flex();
        let mut values: Vec<f32> = (0u16..0x7c00)
            .step_by(3)
            .map(|bits| f16::from_bits(bits).to_f32())
            .chain((-24..=15).map(|e| 2f32.powi(e)))
            .collect();
        values.extend(values.clone().iter().map(|v| -v));
        let count = values.len();
        let tensor = Tensor::<1>::from_data(TensorData::new(values.clone(), [count]), &device);
        for seed in [1, 2, 3] {
            let rounded = stochastic_round_f16(tensor.clone(), seed)
                .cast(FloatDType::F32)
                .into_data()
                .try_to_vec::<f32>()
                .unwrap();
            let moved: Vec<(f32, f32)> = values
                .iter()
                .zip(&rounded)
                .filter(|(v, r)| v.to_bits() != r.to_bits() && !(**v == 0.0 && **r == 0.0))
                .map(|(&v, &r)| (v, r))
                .take(5)
                .collect();
            assert!(moved.is_empty(), "seed {seed}: {moved:?}");
        }
    }

    /// 4096 copies of values between f16 steps (and one just above a power of two, a
    /// hundredth of a step up, as Adam's small updates are): each rounds to a neighbour,
    /// their mean is the value within the noise of 4096 draws, the same seed rounds the
    /// same and another differently.
    #[test]
    fn stochastic_rounding_is_unbiased_and_repeatable() {
        let device = Device::flex();
        let copies = 4096;
        // 1 + a quarter step, 1000 + 0.3 of a step (0.5 at 1000), 2^-20 (a subnormal
        // step apart), 0.25 + a hundredth of a step.
        let cases = [
            1.0 + 0.25 / 1024.0,
            1000.15,
            2f32.powi(-20) * 1.7,
            0.25 + 0.01 / 4096.0,
        ];
        for value in cases {
            let values = Tensor::<1>::full([copies], value, &device);
            let rounded = stochastic_round_f16(values.clone(), 7);
            let read: Vec<f32> = rounded
                .clone()
                .cast(FloatDType::F32)
                .into_data()
                .try_to_vec::<f32>()
                .unwrap();
            let (low, high) = (
                burn::tensor::f16::from_f32(value),
                burn::tensor::f16::from_f32(value),
            );
            let (low, high) = match low.to_f32() <= value {
                true => (
                    low.to_f32(),
                    burn::tensor::f16::from_bits(high.to_bits() + 1).to_f32(),
                ),
                false => (
                    burn::tensor::f16::from_bits(low.to_bits() - 1).to_f32(),
                    high.to_f32(),
                ),
            };
            let step = high - low;
            assert!(read.iter().all(|&r| r == low || r == high), "{value}: {read:?}");
            let mean = read.iter().map(|&r| f64::from(r)).sum::<f64>() / copies as f64;
            let step = f64::from(step);
            // The standard error of the mean of 4096 draws is at most half a step / 64.
            assert!(
                (mean - f64::from(value)).abs() < step * 4.0 / 128.0,
                "{value}: mean {mean}"
            );
            let again = stochastic_round_f16(values.clone(), 7);
            assert_eq!(again.into_data(), rounded.clone().into_data());
            if (value - low) / (high - low) > 0.05 {
                let other = stochastic_round_f16(values, 8);
                assert_ne!(other.into_data(), rounded.into_data(), "{value}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::LossScaler;
    // In the browser (wasm-pack test, tests/run-all) these run as wasm-bindgen tests.
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn overflow_halves_the_scale_and_skips_the_step() {
        let mut scaler = LossScaler::new(3);
        let start = scaler.scale();
        assert!(!scaler.update(true));
        assert_eq!(scaler.scale(), start / 2.0);
    }

    #[test]
    fn a_run_of_clean_steps_doubles_the_scale() {
        let mut scaler = LossScaler::new(3);
        scaler.update(true);
        let after_overflow = scaler.scale();
        assert!(scaler.update(false) && scaler.update(false));
        assert_eq!(scaler.scale(), after_overflow);
        assert!(scaler.update(false));
        assert_eq!(scaler.scale(), after_overflow * 2.0);
    }

    #[test]
    fn the_scale_never_drops_below_one() {
        let mut scaler = LossScaler::new(3);
        for _ in 0..100 {
            scaler.update(true);
        }
        assert_eq!(scaler.scale(), 1.0);
    }
}
