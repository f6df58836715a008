//! One training engine for the CLI and the page: micro-batches with explicit gradient
//! accumulation, optimizers, learning-rate schedule, evaluation, memory samples.

pub mod advice;
pub mod config;
pub mod error;
pub mod events;
pub mod optimizer;
pub mod plan;
pub mod precision;
pub mod probe;
pub mod quantize;
pub mod recompute;
pub mod run;
pub mod safetensors;
pub mod saved_run;
pub mod schedule;
pub mod step;
pub mod tensors;
pub mod trainer;

pub use crate::ops::backend::BackendKind;
pub use config::{Duration, Moments, OptimizerConfig, OptimizerKind, Precision, TrainConfig};
pub use error::TrainError;
pub use events::TrainEvent;
pub use run::Progress;
pub use trainer::Trainer;
