//! The planner's view of a training config.

use burn::prelude::Device;

use super::config::{OptimizerKind, Precision, TrainConfig};
use super::error::TrainError;
use crate::data::{ChunkFootprint, DataSource, Manifest, Split};
use crate::memory::calibration::ProbedLevers;
use crate::memory::planner::predict;
use crate::memory::{Candidate, DataOption, DataSettings, LeverCosts, Plan, PlanRequest, PoolModel};
use crate::model::InputShape;

/// What the trainer needs to know about a dataset: images of one channel with u8 labels,
/// or text of one-byte tokens.
pub fn input_shape(manifest: &Manifest) -> Result<InputShape, TrainError> {
    if manifest.is_text() {
        return Ok(InputShape::tokens(manifest.classes()));
    }
    match manifest.sample_shape[..] {
        [height, width] => Ok(InputShape::images(height, width, manifest.class_names.len())),
        ref other => Err(TrainError::Dataset(format!(
            "samples of shape {other:?}; expected [height, width] images"
        ))),
    }
}

/// The precision a device can run: f16 only where it stores and computes half floats.
pub fn effective_precision(asked: Precision, device: &Device, backend: &str) -> (Precision, Option<String>) {
    if asked.is_half() && !device.supports_dtype(Precision::F16.dtype()) {
        let note = format!("the {backend} device does not support f16 (shader-f16); training in f32");
        return (Precision::F32, Some(note));
    }
    (asked, None)
}

/// What the levers cost in time on this backend's device: a GPU's figures for wgpu and
/// CUDA on a hardware adapter, the CPU's for flex and ndarray, and for software adapters
/// the CPU's but for 8-bit moments, which run there as one kernel.
pub fn lever_costs(backend: &str) -> LeverCosts {
    match backend {
        "flex" | "ndarray" => LeverCosts::CPU,
        _ if crate::ops::backend::adapter_is_software() => LeverCosts::SOFTWARE_ADAPTER,
        _ => LeverCosts::GPU,
    }
}

/// Chunks smaller than this are not suggested: per-chunk overheads (a request, a checksum,
/// a visiting order) start to count.
const SMALLEST_SUGGESTED_CHUNK: usize = 256;

/// What the refusal may suggest beyond the run's own settings, found when it was planned.
#[derive(Clone, Debug, Default)]
pub struct Levers {
    /// Whether the device runs f16.
    pub f16_available: bool,
    /// Smaller chunk sizes for `headroom prepare`, largest first, each with the chunks it
    /// would give (training, evaluation).
    pub smaller_chunks: Vec<(usize, ChunkFootprint, ChunkFootprint)>,
}

/// The chunk sizes a refusal may suggest for a dataset cut into `chunk_samples`: a quarter,
/// a sixteenth, ... down to the smallest suggested.
pub fn smaller_chunk_sizes(chunk_samples: usize) -> impl Iterator<Item = usize> {
    std::iter::successors(Some(chunk_samples / 4), |size| Some(size / 4))
        .take_while(|&size| size >= SMALLEST_SUGGESTED_CHUNK)
}

/// A config checked against its dataset and device, and the planner's answer for it.
#[derive(Clone, Debug)]
pub struct RunPlan {
    pub input: InputShape,
    pub plan: Plan,
    /// Why the asked-for precision was not used.
    pub precision_note: Option<String>,
    /// What the plan was made for.
    pub request: PlanRequest,
    /// What a refusal may suggest beyond the run's own settings.
    pub levers: Levers,
}

impl RunPlan {
    /// The census's device reservation for a probe step of `micro_batch`, accumulating two
    /// micro-batches or not, as the probe ran, with the probed levers.
    pub fn probe_census(&self, micro_batch: usize, accumulating: bool, levers: ProbedLevers) -> u64 {
        let probe = PlanRequest {
            effective_batch: micro_batch * if accumulating { 2 } else { 1 },
            ..self.request.clone()
        };
        predict(
            &probe,
            micro_batch,
            levers.precision,
            levers.checkpointing,
            levers.moments,
        )
        .device()
    }

    /// The precision, checkpointing and moments the probes run with: the census's pick's,
    /// or where none fits the setting that fits under the smallest cap.
    pub fn probed_levers(&self) -> ProbedLevers {
        let setting: Option<&Candidate> = self.plan.chosen().or_else(|| self.plan.smallest_fitting());
        setting.map_or_else(ProbedLevers::default, Candidate::levers)
    }

    /// Whether the planner chose a lever the run did not fix: the precision,
    /// checkpointing or moments left to it under a cap.
    pub fn picks_levers(&self) -> bool {
        self.request.precisions.len() > 1
            || self.request.checkpointing.len() > 1
            || self.request.moments.len() > 1
    }
}

