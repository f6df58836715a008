use crate::data::{DataError, ErrorKind};

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
    #[error(
        "a cap of {cap} fits no setting of this run: the smallest cap that fits is {needed} ({setting}). {advice}"
    )]
    CapTooSmall {
        cap: String,
        needed: String,
        setting: String,
        advice: String,
    },
    #[error(
        "step {step} held {peak}, over the cap of {cap}, and a smaller micro-batch frees nothing more: what remains is parameters, gradients and optimizer state; raise the cap or choose a smaller model"
    )]
    CapExceeded { step: u64, peak: String, cap: String },
    #[error("reading a result back from the device failed: {0}")]
    Readback(String),
    #[error("the saved run cannot be used: {0}")]
    Checkpoint(String),
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
            TrainError::Checkpoint(_) => ErrorKind::BadCheckpoint,
        }
    }
}
