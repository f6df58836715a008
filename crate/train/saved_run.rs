//! A run's whole state between two steps, so that it can stop and go on later with the
//! same losses: the parameters (the f32 master weights, with their ids, which key the
//! optimizer's state), the optimizer's state, the step and epoch, the loss scale, the
//! micro-batch the enforcer left, the data stream's place (chunks read, samples read of
//! each open one, the mixer's draws) and the metrics so far. The learning rate follows
//! from the step, the order of chunks and samples from the seed and the epoch, so neither
//! is stored. Where the bytes go (files natively) is the caller's business.

use burn::module::Module;
use burn::prelude::*;
use burn::store::ModuleRecord;
use burn::tensor::Bytes;
use serde::{Deserialize, Serialize};

use super::config::{Precision, TrainConfig};
use super::error::TrainError;
use super::precision::LossScaler;
use super::run::{History, Progress};
use super::safetensors;
use super::tensors::cpu_copy;
use super::trainer::Trainer;
use crate::data::chunk::sha256_hex;
use crate::data::{BatchReader, DataSource, ReaderPosition, Split};
use crate::memory::{Calibration, Candidate, Enforcement, Enforcer, MemorySample};
use crate::model::Model;

/// Bumped when [`RunState`] changes shape: an older saved run is refused in plain words
/// rather than half read.
pub const FORMAT: u32 = 1;

/// How a checkpoint blob begins (see [`Checkpoint::to_bytes`]).
pub const MAGIC: &[u8] = b"HEADROOM RUN\n";

/// Everything of a run but its tensors.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunState {
    pub format: u32,
    pub config: TrainConfig,
    /// Optimizer steps done.
    pub step: u64,
    pub epoch: u64,
    pub samples_seen: u64,
    pub micro_batch: usize,
    pub scaler: Option<LossScaler>,
    pub skipped_in_a_row: u32,
    pub skipped_steps: u64,
    pub enforcer: Option<Enforcer>,
    pub enforcements: Vec<Enforcement>,
    /// The setting the run started with as the plan judged it, and the probe steps it
    /// was calibrated on: a resumed run takes them as they were rather than probing again.
    pub planned: Candidate,
    pub calibration: Option<Calibration>,
    /// Where the training stream is; `None` between epochs.
    pub reader: Option<ReaderPosition>,
    pub history: History,
    /// Training time so far, pauses excluded.
    pub busy_seconds: f64,
    pub run_peak: MemorySample,
    /// sha256 of the dataset's manifest: a run goes on only over the data it began on.
    pub dataset_sha256: String,
    /// sha256 of the parameters' and the optimizer's bytes, checked before either is read.
    pub model_sha256: String,
    pub optimizer_sha256: String,
}

/// A saved run: its state and two burnpack blobs.
pub struct Checkpoint {
    pub state: RunState,
    pub model: Vec<u8>,
    pub optimizer: Vec<u8>,
}

fn dataset_sha256(source: &DataSource) -> String {
    sha256_hex(&serde_json::to_vec(source.manifest()).expect("a manifest serializes"))
}

fn unusable(what: &str, error: impl std::fmt::Display) -> TrainError {
    TrainError::Checkpoint(format!("{what}: {error}"))
}

/// The parameters as a burnpack blob, ids included (they key the optimizer's state).
pub async fn model_bytes(model: &Model) -> Result<Vec<u8>, TrainError> {
    let bytes = cpu_copy(model)
        .await?
        .into_record()
        .into_bytes()
        .map_err(|e| unusable("writing the parameters", e))?;
    Ok(bytes.to_vec())
}

/// A run's model as [`safetensors::export`] writes it, with the step and, for text, the vocabulary (the
/// characters in token order) in the metadata: what `headroom export` and the page's
/// "Download model (safetensors)" give.
pub async fn safetensors_bytes(trainer: &Trainer, source: &DataSource) -> Result<Vec<u8>, TrainError> {
    let mut extra =
        std::collections::HashMap::from([("headroom.step".to_string(), trainer.step().to_string())]);
    if let Some(vocabulary) = &source.manifest().vocabulary {
        let json = serde_json::to_string(vocabulary).expect("strings serialize");
        extra.insert("headroom.vocabulary".into(), json);
    }
    safetensors::export(trainer.model(), &trainer.config().model, &trainer.input(), extra).await
}

impl Checkpoint {
    /// Refuses a checkpoint of another format, or whose blobs are not the ones its state
    /// names (a torn or tampered save), before anything parses them.
    pub fn verify(&self) -> Result<(), TrainError> {
        if self.state.format != FORMAT {
            return Err(TrainError::Checkpoint(format!(
                "it was written in format {}, this build reads format {FORMAT}",
                self.state.format
            )));
        }
        for (name, bytes, expected) in [
            ("parameters", &self.model, &self.state.model_sha256),
            ("optimizer state", &self.optimizer, &self.state.optimizer_sha256),
        ] {
            let actual = sha256_hex(bytes);
            if &actual != expected {
                return Err(TrainError::Checkpoint(format!(
                    "the {name} do not match their checksum (sha256 {actual}, saved as {expected})"
                )));
            }
        }
        Ok(())
    }

    /// The whole checkpoint as one blob (what the page keeps in the browser's storage):
    /// [`MAGIC`], then the state's JSON and the parameters, each after its length as a
    /// little-endian u64, then the optimizer's state to the end.
    pub fn to_bytes(&self) -> Vec<u8> {
        let state = serde_json::to_vec(&self.state).expect("a run state serializes");
        let mut bytes = MAGIC.to_vec();
        for section in [&state, &self.model] {
            bytes.extend((section.len() as u64).to_le_bytes());
            bytes.extend(section);
        }
        bytes.extend(&self.optimizer);
        bytes
    }

