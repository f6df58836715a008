//! Why a cap fits no setting, computed rather than guessed: the planner is asked again
//! with each lever the run does not use yet, and the refusal names the smallest cap that
//! fits as the run stands and the levers that would make the asked cap fit.

use super::config::{Moments, OptimizerKind, Precision, TrainConfig};
use super::error::{Lever, LeverNeed, Refusal, RefusedSetting, TrainError};
use super::plan::{RunPlan, data_options};
use crate::memory::enforcer;
use crate::memory::{Candidate, Plan, PlanRequest, plan};

impl RunPlan {
    /// The setting the run starts with, or why none fits the cap, in words that say what
    /// would.
    pub fn pick(&self, config: &TrainConfig) -> Result<&Candidate, TrainError> {
        if let Some(chosen) = self.plan.chosen() {
            return Ok(chosen);
        }
        Err(refusal(self, config))
    }
}

/// The candidate of `plan` that fits under the smallest cap, and that cap.
fn smallest(plan: &Plan) -> (&Candidate, u64) {
    let candidate = plan
        .smallest_fitting()
        .expect("every effective batch has the divisor 1");
    (candidate, enforcer::cap_for(candidate.peak()))
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

fn levers_tried(run_plan: &RunPlan, config: &TrainConfig) -> Vec<LeverNeed> {
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
        all.data = changed.data.clone();
        tried.push(LeverNeed {
            lever: Lever::SmallerChunks { chunk_samples: *size },
            needed_bytes: *needed,
        });
    }
    // Levers the planner weighed already (left to it under the cap) are not suggested.
    if !request.precisions.contains(&Precision::F16) && run_plan.levers.f16_available {
        let changed = PlanRequest {
            precisions: vec![Precision::F16],
            ..request.clone()
        };
        tried.push(tried_with(Lever::F16Storage, run_plan, &changed));
    }
    if !request.precisions.contains(&Precision::F16Pure) && run_plan.levers.f16_available {
        let changed = PlanRequest {
            precisions: vec![Precision::F16Pure],
            ..request.clone()
        };
        tried.push(tried_with(Lever::F16WithoutMaster, run_plan, &changed));
        all.precisions = vec![Precision::F16Pure];
    }
    if !request.checkpointing.contains(&true) {
        let changed = PlanRequest {
            checkpointing: vec![true],
            ..request.clone()
        };
        tried.push(tried_with(Lever::Checkpointing, run_plan, &changed));
        all.checkpointing = vec![true];
    }
    if !request.moments.contains(&Moments::Q8) && request.optimizer != OptimizerKind::Sgd {
        let changed = PlanRequest {
            moments: vec![Moments::Q8],
            ..request.clone()
        };
        tried.push(tried_with(Lever::EightBitMoments, run_plan, &changed));
        all.moments = vec![Moments::Q8];
    }
    if tried.len() > 1 {
        tried.push(tried_with(Lever::AllOfThese, run_plan, &all));
    }
    tried
}

fn tried_with(lever: Lever, run_plan: &RunPlan, changed: &PlanRequest) -> LeverNeed {
    LeverNeed {
        lever,
        needed_bytes: smallest(&replan(run_plan, changed)).1,
    }
}

/// The refusal for a cap no setting fits: the smallest cap that fits and its setting; the
/// levers that would fit the asked cap, or, where none would, what each would need.
pub fn refusal(run_plan: &RunPlan, config: &TrainConfig) -> TrainError {
    let (best, needed) = smallest(&run_plan.plan);
    let smallest_micro_batch = run_plan.plan.candidates.iter().map(|c| c.micro_batch).min();
    TrainError::CapTooSmall(Box::new(Refusal {
        cap_bytes: config.cap.unwrap_or(0),
        needed_bytes: needed,
        setting: RefusedSetting {
            micro_batch: best.micro_batch,
            data: best.data,
            peak_bytes: best.peak(),
            device_bytes: best.peak().saturating_sub(best.breakdown.data),
            data_bytes: best.breakdown.data,
            smaller_micro_batches_need_more: smallest_micro_batch.is_some_and(|m| m < best.micro_batch),
        },
        levers: levers_tried(run_plan, config),
    }))
}

