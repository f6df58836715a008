//! A parameter's update in chunks of its flattened values: the f32 temporaries of 8-bit
//! moments (the decoded and updated moments, the encoder's) and of an f16 parameter's
//! update (its f32 value, gradient and rounding noise) are those of one chunk, not of the
//! whole parameter. Every rule is elementwise but for norm clipping, whose norm is summed
//! over the chunks first; without it the result equals the whole update bit for bit (the
//! chunks start on whole 8-bit blocks, and rounding draws by the element's place in the
//! whole).

use std::ops::Range;

use burn::module::ParamId;
use burn::prelude::*;
use burn::tensor::{DType, FloatDType};

use super::{Optimizer, ParamState, Stored, clip, rounding_seed};
use crate::train::precision;
use crate::train::quantize::Quantized;

impl Optimizer {
    pub(super) fn update_chunked(
        &mut self,
        id: ParamId,
        place: u64,
        learning_rate: f64,
        tensor: Tensor<1>,
        grad: Tensor<1>,
    ) -> Tensor<1> {
        let elements = tensor.shape().num_elements();
        let half = tensor.dtype() == DType::F16;
        let ranges = self.chunks(elements);
        let norm_coefficient = self.clip_factor(&grad);
        let previous = self.states.remove(&id);
        let codebooks = self.codebooks(&tensor.device());
        let (mut updated, mut states) = (Vec::new(), Vec::new());
        for range in ranges {
            let grad = self.unscaled(grad.clone().slice(range.clone()));
            let grad = match &norm_coefficient {
                Some(coefficient) => grad.mul(coefficient.clone()),
                None => grad,
            };
            let part = tensor.clone().slice(range.clone());
            let part = match half {
                true => part.cast(FloatDType::F32),
                false => part,
            };
            let state = previous.as_ref().map(|s| s.slice(range.clone()));
            let (part, state) = self.step_rule(learning_rate, part, grad, state, codebooks.as_ref());
            let time = state.as_ref().map_or(0, |s| s.time);
            updated.push(match half {
                true => precision::stochastic_round_f16_from(part, rounding_seed(place, time), range.start),
                false => part,
            });
            states.extend(state);
        }
        if let Some(state) = ParamState::cat(states) {
            self.states.insert(id, state);
        }
        Tensor::cat(updated, 0)
    }

    /// The ranges of a parameter of `elements` values its update takes at once.
    fn chunks(&self, elements: usize) -> Vec<Range<usize>> {
        (0..elements)
            .step_by(self.chunk)
            .map(|start| start..(start + self.chunk).min(elements))
            .collect()
    }

    /// `grad` (f32) clipped as [`Self::clip_factor`] says, where the run clips.
    pub(super) fn clipped<const D: usize>(&self, grad: Tensor<D>) -> Tensor<D> {
        let shape = grad.shape();
        let elements = shape.num_elements();
        let flat = grad.reshape([elements]);
        match self.clip_factor(&flat) {
            Some(coefficient) => flat.mul(coefficient).reshape(shape),
            None => flat.reshape(shape),
        }
    }

    /// burn's norm clipping's factor for the flattened `grad` (one value, on the device: its
    /// norm in f32, after unscaling), its squares summed over the chunks an update of it
    /// takes, each in a fixed order (`clip`); `None` without clipping.
    pub(super) fn clip_factor(&self, grad: &Tensor<1>) -> Option<Tensor<1>> {
        let threshold = self.clip_norm?;
        let squares = self
            .chunks(grad.shape().num_elements())
            .into_iter()
            .map(|range| clip::sum_of_squares(self.unscaled(grad.clone().slice(range))))
            .reduce(|a, b| a + b)?;
        Some(clip::factor(squares, threshold))
    }
}

impl ParamState {
    /// The state of the values `range` of the parameter (a whole number of 8-bit blocks in).
    fn slice(&self, range: Range<usize>) -> ParamState {
        let stored = match &self.stored {
            Stored::Full(tensors) => {
                Stored::Full(tensors.iter().map(|t| t.clone().slice(range.clone())).collect())
            }
            Stored::Eight(moments) => Stored::Eight(Box::new([
                moments[0].slice(range.clone()),
                moments[1].slice(range),
            ])),
        };
        ParamState {
            time: self.time,
            stored,
        }
    }

