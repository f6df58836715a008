//! The optimizer: burn's Adam and AdamW update rules (and SGD with burn's momentum, weight
//! decay and clipping formulas), applied parameter by parameter as burn's `ModuleOptimizer`
//! applies them, but holding the per-parameter state itself. burn keeps that state out of
//! reach and reads it back only synchronously, which a browser's GPU forbids; here it can be
//! read asynchronously into a checkpoint and put back (see [`Optimizer::to_bytes`]). Tested
//! bit for bit against `ModuleOptimizer` on flex.

use std::collections::HashMap;

use burn::grad_clipping::{GradientClipping, GradientClippingConfig};
use burn::module::{ModuleMapper, Param, ParamId};
use burn::optim::decay::{WeightDecay, WeightDecayConfig};
use burn::optim::{
    Adam, AdamConfig, AdamState, AdamW, AdamWConfig, AdamWState, AdaptiveMomentumState, GradientsParams,
    Optimizer as UpdateRule,
};
use burn::prelude::*;

use super::config::{OptimizerConfig, OptimizerKind};
use crate::model::Model;

/// burn's SGD momentum dampening (`MomentumConfig`'s default), kept so the rule is burn's.
const SGD_DAMPENING: f64 = 0.1;

#[derive(Clone)]
enum Rule {
    Adam(Adam),
    AdamW(AdamW),
    Sgd {
        momentum: Option<f32>,
        weight_decay: Option<WeightDecay>,
    },
}

/// One parameter's state, its tensors flattened (a reshape back to the parameter's shape
/// is free): Adam's two moments and step count, or SGD's velocity.
#[derive(Clone)]
struct ParamState {
    time: usize,
    tensors: Vec<Tensor<1>>,
}

#[derive(Clone)]
pub struct Optimizer {
    rule: Rule,
    clipping: Option<GradientClipping>,
    states: HashMap<ParamId, ParamState>,
}

impl Optimizer {
    pub fn new(config: &OptimizerConfig) -> Self {
        let decay = (config.weight_decay > 0.0).then(|| WeightDecayConfig::new(config.weight_decay as f32));
        let rule = match config.kind {
            OptimizerKind::Adam => Rule::Adam(
                AdamConfig::new()
                    .with_epsilon(config.epsilon)
                    .with_beta_2(config.beta_2)
                    .with_weight_decay(decay)
                    .build(),
            ),
            OptimizerKind::AdamW => Rule::AdamW(
                AdamWConfig::new()
                    .with_epsilon(config.epsilon)
                    .with_beta_2(config.beta_2)
                    .with_weight_decay(config.weight_decay as f32)
                    .build(),
            ),
            OptimizerKind::Sgd => Rule::Sgd {
                momentum: (config.momentum > 0.0).then_some(config.momentum as f32),
                weight_decay: decay.as_ref().map(WeightDecay::new),
            },
        };
        Optimizer {
            rule,
            clipping: config
                .clip_norm
                .map(|norm| GradientClippingConfig::Norm(norm).init()),
            states: HashMap::new(),
        }
    }

    /// `model` with every parameter that has a gradient in `grads` updated.
    pub fn step(&mut self, learning_rate: f64, model: Model, mut grads: GradientsParams) -> Model {
        model.map(&mut Update {
            optimizer: self,
            grads: &mut grads,
            learning_rate,
        })
    }

    /// One parameter's update on the inner (non-autodiff) tensors.
    fn update<const D: usize>(
        &mut self,
        id: ParamId,
        learning_rate: f64,
        tensor: Tensor<D>,
        grad: Tensor<D>,
    ) -> Tensor<D> {
        let grad = match &self.clipping {
            Some(clipping) => clipping.clip_gradient(grad),
            None => grad,
        };
        let shape = tensor.shape();
        let elements = shape.num_elements();
        let previous = self.states.remove(&id);
        let unflatten = |t: Tensor<1>| t.reshape(shape.clone());
        let (updated, state) = match &self.rule {
            Rule::Adam(rule) => {
                let state = previous.map(|s| AdamState::new(moments(s, unflatten)));
                let (updated, state) = rule.step(learning_rate, tensor, grad, state);
                (updated, state.map(|s| flatten_moments(s.momentum, elements)))
            }
            Rule::AdamW(rule) => {
                let state = previous.map(|s| AdamWState::new(moments(s, unflatten)));
                let (updated, state) = rule.step(learning_rate, tensor, grad, state);
                (updated, state.map(|s| flatten_moments(s.momentum, elements)))
            }
            Rule::Sgd {
                momentum,
                weight_decay,
            } => sgd_update(
                *momentum,
                weight_decay.as_ref(),
                learning_rate,
                tensor,
                grad,
                previous,
                unflatten,
            ),
        };
        if let Some(state) = state {
            self.states.insert(id, state);
        }
        updated
    }
}

