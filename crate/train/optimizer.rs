use burn::grad_clipping::GradientClippingConfig;
use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{AdamConfig, AdamWConfig, ModuleOptimizer, SgdConfig};

use super::config::{OptimizerConfig, OptimizerKind};

pub fn build(config: &OptimizerConfig) -> ModuleOptimizer {
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
        OptimizerKind::Sgd => {
            let momentum =
                (config.momentum > 0.0).then(|| MomentumConfig::new().with_momentum(config.momentum));
            SgdConfig::new()
                .with_momentum(momentum)
                .with_weight_decay(decay)
                .with_gradient_clipping(clipping)
                .init()
        }
    }
}
