use crate::data::DataError;

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
    #[error("reading a result back from the device failed: {0}")]
    Readback(String),
}