fn moments<const D: usize>(
    state: ParamState,
    unflatten: impl Fn(Tensor<1>) -> Tensor<D>,
) -> AdaptiveMomentumState<D> {
    let mut tensors = state.tensors.into_iter().map(unflatten);
    let (Some(moment_1), Some(moment_2)) = (tensors.next(), tensors.next()) else {
        unreachable!("Adam's state is stored with both moments, and a loaded one is checked (check_fits)")
    };
    AdaptiveMomentumState::new(state.time, moment_1, moment_2)
}

fn flatten_moments<const D: usize>(state: AdaptiveMomentumState<D>, elements: usize) -> ParamState {
    ParamState {
        time: state.time,
        tensors: vec![
            state.moment_1.reshape([elements]),
            state.moment_2.reshape([elements]),
        ],
    }
}

/// burn's `Sgd::step` with its `Momentum`: weight decay, then momentum, then the step.
fn sgd_update<const D: usize>(
    momentum: Option<f32>,
    weight_decay: Option<&WeightDecay>,
    learning_rate: f64,
    tensor: Tensor<D>,
    grad: Tensor<D>,
    previous: Option<ParamState>,
    unflatten: impl Fn(Tensor<1>) -> Tensor<D>,
) -> (Tensor<D>, Option<ParamState>) {
    let elements = tensor.shape().num_elements();
    let mut grad = match weight_decay {
        Some(decay) => decay.transform(grad, tensor.clone()),
        None => grad,
    };
    let mut state = ParamState {
        time: previous.as_ref().map_or(0, |s| s.time) + 1,
        tensors: Vec::new(),
    };
    if let Some(momentum) = momentum {
        let velocity = match previous.and_then(|s| s.tensors.into_iter().next()) {
            Some(velocity) => grad
                .clone()
                .mul_scalar(1.0 - SGD_DAMPENING)
                .add(unflatten(velocity).mul_scalar(momentum)),
            None => grad.clone(),
        };
        grad = velocity.clone();
        state.tensors.push(velocity.reshape([elements]));
    }
    (tensor - grad.mul_scalar(learning_rate), Some(state))
}

/// Walks the model as burn's `ModuleOptimizer` does, updating each parameter that has a
/// gradient and keeping its autodiff settings.
struct Update<'a> {
    optimizer: &'a mut Optimizer,
    grads: &'a mut GradientsParams,
    learning_rate: f64,
}

impl ModuleMapper for Update<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let (id, tensor, mapper) = param.consume();
        let Some(grad) = self.grads.remove::<D>(id) else {
            return Param::from_mapped_value(id, tensor, mapper);
        };
        let require_grad = tensor.is_require_grad();
        let strategy = tensor.gradient_checkpointing_strategy();
        let updated = self
            .optimizer
            .update(id, self.learning_rate, tensor.inner(), grad);
        let mut updated = Tensor::from_inner(updated);
        if let Some(strategy) = strategy {
            updated = updated.with_gradient_checkpointing_strategy(strategy);
        }
        if require_grad {
            updated = updated.require_grad();
        }
        Param::from_mapped_value(id, updated, mapper)
    }
}

/// Every float parameter's size, by id.
struct Sizes(HashMap<ParamId, usize>);

impl burn::module::ModuleVisitor for Sizes {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        self.0.insert(param.id, param.shape().num_elements());
    }
}

impl Optimizer {
    /// The tensors each parameter's state holds under this rule.
    fn tensors_per_state(&self) -> usize {
        match self.rule {
            Rule::Adam(_) | Rule::AdamW(_) => 2,
            Rule::Sgd {
                momentum: Some(_), ..
            } => 1,
            Rule::Sgd { momentum: None, .. } => 0,
        }
    }