/// Why the planner picked the levers it did, where the cap left them to it: the setting,
/// its expected time against the other settings that fit, and what the run without those
/// levers would have needed. `None` where every lever was fixed or nothing fits.
pub fn pick_reason(run_plan: &RunPlan) -> Option<String> {
    let chosen = run_plan.plan.chosen().filter(|_| run_plan.picks_levers())?;
    let fitting = run_plan.plan.candidates.iter().filter(|c| c.fits).count();
    let picked: Vec<&str> = [
        (chosen.precision == Precision::F16, "f16 storage"),
        (
            chosen.precision == Precision::F16Pure,
            "f16 storage without a master copy",
        ),
        (chosen.checkpointing, "checkpointing"),
        (chosen.moments == Moments::Q8, "8-bit moments"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    let levers = match picked.as_slice() {
        [] => "no precision, checkpointing or moments lever".to_string(),
        [one] => one.to_string(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    };
    let plain = run_plan
        .plan
        .candidates
        .iter()
        .filter(|c| c.precision == Precision::F32 && !c.checkpointing && c.moments == Moments::F32);
    let without = match plain.clone().filter(|c| c.fits).max_by_key(|c| c.micro_batch) {
        // The pick is this setting itself: nothing to set it against.
        Some(c) if c.micro_batch == chosen.micro_batch && picked.is_empty() => String::new(),
        Some(c) => format!(
            "; without levers it fits at micro-batch {} ({:.2}x)",
            c.micro_batch, c.relative_time
        ),
        None => format!(
            "; without levers it would need a cap of {}",
            crate::units::format_bytes_up(
                plain.map(|c| enforcer::cap_for(c.peak())).min().unwrap_or(0) as usize
            )
        ),
    };
    Some(format!(
        "the cap picked {levers} at micro-batch {}: the least expected time per sample ({:.2}x one \
         f32 pass of the whole batch) of the {fitting} settings that fit{without}",
        chosen.micro_batch, chosen.relative_time
    ))
}

/// One lever's predicted device peak for the run's effective batch, beside the others.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LeverPeak {
    pub lever: &'static str,
    pub micro_batch: usize,
    pub precision: Precision,
    pub checkpointing: bool,
    pub moments: Moments,
    /// The census's device reservation.
    pub device_bytes: u64,
}

/// What each memory lever would hold for this run, by the census: none (the whole batch
/// in one f32 pass, everything kept), accumulation over four micro-batches, f16 storage
/// (where the device has it), checkpointing, 8-bit moments (Adam's), and all of them:
/// what the page shows so a user sees what each lever saves before choosing.
pub fn lever_peaks(run_plan: &RunPlan) -> Vec<LeverPeak> {
    let request = &run_plan.request;
    let whole = request.effective_batch;
    let quarter = if whole.is_multiple_of(4) { whole / 4 } else { whole };
    let (f32, no) = (Precision::F32, Moments::F32);
    let mut settings = vec![
        ("none", whole, f32, false, no),
        ("accumulation 4x", quarter, f32, false, no),
    ];
    let f16_available = run_plan.levers.f16_available;
    if f16_available {
        settings.push(("f16", whole, Precision::F16, false, no));
        settings.push(("f16 without master", whole, Precision::F16Pure, false, no));
    }
    settings.push(("checkpointing", whole, f32, true, no));
    let adam = request.optimizer != OptimizerKind::Sgd;
    if adam {
        settings.push(("8-bit moments", whole, f32, false, Moments::Q8));
    }
    let all_precision = if f16_available { Precision::F16Pure } else { f32 };
    let all_moments = if adam { Moments::Q8 } else { no };
    settings.push(("all of them", quarter, all_precision, true, all_moments));
    settings
        .into_iter()
        .map(
            |(lever, micro_batch, precision, checkpointing, moments)| LeverPeak {
                lever,
                micro_batch,
                precision,
                checkpointing,
                moments,
                device_bytes: crate::memory::planner::predict(
                    request,
                    micro_batch,
                    precision,
                    checkpointing,
                    moments,
                )
                .device(),
            },
        )
        .collect()
}
