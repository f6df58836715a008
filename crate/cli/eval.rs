//! `headroom eval`: a saved run's accuracy and loss on a dataset's test split.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use super::checkpoint_dir;
use crate::data::{DataSource, Split};
use crate::train::{BackendKind, saved_run};

/// What a run file from the page lacks.
pub const NO_DATA: &str = "a run file exported from the page names no dataset location: pass --data URL";

#[derive(Args)]
pub struct EvalArgs {
    /// A folder a run was saved in (by `train --save` or `--checkpoint-dir`), or a run file
    /// the page exported ("Download run").
    dir: PathBuf,
    /// Dataset URL or folder; the saved run's unless given (a run file from the page needs
    /// it). It must be the dataset the run was trained on.
    #[arg(long)]
    data: Option<String>,
    #[arg(long, value_enum, default_value = "wgpu")]
    backend: BackendKind,
    /// test or train.
    #[arg(long, default_value = "test")]
    split: Split,
    /// Evaluate on the first N samples the stream yields instead of the whole split.
    #[arg(long)]
    samples: Option<usize>,
    /// Print the evaluation as JSON.
    #[arg(long)]
    json: bool,
    /// Also write the logits to this .npy file (f32, one row of classes per prediction: an
    /// image, or a token position of text), in the split's file order.
    #[arg(long)]
    logits: Option<PathBuf>,
}

/// `values` as a [rows, columns] little-endian f32 array in NumPy's .npy format (version 1.0).
fn npy(values: &[f32], columns: usize) -> Vec<u8> {
    let rows = values.len() / columns.max(1);
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, {columns}), }}");
    // The magic, version and length (10 bytes), the header and its newline: a multiple of
    // 64, as the format asks.
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    out.extend(values.iter().flat_map(|v| v.to_le_bytes()));
    out
}

pub async fn run(args: EvalArgs) -> anyhow::Result<()> {
    if let Some(why) = args.backend.unavailable() {
        anyhow::bail!(why);
    }
    let (saved_data, saved) = checkpoint_dir::load(&args.dir)?;
    let data = args.data.clone().or(saved_data).context(NO_DATA)?;
    let mut options = saved.state.config.stream_options();
    // Logits are written in the split's file order, so that row i is sample i (an
    // evaluation otherwise reads in the run's shuffled order).
    options.shuffle &= args.logits.is_none();
    let source = DataSource::open(&data, options).await?;
    let (mut trainer, _) = saved_run::restore(
        &saved,
        |config| {
            // Evaluation takes no training step: nothing to probe, no cap to plan for.
            config.calibrate = false;
            config.cap = None;
            config.eval_samples = args.samples;
        },
        &source,
        args.backend.device(),
        args.backend.name(),
    )
    .await?;
    let eval = match &args.logits {
        None => trainer.evaluate(&source, args.split).await?,
        Some(path) => {
            let (eval, logits) = trainer.evaluate_logits(&source, args.split).await?;
            let bytes = npy(&logits, trainer.input().classes);
            std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
            eval
        }
    };
    if args.json {
        println!("{}", serde_json::to_string(&eval)?);
    } else {
        println!(
            "{} accuracy {:.2}% (loss {:.4}, perplexity {:.2}) on {} samples, after step {}",
            args.split,
            100.0 * eval.accuracy,
            eval.loss,
            eval.perplexity,
            eval.samples,
            eval.step
        );
    }
    Ok(())
}
