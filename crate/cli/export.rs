//! `headroom export`: a saved run's parameters as a safetensors file that PyTorch's
//! definitions of the same networks load as they are (crate/train/safetensors.rs).

use std::path::PathBuf;

use anyhow::Context;
use burn::prelude::Device;
use clap::Args;

use super::checkpoint_dir;
use crate::data::DataSource;
use crate::train::saved_run;
use crate::units::format_bytes;

#[derive(Args)]
pub struct ExportArgs {
    /// A folder a run was saved in (by `train --save` or `--checkpoint-dir`), or a run file
    /// the page exported ("Download run").
    run: PathBuf,
    /// The safetensors file to write.
    #[arg(long)]
    out: PathBuf,
    /// Dataset URL or folder; the saved run's unless given (a run file from the page needs
    /// it). Its manifest builds the model and gives a text model's vocabulary.
    #[arg(long)]
    data: Option<String>,
}

pub async fn run(args: ExportArgs) -> anyhow::Result<()> {
    let (saved_data, saved) = checkpoint_dir::load(&args.run)?;
    let data = args.data.clone().or(saved_data).context(super::eval::NO_DATA)?;
    let source = DataSource::open(&data, saved.state.config.stream_options()).await?;
    let (trainer, _) = saved_run::restore(
        &saved,
        |config| {
            config.calibrate = false;
            config.cap = None;
        },
        &source,
        Device::flex(),
        "flex",
    )
    .await?;
    let bytes = saved_run::safetensors_bytes(&trainer, &source).await?;
    super::checkpoint_dir::write_atomically(&args.out, &bytes)?;
    println!(
        "wrote the {} at step {} to {} ({}, f32, PyTorch's names and layouts)",
        trainer.config().model.name().to_uppercase(),
        trainer.step(),
        args.out.display(),
        format_bytes(bytes.len())
    );
    Ok(())
}
