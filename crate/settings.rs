//! Settings the planner and the trainer both read: defined here so that neither reaches
//! into the other for them.

use serde::{Deserialize, Serialize};

#[cfg_attr(all(test, not(target_arch = "wasm32")), derive(tsify::Tsify))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    Adam,
    #[cfg_attr(not(target_arch = "wasm32"), value(name = "adamw"))]
    AdamW,
    Sgd,
}

/// How parameters and activations are stored.
#[cfg_attr(all(test, not(target_arch = "wasm32")), derive(tsify::Tsify))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    #[default]
    F32,
    /// Half-precision parameters and activations; f32 master weights, optimizer state and
    /// loss, with dynamic loss scaling.
    F16,
}

impl Precision {
    pub fn bytes(self) -> usize {
        match self {
            Precision::F32 => 4,
            Precision::F16 => 2,
        }
    }

    pub fn dtype(self) -> burn::tensor::FloatDType {
        match self {
            Precision::F32 => burn::tensor::FloatDType::F32,
            Precision::F16 => burn::tensor::FloatDType::F16,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