    /// Reads what [`to_bytes`](Self::to_bytes) wrote; refuses anything else in words.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, TrainError> {
        let not_a_run =
            || TrainError::Checkpoint("this is not a saved Headroom run, or it is cut short".into());
        let mut rest = bytes.strip_prefix(MAGIC).ok_or_else(not_a_run)?;
        let mut section = || -> Result<&[u8], TrainError> {
            let (length, after) = rest.split_first_chunk::<8>().ok_or_else(not_a_run)?;
            let length = usize::try_from(u64::from_le_bytes(*length)).map_err(|_| not_a_run())?;
            let (section, after) = after.split_at_checked(length).ok_or_else(not_a_run)?;
            rest = after;
            Ok(section)
        };
        let state = section()?;
        let model = section()?.to_vec();
        let state: RunState = serde_json::from_slice(state).map_err(|e| unusable("its state", e))?;
        Ok(Checkpoint {
            state,
            model,
            optimizer: rest.to_vec(),
        })
    }

    /// `model` with the saved parameters (and their ids) in place of its own. The
    /// architecture must match: a record for another model is refused.
    pub fn load_model(&self, model: Model) -> Result<Model, TrainError> {
        let record = ModuleRecord::from_bytes(Bytes::from_bytes_vec(self.model.clone()))
            .map_err(|e| unusable("reading the parameters", e))?;
        model
            .try_load_record(record)
            .map_err(|e| unusable("the parameters do not fit this model", e))
    }
}

/// The run as it stands between two steps.
pub async fn capture(
    trainer: &Trainer,
    progress: &Progress,
    source: &DataSource,
) -> Result<Checkpoint, TrainError> {
    let model = model_bytes(trainer.model()).await?;
    let optimizer = trainer.optimizer.to_bytes().await.map_err(TrainError::Readback)?;
    let (reader, history, busy) = progress.snapshot();
    let state = RunState {
        format: FORMAT,
        config: trainer.config.clone(),
        step: trainer.step,
        epoch: trainer.epoch,
        samples_seen: trainer.samples_seen,
        micro_batch: trainer.micro_batch,
        scaler: trainer.scaler.clone(),
        skipped_in_a_row: trainer.skipped_in_a_row,
        skipped_steps: trainer.skipped_steps,
        enforcer: trainer.enforcer,
        enforcements: trainer.enforcements.clone(),
        planned: trainer.planned.clone(),
        calibration: trainer.calibration.clone(),
        reader,
        history,
        busy_seconds: busy.as_secs_f64(),
        run_peak: trainer.run_peak,
        dataset_sha256: dataset_sha256(source),
        model_sha256: sha256_hex(&model),
        optimizer_sha256: sha256_hex(&optimizer),
    };
    Ok(Checkpoint {
        state,
        model,
        optimizer,
    })
}

/// A trainer and its progress as `checkpoint` left them, on `device`. `adjust` may change
/// what does not alter the math: the duration (to train on past the planned end; the
/// learning-rate schedule stretches to the new end), evaluation, calibration.
pub async fn restore(
    checkpoint: &Checkpoint,
    adjust: impl FnOnce(&mut TrainConfig),
    source: &DataSource,
    device: Device,
    backend: &str,
) -> Result<(Trainer, Progress), TrainError> {
    checkpoint.verify()?;
    let state = &checkpoint.state;
    if dataset_sha256(source) != state.dataset_sha256 {
        return Err(TrainError::Checkpoint(
            "the dataset is not the one the run was trained on (its manifest differs)".into(),
        ));
    }
    let mut config = state.config.clone();
    adjust(&mut config);
    // The plan and its calibration come from the save: no probe steps (they would hold
    // pages the run has to share its cap with), and no cap for the planner to refuse.
    let planning = TrainConfig {
        calibrate: false,
        cap: None,
        ..config.clone()
    };
    let mut trainer = Trainer::new(planning, source, device, backend).await?;
    trainer.config = config;
    let fresh = trainer.model.take().expect("a new trainer holds its model");
    let loaded = checkpoint.load_model(fresh)?;
    // The parameters are saved as f32 (f16-pure's exactly: every f16 is an f32) and go
    // back to f16 where the run keeps only those.
    trainer.model = Some(match trainer.precision() {
        Precision::F16Pure => super::precision::half_copy(&loaded),
        _ => loaded,
    });
    trainer
        .optimizer
        .load_bytes(&checkpoint.optimizer, &trainer.device)
        .and_then(|()| trainer.optimizer.check_fits(trainer.model()))
        .map_err(|why| unusable("reading the optimizer state", why))?;
    trainer.step = state.step;
    trainer.epoch = state.epoch;
    trainer.samples_seen = state.samples_seen;
    trainer.micro_batch = state.micro_batch;
    trainer.scaler = state.scaler.clone().filter(|_| trainer.scaler.is_some());
    trainer.skipped_in_a_row = state.skipped_in_a_row;
    trainer.skipped_steps = state.skipped_steps;
    trainer.enforcer = state.enforcer.filter(|_| trainer.config.cap.is_some());
    trainer.enforcements = state.enforcements.clone();
    trainer.planned = state.planned.clone();
    trainer.calibration = state.calibration.clone();
    trainer.run_peak = state.run_peak;
    let prefetch = trainer.data_settings().prefetch;
    let reader = match &state.reader {
        Some(position) => Some(
            BatchReader::resume(source, Split::Train, position, prefetch)
                .map_err(|why| unusable("the data stream's position", why))?,
        ),
        None => None,
    };
    let busy = std::time::Duration::try_from_secs_f64(state.busy_seconds).unwrap_or_default();
    Ok((trainer, Progress::resumed(reader, state.history.clone(), busy)))
}
