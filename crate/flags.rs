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

/// Which model and its size: the flags `train`, `plan`, `bench train` and `bench soak` all
/// take, with the same defaults.
#[derive(Args, Clone, Debug)]
pub struct ModelShapeArgs {
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
}

/// The model and the batch: what `train`, `plan` and `bench soak` take.
#[derive(Args, Clone, Debug)]
pub struct ModelArgs {
    #[command(flatten)]
    pub shape: ModelShapeArgs,
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
        self.shape.model_config()
    }
}

impl ModelShapeArgs {
    /// The same flags again, for a `headroom train` the benchmarks start as a process of
    /// its own.
    pub fn to_flags(&self) -> Vec<String> {
        [
            ("--model", self.model_config().name().to_string()),
            ("--hidden", comma_separated(&self.hidden)),
            ("--channels", comma_separated(&self.channels)),
            ("--layers", self.layers.to_string()),
            ("--heads", self.heads.to_string()),
            ("--width", self.width.to_string()),
            ("--context", self.context.to_string()),
        ]
        .into_iter()
        .flat_map(|(flag, value)| [flag.to_string(), value])
        .collect()
    }

    /// The model's size in words: its widths, channels or GPT shape.
    pub fn size(&self) -> String {
        match self.model {
            ModelKind::Mlp => comma_separated(&self.hidden),
            ModelKind::Cnn => comma_separated(&self.channels),
            ModelKind::Gpt => format!(
                "{} layers x {} wide, {} heads, context {}",
                self.layers, self.width, self.heads, self.context
            ),
        }
    }

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

/// `[512, 256]` as the flags take it: `512,256`.
fn comma_separated(values: &[usize]) -> String {
    values
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        shape: ModelShapeArgs,
    }

    fn parse(args: impl IntoIterator<Item = String>) -> ModelShapeArgs {
        Command::try_parse_from(std::iter::once("headroom".to_string()).chain(args))
            .unwrap()
            .shape
    }

    /// What `bench train` passes to each `headroom train` it starts is the model it was given.
    #[test]
    fn the_flags_given_again_parse_to_the_same_model() {
        for args in [
            vec!["--model", "mlp", "--hidden", "1024,64,32"],
            vec!["--model", "cnn", "--channels", "4,8,16"],
            vec![
                "--model",
                "gpt",
                "--layers",
                "6",
                "--heads",
                "6",
                "--width",
                "384",
                "--context",
                "256",
            ],
        ] {
            let given = parse(args.into_iter().map(String::from));
            let again = parse(given.to_flags());
            assert_eq!(again.model_config(), given.model_config());
            assert_eq!(again.size(), given.size());
        }
    }
}