    /// The states of consecutive chunks as one (each chunk's step leaves the same time).
    fn cat(parts: Vec<ParamState>) -> Option<ParamState> {
        let time = parts.first()?.time;
        let stored = match parts[0].stored {
            Stored::Full(ref first) => {
                let count = first.len();
                let mut columns: Vec<Vec<Tensor<1>>> = vec![Vec::new(); count];
                for part in parts {
                    if let Stored::Full(tensors) = part.stored {
                        for (column, tensor) in columns.iter_mut().zip(tensors) {
                            column.push(tensor);
                        }
                    }
                }
                Stored::Full(columns.into_iter().map(|c| Tensor::cat(c, 0)).collect())
            }
            Stored::Eight(_) => {
                let (first, second): (Vec<Quantized>, Vec<Quantized>) = parts
                    .into_iter()
                    .filter_map(|part| match part.stored {
                        Stored::Eight(moments) => {
                            let [a, b] = *moments;
                            Some((a, b))
                        }
                        Stored::Full(_) => None,
                    })
                    .unzip();
                Stored::Eight(Box::new([Quantized::cat(first), Quantized::cat(second)]))
            }
        };
        Some(ParamState { time, stored })
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use crate::train::config::{Moments, OptimizerConfig, OptimizerKind};

    /// Three updates of one 1000-value parameter (not a whole number of chunks or blocks)
    /// with `chunk` values at a time; the parameter's values and the state's bytes.
    fn updates(config: &OptimizerConfig, moments: Moments, half: bool, chunk: usize) -> (Vec<f32>, Vec<f32>) {
        let device = Device::flex();
        // Spread values from a formula, not the device's generator: tests run side by side
        // share its seed.
        let values = |phase: f32, scale: f32| {
            let data: Vec<f32> = (0..1000)
                .map(|i| scale * (i as f32 * 0.7 + phase).sin())
                .collect();
            Tensor::<1>::from_data(TensorData::new(data, [1000]), &device)
        };
        let mut tensor = values(0.0, 1.0);
        if half {
            tensor = tensor.cast(FloatDType::F16);
        }
        let mut optimizer = Optimizer::new(config, moments);
        optimizer.chunk = chunk;
        optimizer.inverse_loss_scale = 0.5;
        let id = ParamId::from(7u64);
        for step in 0..3 {
            let grad = values(step as f32 + 1.0, 2.0);
            let grad = match half {
                true => grad.cast(FloatDType::F16),
                false => grad,
            };
            tensor = optimizer.update(id, 0, 1e-2, tensor, grad);
        }
        let state = match &optimizer.states[&id].stored {
            Stored::Full(tensors) => Tensor::cat(tensors.clone(), 0),
            Stored::Eight(moments) => Tensor::cat(
                vec![
                    moments[0].words.clone().float(),
                    moments[0].scales.clone(),
                    moments[1].words.clone().float(),
                    moments[1].scales.clone(),
                ],
                0,
            ),
        };
        let read = |t: Tensor<1>| t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap();
        (read(tensor), read(state))
    }

    /// In chunks of 256 values or at once, the parameters and the state are the same bits:
    /// Adam and AdamW with weight decay, 8-bit and f32 moments, f32 and f16 parameters
    /// (whose rounding draws by each value's place in the whole).
    #[test]
    fn an_update_in_chunks_equals_the_whole_bit_for_bit() {
        for kind in [OptimizerKind::Adam, OptimizerKind::AdamW] {
            let config = OptimizerConfig {
                kind,
                weight_decay: 1e-2,
                ..OptimizerConfig::default()
            };
            for (moments, half) in [(Moments::Q8, false), (Moments::Q8, true), (Moments::F32, true)] {
                let whole = updates(&config, moments, half, usize::MAX);
                let chunked = updates(&config, moments, half, 256);
                assert_eq!(whole.0, chunked.0, "{kind:?} {moments:?} half {half}");
                assert_eq!(whole.1, chunked.1, "{kind:?} {moments:?} half {half}");
                let unchanged = updates(&config, moments, half, usize::MAX);
                assert_eq!(unchanged.0, whole.0, "the draws repeat");
            }
        }
    }

    /// Norm clipping sums the norm over the chunks: the same clipped update to f32's
    /// rounding, and clipping does bite (a threshold far under the gradient's norm).
    #[test]
    fn norm_clipping_in_chunks_clips_as_the_whole() {
        let clipped = OptimizerConfig {
            clip_norm: Some(0.1),
            ..OptimizerConfig::default()
        };
        let whole = updates(&clipped, Moments::Q8, false, usize::MAX).0;
        let chunked = updates(&clipped, Moments::Q8, false, 256).0;
        for (a, b) in whole.iter().zip(&chunked) {
            assert!((a - b).abs() <= 1e-6 * a.abs().max(1.0), "{a} {b}");
        }
        let free = updates(&OptimizerConfig::default(), Moments::Q8, false, 256).0;
        assert_ne!(free, chunked);
    }
}