/// Validates `config` for `source` and plans it for `device`: what the trainer does before
/// step 1, and what the page previews before Start.
pub fn for_run(
    config: &TrainConfig,
    source: &DataSource,
    device: &Device,
    backend: &str,
) -> Result<RunPlan, TrainError> {
    let manifest = source.manifest();
    let input = input_shape(manifest)?;
    config.validate(&input).map_err(TrainError::Config)?;
    if manifest.is_text() && source.options().window != config.model.text_window() {
        return Err(TrainError::Config(format!(
            "the text stream cuts windows of {:?} tokens but the model reads {:?} (open the source with TrainConfig::stream_options)",
            source.options().window,
            config.model.text_window()
        )));
    }
    if source.sample_count(Split::Train) == 0 {
        return Err(TrainError::Dataset("the training split is empty".into()));
    }
    let (precision, precision_note) = match config.precision {
        Some(asked) => effective_precision(asked, device, backend),
        None => (Precision::F32, None),
    };
    let f16_available = device.supports_dtype(Precision::F16.dtype());
    let precisions = match config.precision {
        Some(_) => vec![precision],
        None => config.precision_choices(f16_available),
    };
    let manifest = source.manifest();
    let eval_samples = config.evaluate.then(|| config.eval_samples.unwrap_or(usize::MAX));
    let rechunked = |chunk_samples: usize| {
        let train = ChunkFootprint::rechunked(manifest, Split::Train, chunk_samples)
            .reading(source.mix(Split::Train));
        let eval = ChunkFootprint::rechunked(manifest, Split::Test, chunk_samples);
        let eval_chunks = eval_samples.map_or(0, |n| n.div_ceil(chunk_samples));
        (chunk_samples, train, eval.first_chunks(eval_chunks))
    };
    let levers = Levers {
        f16_available,
        // A text chunk holds at least one window.
        smaller_chunks: smaller_chunk_sizes(manifest.chunk_samples)
            .filter(|&size| size >= source.options().window.unwrap_or(0))
            .map(rechunked)
            .collect(),
    };
    let (train, eval) = footprints(config, source);
    let request = PlanRequest {
        precisions,
        ..request(config, &input, data_options(config, train, eval), backend)
    };
    Ok(RunPlan {
        input,
        plan: crate::memory::plan(&request, config.cap),
        precision_note,
        request,
        levers,
    })
}

/// The micro-batches a run may use: divisors of the effective batch, up to the one asked
/// for (all of them when the planner picks).
pub fn micro_batch_choices(config: &TrainConfig) -> Vec<usize> {
    let largest = config.micro_batch.unwrap_or(config.effective_batch);
    (1..=largest)
        .rev()
        .filter(|&m| config.effective_batch.is_multiple_of(m))
        .collect()
}

/// The chunks an evaluation reads: enough for `eval_samples`, or the whole test split.
pub fn eval_chunks(config: &TrainConfig, source: &DataSource) -> usize {
    let all = source.manifest().chunks_of(Split::Test).len();
    config
        .eval_samples
        .map_or(all, |samples| source.chunks_for(Split::Test, 0, samples))
}

/// The chunks a run streams: the training split's, and those its evaluations read (none
/// when it does not evaluate).
pub fn footprints(config: &TrainConfig, source: &DataSource) -> (ChunkFootprint, ChunkFootprint) {
    let train = source.footprint(Split::Train);
    let evaluated = if config.evaluate {
        eval_chunks(config, source)
    } else {
        0
    };
    (train, source.footprint(Split::Test).first_chunks(evaluated))
}

/// Every way the data pipeline may run for `config` over chunks of these footprints, with
/// what it holds at its peak: each prefetch depth up to the one asked for, and, where the
/// run evaluates, evaluation beside the training stream or with the training stream's
/// chunks released.
///
/// Beside training, evaluation adds its own stream to what the training stream holds
/// between steps: all its slots full of decoded chunks. The training stream's fetches take
/// milliseconds against a step's much longer compute, so it has caught up by the time a
/// step ends; were a fetch still under way as evaluation starts, its compressed body
/// would come on top, which the enforcer's headroom absorbs.
pub fn data_options(config: &TrainConfig, train: ChunkFootprint, eval: ChunkFootprint) -> Vec<DataOption> {
    let mut options = Vec::new();
    for prefetch in (0..=config.stream.prefetch).rev() {
        let training = train.stream_bytes(prefetch) as u64;
        if eval.count == 0 {
            options.push(data_option(prefetch, false, training));
            continue;
        }
        let evaluation = eval.stream_bytes(prefetch) as u64;
        let training_between_steps = training - train.body as u64;
        if config.pause_training_for_eval != Some(true) {
            options.push(data_option(prefetch, false, training_between_steps + evaluation));
        }
        if config.pause_training_for_eval != Some(false) {
            options.push(data_option(prefetch, true, training.max(evaluation)));
        }
    }
    options
}

fn data_option(prefetch: usize, pause_training_for_eval: bool, bytes: u64) -> DataOption {
    DataOption {
        settings: DataSettings {
            prefetch,
            pause_training_for_eval,
        },
        bytes,
    }
}

/// A plan request for `config` as it will run on `backend`: its precision and
/// checkpointing as fixed or left to the planner (f16 offered where the config allows it;
/// the caller narrows it to what the device runs), the micro-batch open up to the one
/// asked for, and the data pipeline's `data` options.
pub fn request(
    config: &TrainConfig,
    input: &InputShape,
    data: Vec<DataOption>,
    backend: &str,
) -> PlanRequest {
    PlanRequest {
        model: config.model.clone(),
        input: *input,
        effective_batch: config.effective_batch,
        optimizer: config.optimizer.kind,
        momentum: config.optimizer.kind == OptimizerKind::Sgd && config.optimizer.momentum > 0.0,
        data,
        pool: PoolModel::for_backend(backend),
        micro_batches: micro_batch_choices(config),
        precisions: config.precision_choices(true),
        checkpointing: config.checkpointing_choices(),
        moments: config.moments_choices(),
        costs: lever_costs(backend),
    }
}
