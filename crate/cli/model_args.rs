//! Arguments `train`, `plan` and `bench` share: which model, how big a batch.

use clap::Args;

use crate::model::{GptShape, ModelConfig};

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum ModelKind {
    Mlp,
    Cnn,
    /// A GPT over a text dataset (headroom prepare --text).
    Gpt,
}

#[derive(Args, Clone, Debug)]
pub struct ModelArgs {
    #[arg(long, value_enum, default_value = "mlp")]
    pub model: ModelKind,
    /// MLP hidden widths, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "512,256")]
    pub hidden: Vec<usize>,
    /// CNN channels per conv block, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "16,32")]
    pub channels: Vec<usize>,
    /// GPT blocks.
    #[arg(long, default_value_t = 4)]
    pub layers: usize,
    /// GPT attention heads per block.
    #[arg(long, default_value_t = 4)]
    pub heads: usize,
    /// GPT embedding width.
    #[arg(long, default_value_t = 128)]
    pub width: usize,
    /// GPT context: the tokens each position may look back over.
    #[arg(long, default_value_t = 64)]
    pub context: usize,
    /// Samples per optimizer step (windows of text for the GPT).
    #[arg(long, default_value_t = 256)]
    pub effective_batch: usize,
    /// Samples per forward/backward pass: `auto` lets the planner pick the largest that
    /// fits the cap.
    #[arg(long, default_value = "auto", value_parser = parse_micro_batch)]
    pub micro_batch: MicroBatch,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MicroBatch {
    Auto,
    Fixed(usize),
}

impl MicroBatch {
    pub fn fixed(self) -> Option<usize> {
        match self {
            MicroBatch::Auto => None,
            MicroBatch::Fixed(n) => Some(n),
        }
    }
}

fn parse_micro_batch(text: &str) -> Result<MicroBatch, String> {
    if text == "auto" {
        return Ok(MicroBatch::Auto);
    }
    match text.parse::<usize>() {
        Ok(0) | Err(_) => Err(format!(
            "{text:?}: expected `auto` or a whole number of samples, at least 1"
        )),
        Ok(n) => Ok(MicroBatch::Fixed(n)),
    }
}

impl ModelArgs {
    pub fn model_config(&self) -> ModelConfig {
        match self.model {
            ModelKind::Mlp => ModelConfig::Mlp {
                hidden: self.hidden.clone(),
            },
            ModelKind::Cnn => ModelConfig::Cnn {
                channels: self.channels.clone(),
            },
            ModelKind::Gpt => ModelConfig::Gpt(GptShape {
                layers: self.layers,
                heads: self.heads,
                width: self.width,
                context: self.context,
            }),
        }
    }
}