    /// Refuses a loaded state that does not fit `model` under this rule: a parameter the
    /// model lacks, a size not the parameter's, or another count of tensors. Each would
    /// otherwise fail in the middle of a step.
    pub fn check_fits(&self, model: &Model) -> Result<(), String> {
        let mut sizes = Sizes(HashMap::new());
        burn::module::Module::visit(model, &mut sizes);
        for (id, state) in &self.states {
            let elements = sizes
                .0
                .get(id)
                .ok_or_else(|| format!("it holds state for a parameter ({id}) this model does not have"))?;
            if state.tensors.len() != self.tensors_per_state() {
                return Err(format!(
                    "parameter {id} has {} tensors of state, this optimizer keeps {}",
                    state.tensors.len(),
                    self.tensors_per_state()
                ));
            }
            if state
                .tensors
                .iter()
                .any(|t| t.shape().num_elements() != *elements)
            {
                return Err(format!(
                    "parameter {id}'s state is not the parameter's size ({elements})"
                ));
            }
        }
        Ok(())
    }
}

/// One parameter's entry in the saved state; its tensors follow the header as f32 LE.
#[derive(serde::Serialize, serde::Deserialize)]
struct SavedParam {
    id: u64,
    time: usize,
    elements: usize,
    tensors: usize,
}

impl Optimizer {
    /// The per-parameter state as bytes: a little-endian u64 header length, a JSON header
    /// naming each parameter (its id, step count and sizes), then every tensor as f32 LE.
    /// Reads the device asynchronously, as a browser's GPU requires.
    pub async fn to_bytes(&self) -> Result<Vec<u8>, String> {
        let mut ids: Vec<&ParamId> = self.states.keys().collect();
        ids.sort_by_key(|id| id.val());
        let mut header = Vec::with_capacity(ids.len());
        let mut values = Vec::new();
        for id in ids {
            let state = &self.states[id];
            let elements = state.tensors.first().map_or(0, |t| t.shape().num_elements());
            for tensor in &state.tensors {
                let data = tensor
                    .clone()
                    .into_data_async()
                    .await
                    .map_err(|e| format!("{e:?}"))?;
                let data = data
                    .convert::<f32>()
                    .try_into_vec::<f32>()
                    .map_err(|e| format!("{e:?}"))?;
                values.extend(data.iter().flat_map(|v| v.to_le_bytes()));
            }
            header.push(SavedParam {
                id: id.val(),
                time: state.time,
                elements,
                tensors: state.tensors.len(),
            });
        }
        let header = serde_json::to_vec(&header).map_err(|e| e.to_string())?;
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend(header);
        bytes.extend(values);
        Ok(bytes)
    }

    /// Puts back the state [`to_bytes`](Self::to_bytes) wrote, on `device`; the reason where
    /// the bytes are not such a state.
    pub fn load_bytes(&mut self, bytes: &[u8], device: &Device) -> Result<(), String> {
        let too_short = || "the optimizer state is cut short".to_string();
        let (length, rest) = bytes.split_first_chunk::<8>().ok_or_else(too_short)?;
        let length = usize::try_from(u64::from_le_bytes(*length)).map_err(|_| too_short())?;
        let (header, mut values) = (rest.get(..length).ok_or_else(too_short)?, &rest[length..]);
        let header: Vec<SavedParam> =
            serde_json::from_slice(header).map_err(|e| format!("the optimizer state's header: {e}"))?;
        let mut states = HashMap::with_capacity(header.len());
        for saved in header {
            let mut tensors = Vec::with_capacity(saved.tensors);
            for _ in 0..saved.tensors {
                let size = saved.elements.checked_mul(4).ok_or_else(too_short)?;
                let (these, rest) = values.split_at_checked(size).ok_or_else(too_short)?;
                values = rest;
                let floats: Vec<f32> = these
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect();
                tensors.push(Tensor::from_data(
                    TensorData::new(floats, [saved.elements]),
                    device,
                ));
            }
            let state = ParamState {
                time: saved.time,
                tensors,
            };
            states.insert(ParamId::from(saved.id), state);
        }
        if !values.is_empty() {
            return Err(format!(
                "the optimizer state has {} bytes past its end",
                values.len()
            ));
        }
        self.states = states;
        Ok(())
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use burn::module::Module;
    use burn::optim::momentum::MomentumConfig;
    use burn::optim::{ModuleOptimizer, SgdConfig};
    use burn::tensor::Distribution;

    use super::*;
    use crate::model::{InputKind, InputShape, ModelConfig, ModelInput};

    /// burn's own module optimizer for the same settings, as the trainer built it before.
    fn burns(config: &OptimizerConfig) -> ModuleOptimizer {
        let clipping = config.clip_norm.map(GradientClippingConfig::Norm);
        let decay = (config.weight_decay > 0.0).then(|| WeightDecayConfig::new(config.weight_decay as f32));
        match config.kind {
            OptimizerKind::Adam => AdamConfig::new()
                .with_epsilon(config.epsilon)
                .with_beta_2(config.beta_2)
                .with_weight_decay(decay)
                .with_grad_clipping(clipping)
                .init(),
            OptimizerKind::AdamW => AdamWConfig::new()
                .with_epsilon(config.epsilon)
                .with_beta_2(config.beta_2)
                .with_weight_decay(config.weight_decay as f32)
                .with_grad_clipping(clipping)
                .init(),
            OptimizerKind::Sgd => SgdConfig::new()
                .with_momentum(Some(MomentumConfig::new().with_momentum(config.momentum)))
                .with_weight_decay(decay)
                .with_gradient_clipping(clipping)
                .init(),
        }
    }

    fn parameters(model: &Model) -> Vec<u32> {
        struct Read(Vec<u32>);
        impl burn::module::ModuleVisitor for Read {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
                let data = param.val().into_data().convert::<f32>();
                self.0.extend(data.iter::<f32>().map(f32::to_bits));
            }
        }
        let mut read = Read(Vec::new());
        model.visit(&mut read);
        read.0
    }

