//! A saved run on disk: `run.json` (the state, the data location and the names of its two
//! blobs) beside `model-STEP.bpk` and `optimizer-STEP.bpk`; or, read only, a run file the
//! page exported.
//!
//! A save never leaves the folder without a whole checkpoint: the blobs of the new step
//! get names of their own, each file is written to a temporary name, flushed to disk and
//! renamed into place, and `run.json` is replaced last, so a crash at any point leaves the
//! previous `run.json` naming blobs that are still there. The older blobs are removed
//! only after that.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::train::saved_run::{Checkpoint, RunState};

const RUN_FILE: &str = "run.json";
/// A larger `run.json` is not one this program wrote (its history holds 4 bytes a step).
const MAX_RUN_FILE_BYTES: u64 = 256 << 20;
/// A run file from the page holds a model that trained in a browser tab.
const MAX_RUN_BLOB_BYTES: u64 = 16 << 30;

#[derive(Serialize, Deserialize)]
struct RunFile {
    /// The dataset's URL or folder, as the run was started with.
    data: String,
    model: String,
    optimizer: String,
    state: RunState,
}

/// Writes `bytes` to `path` so that a reader sees either the old file or the whole new one.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let temporary = path.with_file_name(format!(".{name}.tmp"));
    let mut file =
        std::fs::File::create(&temporary).with_context(|| format!("cannot write {}", temporary.display()))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", temporary.display()))?;
    std::fs::rename(&temporary, path).with_context(|| format!("cannot replace {}", path.display()))
}

/// Flushes the folder's entries (the renames) to disk.
fn sync_folder(dir: &Path) -> anyhow::Result<()> {
    std::fs::File::open(dir)
        .and_then(|folder| folder.sync_all())
        .with_context(|| format!("cannot flush {}", dir.display()))
}

/// Saves `checkpoint` into `dir`, created if missing, replacing the one there.
pub fn save(dir: &Path, data: &str, checkpoint: &Checkpoint) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let step = checkpoint.state.step;
    let run = RunFile {
        data: data.to_string(),
        model: format!("model-{step:08}.bpk"),
        optimizer: format!("optimizer-{step:08}.bpk"),
        state: checkpoint.state.clone(),
    };
    write_atomically(&dir.join(&run.model), &checkpoint.model)?;
    write_atomically(&dir.join(&run.optimizer), &checkpoint.optimizer)?;
    sync_folder(dir)?;
    write_atomically(&dir.join(RUN_FILE), &serde_json::to_vec(&run)?)?;
    sync_folder(dir)?;
    remove_unnamed_blobs(dir, &[&run.model, &run.optimizer])
}

/// Removes blobs of earlier saves and temporary files of interrupted ones.
fn remove_unnamed_blobs(dir: &Path, keep: &[&str]) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        let blob = (name.starts_with("model-") || name.starts_with("optimizer-")) && name.ends_with(".bpk");
        let temporary = name.starts_with('.') && name.ends_with(".tmp");
        if (blob && !keep.contains(&name)) || temporary {
            std::fs::remove_file(dir.join(name)).with_context(|| format!("cannot remove {name}"))?;
        }
    }
    Ok(())
}

fn read_limited(path: &Path, limit: u64) -> anyhow::Result<Vec<u8>> {
    let size = std::fs::metadata(path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .len();
    anyhow::ensure!(
        size <= limit,
        "{} is {size} bytes, more than a saved run holds",
        path.display()
    );
    std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}

/// A blob named in `run.json`: a plain file name in the same folder, nothing else.
fn blob_path(dir: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let plain = Path::new(name).file_name().is_some_and(|n| n == name);
    anyhow::ensure!(plain, "{RUN_FILE} names {name:?}, which is not a file beside it");
    Ok(dir.join(name))
}

/// The checkpoint saved at `path`, and the data location the run was started with: a
/// folder this module wrote, or a run file the page exported (one blob, see
/// `Checkpoint::to_bytes`), which names no data location.
pub fn load(path: &Path) -> anyhow::Result<(Option<String>, Checkpoint)> {
    if path.is_file() {
        let bytes = read_limited(path, MAX_RUN_BLOB_BYTES)?;
        let checkpoint = Checkpoint::from_bytes(&bytes)
            .with_context(|| format!("{} is not a saved run", path.display()))?;
        return Ok((None, checkpoint));
    }
    let (data, checkpoint) = load_folder(path)?;
    Ok((Some(data), checkpoint))
}

fn load_folder(dir: &Path) -> anyhow::Result<(String, Checkpoint)> {
    let path = dir.join(RUN_FILE);
    anyhow::ensure!(
        path.is_file(),
        "{} holds no saved run (no {RUN_FILE})",
        dir.display()
    );
    let run: RunFile = serde_json::from_slice(&read_limited(&path, MAX_RUN_FILE_BYTES)?)
        .with_context(|| format!("{} is not a saved run", path.display()))?;
    let blob = |name: &str| -> anyhow::Result<Vec<u8>> {
        let path = blob_path(dir, name)?;
        std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))
    };
    let checkpoint = Checkpoint {
        model: blob(&run.model)?,
        optimizer: blob(&run.optimizer)?,
        state: run.state,
    };
    Ok((run.data, checkpoint))
}
