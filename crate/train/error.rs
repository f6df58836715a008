//! Why a run could not start or stopped, with the [`ErrorKind`] the page acts on.

use serde::Serialize;

use crate::data::DataError;
use crate::error::ErrorKind;
use crate::memory::DataSettings;
use crate::units::{format_bytes, format_bytes_up};

#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error(transparent)]
    Data(#[from] DataError),
    #[error("invalid training config: {0}")]
    Config(String),
    #[error("the dataset does not fit this trainer: {0}")]
    Dataset(String),
    #[error(
        "training diverged at step {step}: the loss is {loss}; lower the learning rate or clip gradients"
    )]
    Diverged { step: u64, loss: f32 },
    #[error("{0}")]
    CapTooSmall(Box<Refusal>),
    #[error(
        "step {step} held {}, over the cap of {}, and a smaller micro-batch frees nothing more: what remains is parameters, gradients and optimizer state; raise the cap or choose a smaller model",
        format_bytes(*.peak_bytes as usize),
        format_bytes(*.cap_bytes as usize)
    )]
    CapExceeded {
        step: u64,
        peak_bytes: u64,
        cap_bytes: u64,
    },
    #[error("reading a result back from the device failed: {0}")]
    Readback(String),
    #[error("the saved run cannot be used: {0}")]
    Checkpoint(String),
    #[error("the weights file cannot be used: {0}")]
    Weights(String),
}

impl TrainError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            TrainError::Data(error) => error.kind(),
            TrainError::Config(_) => ErrorKind::BadSettings,
            TrainError::Dataset(_) => ErrorKind::BadDataset,
            TrainError::Diverged { .. } => ErrorKind::Diverged,
            TrainError::CapTooSmall { .. } => ErrorKind::CapTooSmall,
            TrainError::CapExceeded { .. } => ErrorKind::CapExceeded,
            TrainError::Readback(_) => ErrorKind::Readback,
            TrainError::Checkpoint(_) | TrainError::Weights(_) => ErrorKind::BadCheckpoint,
        }
    }
}

/// Why a cap fits no setting, as data: the page formats it, the command line prints its
/// `Display`. Byte counts are what the planner computed, before any rounding for display.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Refusal {
    pub cap_bytes: u64,
    /// The smallest cap the run fits under as it stands, the enforcer's headroom included.
    pub needed_bytes: u64,
    /// The setting that fits under `needed_bytes`.
    pub setting: RefusedSetting,
    /// Each lever the run does not use yet, with the smallest cap it fits under with it.
    pub levers: Vec<LeverNeed>,
}

/// The setting that needs the least: its micro-batch, data pipeline and peak.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RefusedSetting {
    pub micro_batch: usize,
    pub data: DataSettings,
    /// Device and data together, before the enforcer's headroom.
    pub peak_bytes: u64,
    pub device_bytes: u64,
    pub data_bytes: u64,
    /// Smaller micro-batches need more: accumulating keeps a sum of every gradient (where
    /// one pass updates inside backward), or the device allocator rounds their tensors
    /// into pages.
    pub smaller_micro_batches_need_more: bool,
}

/// A lever a refused run could still pull, and the smallest cap it fits under with it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LeverNeed {
    pub lever: Lever,
    pub needed_bytes: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Lever {
    /// The dataset cut into smaller chunks (`headroom prepare --chunk-samples`).
    SmallerChunks {
        chunk_samples: usize,
    },
    F16Storage,
    /// f16 parameters without the f32 master copy (`--precision f16-pure`).
    F16WithoutMaster,
    Checkpointing,
    EightBitMoments,
    /// Every other lever of the list at once.
    AllOfThese,
}