    fn device() -> Device {
        Device::flex().autodiff()
    }

    fn gradients(model: &Model, seed: u64) -> GradientsParams {
        let device = device();
        device.seed(seed);
        let images = Tensor::<4>::random([8, 1, 4, 4], Distribution::Default, &device);
        let loss = model.forward(ModelInput::Images(images)).powi_scalar(2).mean();
        GradientsParams::from_grads(loss.backward(), model)
    }

    /// Four steps of each rule, with weight decay and clipping, and a state saved to bytes
    /// and loaded back halfway: the parameters equal burn's, bit for bit.
    #[tokio::test]
    async fn updates_equal_burns_module_optimizer_bit_for_bit_across_a_save() {
        let input = InputShape {
            height: 4,
            width: 4,
            classes: 3,
            kind: InputKind::Images,
        };
        for kind in [OptimizerKind::Adam, OptimizerKind::AdamW, OptimizerKind::Sgd] {
            let config = OptimizerConfig {
                kind,
                learning_rate: 1e-2,
                weight_decay: 1e-3,
                clip_norm: Some(0.5),
                ..OptimizerConfig::default()
            };
            device().seed(1);
            let start = ModelConfig::Mlp { hidden: vec![6] }.init(&input, &device());
            let (mut theirs, mut ours) = (start.clone(), start);
            let mut burn_optimizer = burns(&config);
            let mut optimizer = Optimizer::new(&config);
            for step in 0..4 {
                let grads = gradients(&theirs, step);
                theirs = burn_optimizer.step(config.learning_rate, theirs, grads);
                let grads = gradients(&ours, step);
                ours = optimizer.step(config.learning_rate, ours, grads);
                assert_eq!(parameters(&ours), parameters(&theirs), "{kind:?} step {step}");
                if step == 1 {
                    let bytes = optimizer.to_bytes().await.unwrap();
                    optimizer = Optimizer::new(&config);
                    optimizer.load_bytes(&bytes, &Device::flex()).unwrap();
                }
            }
        }
    }

    #[test]
    fn a_cut_or_padded_state_is_refused_in_words() {
        let mut optimizer = Optimizer::new(&OptimizerConfig::default());
        let device = Device::flex();
        for (bytes, expected) in [
            (vec![1, 2, 3], "cut short"),
            (vec![200, 0, 0, 0, 0, 0, 0, 0, b'['], "cut short"),
            (b"\x02\0\0\0\0\0\0\0[]x".to_vec(), "past its end"),
            (b"\x02\0\0\0\0\0\0\0{}".to_vec(), "header"),
        ] {
            let error = optimizer.load_bytes(&bytes, &device).unwrap_err();
            assert!(error.contains(expected), "{error}");
        }
        let huge = br#"[{"id":1,"time":1,"elements":18446744073709551615,"tensors":1}]"#;
        let mut bytes = (huge.len() as u64).to_le_bytes().to_vec();
        bytes.extend(huge);
        assert!(
            optimizer
                .load_bytes(&bytes, &device)
                .unwrap_err()
                .contains("cut short")
        );
    }
}
