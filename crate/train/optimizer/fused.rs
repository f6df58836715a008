//! Adam's step as one kernel where the parameter lives on a cubecl backend: on 8-bit moments
//! (`ops::adam8`: no f32 copy of a moment, one launch where the tensor ops take some sixty)
//! and on f32 moments (`ops::adam`: an f32 parameter, one launch where burn's tensor ops
//! take about twelve, or an f16 one without a master copy). burn keeps Adam's constants
//! private, so the optimizer keeps its own copy here.

use burn::prelude::*;

use super::{Codebooks, ParamState, Stored, rounding_seed};
use crate::ops::adam::{self, MomentStep, Rounding};
use crate::ops::adam8::{self, Adam8Hyper, Correction, Decay};
use crate::train::quantize::Quantized;

/// burn's `AdamConfig`/`AdamWConfig` default, which Headroom does not change.
pub(super) const BETA_1: f32 = 0.9;

/// How an f16 parameter's step (f16-pure) unscales its gradient and draws its rounding: by
/// the parameter's `place` in the model.
#[derive(Clone, Copy, Debug)]
pub(super) struct HalfRounding {
    pub inverse_loss_scale: f32,
    pub place: u64,
}

/// Adam's or AdamW's constants as burn holds them.
#[derive(Clone, Copy, Debug)]
pub(super) struct AdamConstants {
    pub beta_2: f32,
    pub epsilon: f32,
    pub weight_decay: f32,
    /// AdamW's decay (the parameter scaled down) rather than Adam's (added to the gradient).
    pub decoupled: bool,
}

impl AdamConstants {
    /// The kernel's constants for update number `time`, worked out as burn's
    /// `AdaptiveMomentum::transform` and `AdamW::step` work them out.
    fn hyper(&self, time: usize, learning_rate: f64) -> Adam8Hyper {
        let time = time as i32;
        // Adam's square root of its second correction (AdamW divides the moment instead).
        let correction_2 = (1.0 - self.beta_2.powi(time)).sqrt();
        let decay_rate = learning_rate * self.weight_decay as f64;
        let decay = match (self.decoupled, self.weight_decay > 0.0) {
            (_, false) => Decay::None,
            (false, true) => Decay::Coupled(self.weight_decay),
            (true, true) if decay_rate == 0.0 => Decay::None,
            (true, true) => Decay::Decoupled((1.0 - decay_rate) as f32),
        };
        let correction = match self.decoupled {
            false => Correction::Combined {
                combined: correction_2 / (1.0 - BETA_1.powi(time)),
                epsilon: self.epsilon * correction_2,
            },
            true => Correction::Separate {
                first: 1.0 - BETA_1.powi(time),
                second: 1.0 - self.beta_2.powi(time),
                epsilon: self.epsilon,
            },
        };
        Adam8Hyper {
            beta_1: BETA_1,
            beta_2: self.beta_2,
            correction,
            learning_rate: learning_rate as f32,
            decay,
        }
    }

    /// One step of the flattened `tensor` with f32 moments: an f32 one as burn steps it, or
    /// an f16 one (f16-pure) whose gradient is unscaled, then clipped by the factor `clip`
    /// where the run clips, and whose result is rounded stochastically as `half` says. The
    /// tensor and its state after.
    pub(super) fn full_step(
        &self,
        learning_rate: f64,
        (tensor, grad): (Tensor<1>, Tensor<1>),
        previous: Option<ParamState>,
        half: Option<HalfRounding>,
        clip: Option<Tensor<1>>,
    ) -> (Tensor<1>, ParamState) {
        let elements = tensor.shape().num_elements();
        let device = tensor.device();
        let time = previous.as_ref().map_or(0, |s| s.time) + 1;
        let zeros = || Tensor::<1>::zeros([elements], &device);
        let [m, v] = match previous.map(|s| s.stored) {
            None => [zeros(), zeros()],
            Some(Stored::Full(moments)) => {
                let mut moments = moments.into_iter();
                let (Some(m), Some(v)) = (moments.next(), moments.next()) else {
                    unreachable!(
                        "Adam's state is stored with both moments, and a loaded one is checked (check_fits)"
                    )
                };
                [m, v]
            }
            Some(Stored::Eight(_)) => unreachable!(
                "an f32-moment optimizer stores f32 moments, and a loaded state is checked (check_fits)"
            ),
        };
        let step = MomentStep {
            adam: self.hyper(time, learning_rate),
            rounding: half.map(|half| Rounding {
                inverse_loss_scale: half.inverse_loss_scale,
                clips: clip.is_some(),
                seed: rounding_seed(half.place, time),
            }),
        };
        let (updated, m, v) = adam::adam_step(tensor, grad, m, v, clip, step);
        let state = ParamState {
            time,
            stored: Stored::Full(vec![m, v]),
        };
        (updated, state)
    }