impl std::fmt::Display for Lever {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lever::SmallerChunks { chunk_samples: size } => {
                write!(
                    f,
                    "chunks of {size} samples, made by headroom prepare --chunk-samples {size}"
                )
            }
            Lever::F16Storage => f.write_str("f16 storage"),
            Lever::F16WithoutMaster => f.write_str("f16 storage without the f32 master copy"),
            Lever::Checkpointing => f.write_str("checkpointing"),
            Lever::EightBitMoments => f.write_str("8-bit moments"),
            Lever::AllOfThese => f.write_str("all of these"),
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bytes = |b: u64| format_bytes(b as usize);
        let bytes_up = |b: u64| format_bytes_up(b as usize);
        let setting = &self.setting;
        write!(
            f,
            "a cap of {} fits no setting of this run: the smallest cap that fits is {} (micro-batch {}, {}: \
             a peak of {} (device {}, data {}) and the enforcer's 10% headroom",
            bytes(self.cap_bytes),
            bytes_up(self.needed_bytes),
            setting.micro_batch,
            setting.data,
            bytes(setting.peak_bytes),
            bytes(setting.device_bytes),
            bytes(setting.data_bytes),
        )?;
        if setting.smaller_micro_batches_need_more {
            f.write_str(
                "; smaller micro-batches need more here: they accumulate, which keeps a sum of every \
                 gradient, or the device allocator rounds their tensors into pages",
            )?;
        }
        f.write_str("). ")?;
        let fitting: Vec<String> = (self.levers.iter())
            .filter(|l| l.needed_bytes <= self.cap_bytes)
            .map(|l| format!("{} (fits under {})", l.lever, bytes_up(l.needed_bytes)))
            .collect();
        if !fitting.is_empty() {
            return write!(
                f,
                "Under {} it fits with {}; or raise the cap.",
                bytes(self.cap_bytes),
                fitting.join(", or ")
            );
        }
        let needs: Vec<String> = (self.levers.iter())
            .map(|l| format!("{} with {}", bytes_up(l.needed_bytes), l.lever))
            .collect();
        let needs = match needs.is_empty() {
            true => String::new(),
            false => format!(" (it would need {})", needs.join(", ")),
        };
        write!(
            f,
            "No lever left to this run fits {}{needs}: raise the cap or choose a smaller model.",
            bytes(self.cap_bytes)
        )
    }
}

#[cfg(test)]
mod tests {
    // In the browser (wasm-pack test, tests/run-all) these run as wasm-bindgen tests.
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    fn refusal(cap_bytes: u64) -> Refusal {
        Refusal {
            cap_bytes,
            needed_bytes: 14 * 1024 * 1024 + 1,
            setting: RefusedSetting {
                micro_batch: 32,
                data: DataSettings {
                    prefetch: 1,
                    pause_training_for_eval: true,
                },
                peak_bytes: 12 << 20,
                device_bytes: 10 << 20,
                data_bytes: 2 << 20,
                smaller_micro_batches_need_more: false,
            },
            levers: vec![
                LeverNeed {
                    lever: Lever::SmallerChunks { chunk_samples: 256 },
                    needed_bytes: 13 << 20,
                },
                LeverNeed {
                    lever: Lever::Checkpointing,
                    needed_bytes: 11 << 20,
                },
            ],
        }
    }

    /// The page gets numbers and kinds, never text to parse back.
    #[test]
    fn a_refusal_crosses_the_boundary_as_figures() {
        let json = serde_json::to_value(refusal(1 << 20)).unwrap();
        assert_eq!(json["cap_bytes"], 1 << 20);
        assert_eq!(json["needed_bytes"], 14 * 1024 * 1024 + 1);
        assert_eq!(json["setting"]["data"]["prefetch"], 1);
        assert_eq!(json["levers"][0]["lever"]["kind"], "smaller-chunks");
        assert_eq!(json["levers"][0]["lever"]["chunk_samples"], 256);
        assert_eq!(json["levers"][1]["lever"]["kind"], "checkpointing");
        assert_eq!(json["levers"][1]["needed_bytes"], 11 << 20);
    }

    /// The command line's words, made from the same figures: the cap that fits rounded up,
    /// so that it really fits; the levers that fit the cap, or what each would need.
    #[test]
    fn a_refusal_says_the_cap_that_fits_and_what_each_lever_needs() {
        let none_fits = TrainError::CapTooSmall(Box::new(refusal(1 << 20))).to_string();
        assert!(none_fits.starts_with(
            "a cap of 1.0 MiB fits no setting of this run: the smallest cap that fits is 14.1 MiB \
             (micro-batch 32, prefetch 1, training stream paused for evaluation: a peak of 12.0 MiB"
        ));
        assert!(none_fits.ends_with(
            "No lever left to this run fits 1.0 MiB (it would need 13.0 MiB with chunks of 256 samples, \
             made by headroom prepare --chunk-samples 256, 11.0 MiB with checkpointing): raise the cap \
             or choose a smaller model."
        ));
        let one_fits = refusal(12 << 20).to_string();
        assert!(
            one_fits.ends_with(
                "Under 12.0 MiB it fits with checkpointing (fits under 11.0 MiB); or raise the cap."
            )
        );
    }
}
