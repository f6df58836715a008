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
    /// f16 without the f32 master copy: the parameters and their gradients are f16 only;
    /// each update is computed in f32 one parameter at a time and rounded back to f16
    /// stochastically (`train::precision::stochastic_round_f16`).
    #[serde(rename = "f16-pure")]
    #[cfg_attr(not(target_arch = "wasm32"), value(name = "f16-pure"))]
    F16Pure,
}

impl Precision {
    /// Whether parameters and activations are stored in f16 (with a master copy or not).
    pub fn is_half(self) -> bool {
        self != Precision::F32
    }

    pub fn bytes(self) -> usize {
        match self {
            Precision::F32 => 4,
            Precision::F16 | Precision::F16Pure => 2,
        }
    }

    pub fn dtype(self) -> burn::tensor::FloatDType {
        match self {
            Precision::F32 => burn::tensor::FloatDType::F32,
            Precision::F16 | Precision::F16Pure => burn::tensor::FloatDType::F16,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
            Precision::F16Pure => "f16-pure",
        }
    }
}

/// How Adam's two moments are kept between steps.
#[cfg_attr(all(test, not(target_arch = "wasm32")), derive(tsify::Tsify))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(clap::ValueEnum))]
pub enum Moments {
    /// 4 bytes each.
    #[default]
    #[serde(rename = "f32")]
    #[cfg_attr(not(target_arch = "wasm32"), value(name = "f32"))]
    F32,
    /// 1 byte each and an f32 scale per block of 256: block-wise dynamic quantisation
    /// (`train::quantize`).
    #[serde(rename = "8bit")]
    #[cfg_attr(not(target_arch = "wasm32"), value(name = "8bit"))]
    Q8,
}

/// Values per block of 8-bit moments, each block with one f32 scale (`train::quantize`).
pub const QUANT_BLOCK: usize = 256;

/// The most values of one parameter updated at once where 8-bit moments or f16 parameters
/// make the update's f32 temporaries the largest in the workspace (1 MiB a copy): a
/// whole number of 8-bit blocks, large enough that the extra kernels of a chunk are few.
pub const UPDATE_CHUNK: usize = 1 << 18;

impl Moments {
    /// The bytes of one 8-bit moment's codes for `elements` values: a byte each, padded
    /// to whole blocks.
    pub fn code_bytes(elements: usize) -> u64 {
        (elements.div_ceil(QUANT_BLOCK) * QUANT_BLOCK) as u64
    }

    /// The bytes of one 8-bit moment's block scales.
    pub fn scale_bytes(elements: usize) -> u64 {
        elements.div_ceil(QUANT_BLOCK) as u64 * 4
    }

    pub fn name(self) -> &'static str {
        match self {
            Moments::F32 => "f32",
            Moments::Q8 => "8-bit",
        }
    }
}

impl std::fmt::Display for Moments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
