//! Mixed precision: f16 copies of the f32 master weights for forward and backward,
//! gradients brought back to f32 and unscaled, and a loss scale that adapts to overflow.

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::tensor::FloatDType;

use crate::model::Model;

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

struct CastToHalf;

impl ModuleMapper for CastToHalf {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        // A fresh leaf under the master's id, so its gradients land where the optimizer
        // looks for the master's.
        param.map(|t| outside_autodiff(t, |t| t.cast(FloatDType::F16)))
    }
}

/// The model's parameters as f16 leaves with the master weights' ids.
pub fn half_copy(model: &Model) -> Model {
    model.clone().map(&mut CastToHalf)
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
            let part = grad.abs().sum();
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