    /// One step of the flattened `tensor` with 8-bit moments: the tensor and its state after.
    pub(super) fn step(
        &self,
        learning_rate: f64,
        tensor: Tensor<1>,
        grad: Tensor<1>,
        previous: Option<ParamState>,
        codebooks: &Codebooks,
    ) -> (Tensor<1>, ParamState) {
        let elements = tensor.shape().num_elements();
        let device = tensor.device();
        let time = previous.as_ref().map_or(0, |s| s.time) + 1;
        // Before the first step the moments are zero: every block's scale is 0, so every code
        // decodes to 0, and the step equals burn's first (`0 * beta + x` is `x`).
        let [m, v] = match previous.map(|s| s.stored) {
            Some(Stored::Eight(moments)) => *moments,
            None => [
                Quantized::zeros(elements, &device),
                Quantized::zeros(elements, &device),
            ],
            Some(Stored::Full(_)) => unreachable!(
                "an 8-bit optimizer stores 8-bit moments, and a loaded state is checked (check_fits)"
            ),
        };
        let (updated, m, v) = adam8::adam8_step(
            tensor,
            grad,
            (m.words, m.scales),
            (v.words, v.scales),
            &codebooks.1,
            self.hyper(time, learning_rate),
        );
        let quantized = |(words, scales)| Quantized {
            words,
            scales,
            elements,
        };
        let state = ParamState {
            time,
            stored: Stored::Eight(Box::new([quantized(m), quantized(v)])),
        };
        (updated, state)
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use burn::module::ParamId;
    use burn::tensor::FloatDType;

    use crate::ops::backend::BackendKind;
    use crate::train::config::{Moments, OptimizerConfig, OptimizerKind};
    use crate::train::optimizer::Optimizer;

    use super::*;

    /// The bits three updates of one parameter of `elements` values leave, with the step as
    /// one kernel or as tensor ops, on wgpu: the parameter's, then the state's (the moments,
    /// or their codes and scales). An f16 parameter gets f16 gradients of a loss scaled by 2.
    fn three_updates(
        config: &OptimizerConfig,
        moments: Moments,
        elements: usize,
        fused: bool,
        half: bool,
    ) -> (Vec<u32>, Vec<u32>) {
        let device = BackendKind::Wgpu.device();
        let values = |phase: f32, scale: f32| {
            // Magnitudes over several decades, so that the codes span the map.
            let data: Vec<f32> = (0..elements)
                .map(|i| scale * (i as f32 * 0.7 + phase).sin() * 10f32.powi(-((i % 5) as i32)))
                .collect();
            let tensor = Tensor::<1>::from_data(TensorData::new(data, [elements]), &device);
            match half {
                true => tensor.cast(FloatDType::F16),
                false => tensor,
            }
        };
        let mut optimizer = Optimizer::new(config, moments);
        optimizer.chunk = 512;
        optimizer.inverse_loss_scale = 0.5;
        if !fused {
            optimizer.adam = None;
        }
        let mut tensor = values(0.0, 1.0);
        let id = ParamId::from(3u64);
        for step in 0..3 {
            let grad = values(step as f32 + 1.0, 0.5);
            tensor = optimizer.update(id, 5, 1e-2, tensor, grad);
        }
        let floats = |t: Tensor<1>| {
            let data = t.cast(FloatDType::F32).into_data().convert::<f32>();
            data.iter::<f32>().map(f32::to_bits).collect::<Vec<u32>>()
        };
        let ints = |t: Tensor<1, Int>| {
            let data = t.into_data().convert::<i32>();
            data.iter::<i32>().map(|i| i as u32).collect::<Vec<u32>>()
        };
        let state = match &optimizer.states[&id].stored {
            Stored::Eight(moments) => moments
                .iter()
                .flat_map(|m| [ints(m.words.clone()), floats(m.scales.clone())].concat())
                .collect(),
            Stored::Full(moments) => moments.iter().flat_map(|m| floats(m.clone())).collect(),
        };
        (floats(tensor), state)
    }

    /// Each of `ours` within `relative` of `theirs`, both read as f32 bits (a word of 8-bit
    /// codes too, which passes where its codes are equal and may where only its lowest
    /// differs).
    fn assert_close(ours: &[u32], theirs: &[u32], relative: f32, what: &str) {
        assert_eq!(ours.len(), theirs.len(), "{what}");
        for (&a, &b) in ours.iter().zip(theirs) {
            let (x, y) = (f32::from_bits(a), f32::from_bits(b));
            let close = a == b || (x - y).abs() <= relative * x.abs().max(y.abs());
            assert!(close, "{what}: {x:e} against {y:e}");
        }
    }

    /// The kernels leave the parameter and the state on the bits the tensor ops leave, over
    /// three steps of Adam and AdamW, with and without weight decay, with and without norm
    /// clipping: 8-bit moments on f32 parameters (a block of one value, partial and whole
    /// blocks, a grid that wraps: six blocks, two a row in tests) and on an f16 one updated
    /// in three chunks; an f16 parameter with f32 moments, its gradient unscaled (and
    /// clipped by the factor the kernel reads) and its value rounded stochastically (one
    /// kernel, its grid wrapping too); and an f32 parameter with f32 moments (clipped
    /// before the kernel). Bit for bit on lavapipe, which contracts no multiply-add the
    /// tensor ops leave apart (with clipping too: its norm is summed in a fixed order,
    /// `clip`); close under `fusion`.
    #[test]
    fn the_kernels_step_as_the_tensor_ops_do_bit_for_bit() {
        let cases = [
            (Moments::Q8, 1, false),
            (Moments::Q8, 1000, false),
            (Moments::Q8, 5 * 256 + 3, false),
            (Moments::Q8, 1500, true),
            (Moments::F32, 1, true),
            (Moments::F32, 3 * 256 + 7, true),
            (Moments::F32, 1, false),
            (Moments::F32, 3 * 256 + 7, false),
        ];
        let rules = [OptimizerKind::Adam, OptimizerKind::AdamW]
            .into_iter()
            .flat_map(|kind| [(kind, 0.0, None), (kind, 1e-2, None), (kind, 1e-2, Some(0.5))]);
        for (kind, weight_decay, clip_norm) in rules {
            let config = OptimizerConfig {
                kind,
                weight_decay,
                clip_norm,
                ..OptimizerConfig::default()
            };
            for (moments, elements, half) in cases {
                let ops = three_updates(&config, moments, elements, false, half);
                let kernel = three_updates(&config, moments, elements, true, half);
                let case = format!(
                    "{kind:?}, weight decay {weight_decay}, clip {clip_norm:?}, {moments:?}, {elements} values, f16 {half}"
                );
                if cfg!(feature = "fusion") {
                    // burn's fusion runs the tensor ops as kernels of its own, which may
                    // contract a multiply-add: a few units of the last place apart, and a
                    // stochastic rounding that lands on the other neighbour.
                    assert_close(&kernel.0, &ops.0, 1e-3, &format!("parameters: {case}"));
                    assert_close(&kernel.1, &ops.1, 1e-5, &format!("state: {case}"));
                    continue;
                }
                assert_eq!(kernel.0, ops.0, "parameters: {case}");
                assert_eq!(kernel.1, ops.1, "state: {case}");
            }
        }
    }
}
