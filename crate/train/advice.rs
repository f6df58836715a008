//! Why a cap fits no setting, computed rather than guessed: the planner is asked again
//! with each lever the run does not use yet, and the refusal names the smallest cap that
//! fits as the run stands and the levers that would make the asked cap fit.

use super::config::{Precision, TrainConfig};
use super::error::TrainError;
use super::plan::{RunPlan, data_options};
use crate::data::ChunkFootprint;
use crate::memory::enforcer;
use crate::memory::{Candidate, Plan, PlanRequest, plan};
use crate::units::{format_bytes, format_bytes_up};

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

/// The candidate of `plan` that fits under the smallest cap, and that cap.
fn smallest(plan: &Plan) -> (&Candidate, u64) {
    let candidate = plan
        .smallest_fitting()
        .expect("every effective batch has the divisor 1");
    (candidate, enforcer::cap_for(candidate.peak()))
}

/// One lever tried: its name and the smallest cap the run fits under with it.
struct Tried {
    lever: String,
    needed: u64,
}

/// The plan again for `request`, corrected by the run's probes where it has them: what
/// they measured beyond the census is mostly the allocator's pages, which another
/// precision or checkpointing keeps.
fn replan(run_plan: &RunPlan, request: &PlanRequest) -> Plan {
    let mut again = plan(request, run_plan.plan.cap);
    if let Some(calibration) = &run_plan.plan.calibration {
        again.calibrate(calibration.clone());
    }
    again
}

fn levers_tried(run_plan: &RunPlan, config: &TrainConfig) -> Vec<Tried> {
    let request = &run_plan.request;
    let mut tried = Vec::new();
    let mut all = request.clone();
    // The largest chunks that fit the cap, or the smallest suggested where none does.
    let cap = config.cap.unwrap_or(0);
    let chunk_levers: Vec<(usize, PlanRequest, u64)> = run_plan
        .levers
        .smaller_chunks
        .iter()
        .map(|&(size, train, eval)| {
            let changed = PlanRequest {
                data: data_options(config, train, eval),
                ..request.clone()
            };
            let needed = smallest(&replan(run_plan, &changed)).1;
            (size, changed, needed)
        })
        .collect();
    let chunk_lever = chunk_levers
        .iter()
        .find(|(_, _, needed)| *needed <= cap)
        .or(chunk_levers.last());
    if let Some((size, changed, needed)) = chunk_lever {
        let lever = format!("chunks of {size} samples, made by headroom prepare --chunk-samples {size}");
        all.data = changed.data.clone();
        tried.push(Tried {
            lever,
            needed: *needed,
        });
    }
    if run_plan.precision == Precision::F32 && run_plan.levers.f16_available {
        let changed = PlanRequest {
            precisions: vec![Precision::F16],
            ..request.clone()
        };
        tried.push(tried_with("f16 storage", run_plan, &changed));
        all.precisions = vec![Precision::F16];
    }
    if !config.checkpointing {
        let changed = PlanRequest {
            checkpointing: vec![true],
            ..request.clone()
        };
        tried.push(tried_with("checkpointing", run_plan, &changed));
        all.checkpointing = vec![true];
    }
    if tried.len() > 1 {
        tried.push(tried_with("all of these", run_plan, &all));
    }
    tried
}

fn tried_with(lever: &str, run_plan: &RunPlan, changed: &PlanRequest) -> Tried {
    Tried {
        lever: lever.into(),
        needed: smallest(&replan(run_plan, changed)).1,
    }
}

/// The refusal for a cap no setting fits: the smallest cap that fits and its setting; the
/// levers that would fit the asked cap, or, where none would, what each would need.
pub fn refusal(run_plan: &RunPlan, config: &TrainConfig) -> TrainError {
    let cap = config.cap.unwrap_or(0);
    let (best, needed) = smallest(&run_plan.plan);
    let smallest_micro_batch = run_plan.plan.candidates.iter().map(|c| c.micro_batch).min();
    let mut setting = format!(
        "micro-batch {}, {}: a peak of {} (device {}, data {}) and the enforcer's 10% headroom",
        best.micro_batch,
        best.data,
        format_bytes(best.peak() as usize),
        format_bytes(best.peak().saturating_sub(best.breakdown.data) as usize),
        format_bytes(best.breakdown.data as usize),
    );
    if smallest_micro_batch.is_some_and(|m| m < best.micro_batch) {
        setting.push_str(
            "; smaller micro-batches need more here, as the device allocator rounds their tensors into pages",
        );
    }
    let tried = levers_tried(run_plan, config);
    let fitting: Vec<String> = tried
        .iter()
        .filter(|t| t.needed <= cap)
        .map(|t| format!("{} (fits under {})", t.lever, format_bytes_up(t.needed as usize)))
        .collect();
    let advice = if !fitting.is_empty() {
        format!(
            "Under {} it fits with {}; or raise the cap.",
            format_bytes(cap as usize),
            fitting.join(", or ")
        )
    } else {
        let needs: Vec<String> = tried
            .iter()
            .map(|t| format!("{} with {}", format_bytes_up(t.needed as usize), t.lever))
            .collect();
        let needs = match needs.is_empty() {
            true => String::new(),
            false => format!(" (it would need {})", needs.join(", ")),
        };
        format!(
            "No lever left to this run fits {}{needs}: raise the cap or choose a smaller model.",
            format_bytes(cap as usize)
        )
    };
    TrainError::CapTooSmall {
        cap: format_bytes(cap as usize),
        needed: format_bytes_up(needed as usize),
        setting,
        advice,
    }
}

/// One lever's predicted device peak for the run's effective batch, beside the others.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LeverPeak {
    pub lever: &'static str,
    pub micro_batch: usize,
    pub precision: Precision,
    pub checkpointing: bool,
    /// The census's device reservation.
    pub device_bytes: u64,
}

/// What each memory lever would hold for this run, by the census: none (the whole batch
/// in one f32 pass, everything kept), accumulation over four micro-batches, f16 storage
/// (where the device has it), checkpointing, and all of them: what the page shows so a
/// user sees what each lever saves before choosing.
pub fn lever_peaks(run_plan: &RunPlan) -> Vec<LeverPeak> {
    let request = &run_plan.request;
    let whole = request.effective_batch;
    let quarter = if whole % 4 == 0 { whole / 4 } else { whole };
    let mut settings = vec![
        ("none", whole, Precision::F32, false),
        ("accumulation 4x", quarter, Precision::F32, false),
    ];
    let f16_available = run_plan.levers.f16_available;
    if f16_available {
        settings.push(("f16", whole, Precision::F16, false));
    }
    settings.push(("checkpointing", whole, Precision::F32, true));
    let all_precision = if f16_available {
        Precision::F16
    } else {
        Precision::F32
    };
    settings.push(("all of them", quarter, all_precision, true));
    settings
        .into_iter()
        .map(|(lever, micro_batch, precision, checkpointing)| LeverPeak {
            lever,
            micro_batch,
            precision,
            checkpointing,
            device_bytes: crate::memory::planner::predict(request, micro_batch, precision, checkpointing)
                .device(),
        })
        .collect()
}
