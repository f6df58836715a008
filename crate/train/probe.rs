//! The probe steps that calibrate the planner before step 1: full steps (forward,
//! backward, optimizer update) on zero-filled samples, with the census's pick's levers, up a
//! ladder of micro-batches to the one the census picked (see `memory::calibration`).
//!
//! The probes leave the run as it was: the update uses a learning rate that rounds to zero
//! in f32 (weights are unchanged, bit for bit, yet every kernel and allocation of a real
//! update happens), the optimizer state is thrown away, no sample is drawn from the data
//! stream, and the pages they cached are released before step 1.

use std::cell::RefCell;

use burn::prelude::*;
use serde::Serialize;
use web_time::Instant;

use super::config::{Precision, TrainConfig};
use super::error::TrainError;
use super::plan::{self, RunPlan};
use super::step::{MicroSteps, accumulate_gradients, update_in_backward};
use super::{optimizer, precision};
use crate::data::{Batch, DataSource, MemoryGauge};
use crate::memory::calibration::{ProbedLevers, probe_ladder};
use crate::memory::{Calibration, MemoryTracker, Probe, recomputed_inputs};
use crate::model::Model;
use crate::ops::backend::free_pages;

/// Steps per probe: the second update runs with the optimizer state of the first alive,
/// as every later step of the run does.
const STEPS_PER_PROBE: usize = 2;

/// A learning rate that is not zero in f64, so that every branch of a real update runs
/// (weight decay's `1 - lr x decay` included), but is zero once cast to the f32 scalar the
/// kernels multiply by.
const VANISHING_LEARNING_RATE: f64 = f64::MIN_POSITIVE;

/// The climb above the census's pick (probe.rs's `above`) stops where its probes would
/// have cost more than this share of the samples the run itself trains on: it only looks
/// for a faster setting, and on a short run the probes cost more than they could save (the
/// 6x384 GPT's one step of 64 windows under 160 MiB took 26 minutes of probes on
/// lavapipe, the step itself 21).
const CLIMB_SHARE: f64 = 0.25;

/// How many times a pick made on corrected figures is probed and made again.
const CONFIRMATIONS: usize = 3;

/// Why a probe runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeStage {
    /// One update that moves the weights into the pools the steps carve; not measured.
    WarmUp,
    /// A rung of the ladder up to the census's pick.
    Ladder,
    /// A rung above the census's pick, looking for a faster setting.
    Climb,
    /// The pick made on calibrated figures, which no probe had run.
    Confirm,
}

/// One probe as it starts (`finished` false) and as it ends. The probes run before step 1
/// and take minutes on a slow device (9-53 min in all for the GPTs of the ladder on
/// lavapipe), so the CLI prints these and the page shows them.
#[derive(Clone, Debug, Serialize)]
pub struct ProbeReport {
    pub stage: ProbeStage,
    pub micro_batch: usize,
    /// Two micro-batches a probe step, the running sum of gradients alive.
    pub accumulating: bool,
    pub levers: ProbedLevers,
    /// The census's figure for this setting (device only).
    pub census_reserved: u64,
    pub finished: bool,
    /// The probe's measured peak reservation, once finished.
    pub peak_reserved: Option<u64>,
    /// Since this probe started.
    pub seconds: f64,
}

/// Where probe reports go.
pub type ReportProbe<'a> = &'a mut dyn FnMut(&ProbeReport);

/// What the probes run with.
struct ProbeSetting<'a, 'r> {
    config: &'a TrainConfig,
    plan: &'a RunPlan,
    /// The top of the ladder: the census's pick, or the largest micro-batch allowed where
    /// the census fits none.
    target_micro_batch: usize,
    /// The precision, checkpointing and moments every rung runs with
    /// (`RunPlan::probed_levers`).
    levers: ProbedLevers,
    /// The samples the run trains on, all steps together.
    run_samples: u64,
    report: &'a RefCell<ReportProbe<'r>>,
}

impl ProbeSetting<'_, '_> {
    /// Whether a rung expected at `device_bytes` stays under the cap itself: worth
    /// measuring even where the expectation leaves no headroom, as it may over-count (on a
    /// small model the allocator's fixed pages are most of the peak, and a probe's excess
    /// over the census does not grow with the micro-batch).
    fn may_probe(&self, device_bytes: u64) -> bool {
        self.config
            .cap
            .is_none_or(|cap| device_bytes + self.plan.request.least_data_bytes() <= cap)
    }
}

/// Plans `config` for `device` (with autodiff) and, where the config asks for it,
/// calibrates the plan on probe steps, each reported to `report` as it starts and ends;
/// returns it with the run's model, initialized from the config's seed and unchanged by
/// the probes.
pub async fn probed_plan(
    config: &TrainConfig,
    source: &DataSource,
    device: &Device,
    backend: &str,
    report: ReportProbe<'_>,
) -> Result<(RunPlan, Model), TrainError> {
    let mut run_plan = plan::for_run(config, source, device, backend)?;
    // Seeded so the same config starts from the same weights.
    device.seed(config.seed);
    let model = config.model.init(&run_plan.input, device);
    if !config.calibrate {
        return Ok((run_plan, model));
    }
    let largest = plan::micro_batch_choices(config)[0];
    let report = RefCell::new(report);
    let setting = ProbeSetting {
        config,
        plan: &run_plan,
        target_micro_batch: run_plan.plan.chosen().map_or(largest, |c| c.micro_batch),
        levers: run_plan.probed_levers(),
        run_samples: config
            .total_steps(source.sample_count(crate::data::Split::Train))
            .saturating_mul(config.effective_batch as u64),
        report: &report,
    };
    let (mut model, calibration) = calibrate(model, &setting, device).await;
    if let Some(calibration) = calibration {
        run_plan.plan.calibrate(calibration);
        model = confirm(model, config, &mut run_plan, device, &report).await;
    }
    Ok((run_plan, model))
}

/// Where the calibrated pick is a setting no probe ran (other levers, or a micro-batch the
/// ladder did not reach), probes it too and picks again, so that the figure the run rests
/// on is a measurement, up to [`CONFIRMATIONS`] times. Where nothing fits, probes the
/// census's pick among the levers no probe ran, else a setting that accumulates at a
/// micro-batch the ladder ran in one pass (`Plan::accumulating_measured_in_one_pass`),
/// before the cap is refused. Before, on
/// lavapipe: the 6x384 GPT at batch 64 under 160 MiB moved from the probed checkpointing
/// to none, at a calibrated 123.7 MiB that no probe had measured; the 8x512 at batch 8
/// under 256 MiB from the probed micro-batch 1 to 4 (calibrated 199.2 MiB, measured 212.1
/// from step 2).
async fn confirm(
    mut model: Model,
    config: &TrainConfig,
    run_plan: &mut RunPlan,
    device: &Device,
    report: &RefCell<ReportProbe<'_>>,
) -> Model {
    for _ in 0..CONFIRMATIONS {
        let Some(calibration) = run_plan.plan.calibration.clone() else {
            break;
        };
        // Where nothing fits on the corrected figures, those of levers no probe ran rest on
        // another lever's excess: the census's pick among them is probed. (On lavapipe an
        // MLP of 2.2 M parameters at batch 512 under 80 MiB was refused: its f16 probes
        // reserved 68 MiB, which put f32 over the cap, where f32 reserved 58.)
        let next = match run_plan.plan.chosen() {
            Some(chosen) => Some(chosen),
            None => run_plan
                .plan
                .census_pick_among(|c| !calibration.ran_levers(c.levers()))
                .or_else(|| run_plan.plan.accumulating_measured_in_one_pass(&calibration)),
        };
        let Some(next) = next else {
            break;
        };
        let (micro_batch, levers) = (next.micro_batch, next.levers());
        let accumulating = micro_batch < config.effective_batch;
        if calibration.measured(micro_batch, accumulating, levers) {
            break;
        }
        let setting = ProbeSetting {
            config,
            plan: run_plan,
            target_micro_batch: micro_batch,
            levers,
            run_samples: 0,
            report,
        };
        let census_reserved = run_plan.probe_census(micro_batch, accumulating, levers);
        let pure = levers.precision == Precision::F16Pure;
        let rung = Rung {
            stage: ProbeStage::Confirm,
            micro_batch,
            accumulating,
            census_reserved,
        };
        let (probed, peak) = probe(half_if(pure, model), &setting, rung, STEPS_PER_PROBE, device).await;
        model = full_if(pure, probed);
        free_pages(device).await;
        let Some(peak_reserved) = peak else {
            break;
        };
        let mut calibration = calibration;
        calibration.probes.push(Probe {
            micro_batch,
            accumulating,
            peak_reserved,
            census_reserved,
            levers: Some(levers),
        });
        run_plan.plan.calibrate(calibration);
    }
    model
}

/// Runs the probes on `model` (on `device`, with autodiff) and sets them against the
/// census; hands the model back unchanged. `None` where the backend reports no device
/// pool (ndarray).
async fn calibrate(
    model: Model,
    setting: &ProbeSetting<'_, '_>,
    device: &Device,
) -> (Model, Option<Calibration>) {
    if device.memory_pool_usage().is_none() {
        return (model, None);
    }
    let accumulating = setting.target_micro_batch < setting.config.effective_batch;
    let levers = setting.levers;
    let target = setting.target_micro_batch;
    // Under a cap the census's pick may be held down by its own over-count: the ladder goes
    // on above it, one larger micro-batch at a time, while the rungs below say it stays
    // under the cap, until a measured peak leaves no headroom, and while its probes cost
    // at most a quarter of the run (`climb`).
    let above: Vec<usize> = match setting.config.cap {
        Some(_) => climb(
            plan::micro_batch_choices(setting.config),
            target,
            setting.config.effective_batch,
            setting.run_samples,
            MicroSteps::levers_update_in_backward(levers.checkpointing, levers.precision),
        ),
        None => Vec::new(),
    };
    let ladder = probe_ladder(target);
    // f16-pure probes its f16 parameters; the model goes back in f32 (its values rounded
    // to f16, which an f16-pure run starts from anyway).
    let pure = levers.precision == Precision::F16Pure;
    let model = half_if(pure, model);
    // The weights were placed in pages at initialization; the first update moves them
    // into the pools the steps carve, where they stay. Probing only after that move
    // measures the pages the run's steps will see.
    let warm_up = Rung {
        stage: ProbeStage::WarmUp,
        micro_batch: ladder[0],
        accumulating,
        census_reserved: setting.plan.probe_census(ladder[0], accumulating, levers),
    };
    let (mut model, _) = probe(model, setting, warm_up, 1, device).await;
    let mut probes: Vec<Probe> = Vec::new();
    for micro_batch in ladder.into_iter().chain(above) {
        // Rungs up to the target accumulate as the target does; one above it as it would.
        let (stage, accumulating) = match micro_batch > target {
            true => (ProbeStage::Climb, micro_batch < setting.config.effective_batch),
            false => (ProbeStage::Ladder, accumulating),
        };
        let census_reserved = setting.plan.probe_census(micro_batch, accumulating, levers);
        // The first rung, a quarter of the target, always runs: a step that small is what
        // the run itself would try first under a cap that fits nothing better.
        if let Some(so_far) = Calibration::fit(probes.clone())
            && !setting.may_probe(so_far.device_bytes(micro_batch, accumulating, census_reserved))
        {
            break;
        }
        let rung = Rung {
            stage,
            micro_batch,
            accumulating,
            census_reserved,
        };
        let (probed, peak) = probe(model, setting, rung, STEPS_PER_PROBE, device).await;
        model = probed;
        let Some(peak_reserved) = peak else {
            return (full_if(pure, model), None);
        };
        probes.push(Probe {
            micro_batch,
            accumulating,
            peak_reserved,
            census_reserved,
            levers: None,
        });
        // A rung over the enforcer's limit does not fit, but a larger one may: the pool's
        // reservation is not monotone in the micro-batch (here 15.9 MiB at 128 against
        // 13.9 MiB at 256 on lavapipe). Only a rung over the cap itself ends the climb.
        if !setting.may_probe(peak_reserved) {
            break;
        }
    }
    free_pages(device).await;
    let calibration = Calibration::fit(probes).map(|c| c.probed_with(levers));
    (full_if(pure, model), calibration)
}

/// The model f16-pure probes run: its f16 copy, the f32 parameters dropped. Kept, they held
/// twice the f16 ones beside the probes, which the run never does (the 6x384 GPT's
/// calibrated peak stood 14% above its measured one, 147.4 against 129.2 MiB).
fn half_if(pure: bool, model: Model) -> Model {
    match pure {
        true => precision::half_copy(&model),
        false => model,
    }
}

fn full_if(pure: bool, model: Model) -> Model {
    match pure {
        true => precision::full_copy(&model),
        false => model,
    }
}

/// The micro-batches above `target` among `choices` that the climb may probe, smallest
/// first, while their probes together cost at most [`CLIMB_SHARE`] of `run_samples`.
/// `in_backward`: the levers update inside backward where a step is one pass (f32 under
/// checkpointing), whose probe takes a step more.
fn climb(
    choices: Vec<usize>,
    target: usize,
    effective_batch: usize,
    run_samples: u64,
    in_backward: bool,
) -> Vec<usize> {
    let mut spent = 0u64;
    choices
        .into_iter()
        .rev()
        .filter(|&m| m > target)
        .take_while(|&m| {
            let accumulating = m < effective_batch;
            spent += probe_samples(m, accumulating, in_backward && !accumulating);
            spent as f64 <= CLIMB_SHARE * run_samples as f64
        })
        .collect()
}

fn micro_steps_per_probe_step(accumulating: bool) -> usize {
    if accumulating { 2 } else { 1 }
}

/// The samples a rung's probe steps run through; `settling`: one step more (a probe of an
/// update inside backward, [`probe_steps`]).
fn probe_samples(micro_batch: usize, accumulating: bool, settling: bool) -> u64 {
    let steps = STEPS_PER_PROBE + usize::from(settling);
    (steps * micro_batch * micro_steps_per_probe_step(accumulating)) as u64
}

/// What one probe runs: its micro-batch, whether the run accumulates, and the census's
/// figure for it (which the probe's report and its `Probe` both carry).
#[derive(Clone, Copy)]
struct Rung {
    stage: ProbeStage,
    micro_batch: usize,
    accumulating: bool,
    census_reserved: u64,
}

/// The peak reservation over `step_count` steps of `rung`, reported as it starts and ends.
async fn probe(
    model: Model,
    setting: &ProbeSetting<'_, '_>,
    rung: Rung,
    step_count: usize,
    device: &Device,
) -> (Model, Option<u64>) {
    let Rung {
        stage,
        micro_batch,
        accumulating,
        census_reserved,
    } = rung;
    let started = Instant::now();
    let mut report = ProbeReport {
        stage,
        micro_batch,
        accumulating,
        levers: setting.levers,
        census_reserved,
        finished: false,
        peak_reserved: None,
        seconds: 0.0,
    };
    (setting.report.borrow_mut())(&report);
    let (model, peak) = probe_steps(model, setting, micro_batch, accumulating, step_count, device).await;
    report.finished = true;
    report.peak_reserved = peak;
    report.seconds = started.elapsed().as_secs_f64();
    (setting.report.borrow_mut())(&report);
    (model, peak)
}

/// The peak reservation over `step_count` steps at `micro_batch`: two micro-batches a step
/// when the run accumulates (its running sum alive), one otherwise.
async fn probe_steps(
    mut model: Model,
    setting: &ProbeSetting<'_, '_>,
    micro_batch: usize,
    accumulating: bool,
    step_count: usize,
    device: &Device,
) -> (Model, Option<u64>) {
    // Each probe starts from the pages the model alone needs, as step 1 will.
    free_pages(device).await;
    let input = &setting.plan.input;
    let samples = micro_batch * micro_steps_per_probe_step(accumulating);
    // Zeros: the bytes a probe step holds do not depend on the values. Text is windows of
    // tokens without labels.
    let window = setting.config.model.text_window();
    let sample_bytes = window.unwrap_or(input.height * input.width);
    let batch = Batch {
        labels: vec![0; if window.is_some() { 0 } else { samples }],
        features: vec![0; samples * sample_bytes],
        sample_bytes,
    };
    let levers = setting.levers;
    let steps = MicroSteps {
        micro_batch,
        precision: levers.precision,
        loss_scale: 1.0,
        recompute: levers.checkpointing,
        recomputed_inputs: recomputed_inputs(&setting.config.model.census(input).segments),
    };
    let mut tracker = MemoryTracker::new(device.clone(), MemoryGauge::default());
    let mut optimizer = optimizer::Optimizer::new(&setting.config.optimizer, levers.moments);
    // An update made inside backward allocates the new weights while activations hold
    // the pages, so a rung's first step lays its pages out around those the rung below
    // left, which the run, starting from this rung's pages released, never sees: on
    // lavapipe the CNN 16,32 at 64 kept a page of 5 MiB its run never reserved (23.1
    // against 18.1 MiB). There the second step starts from the pages released, as the
    // run's step 1 does, and a third counts, as the run's later steps do (the 6x384 GPT
    // at batch 8 reserved 19 MiB more at step 2 than at step 1, and its third step
    // measured that).
    let in_backward = steps.updates_in_backward(samples);
    let settle = in_backward && step_count > 1;
    for step in 0..step_count + usize::from(settle) {
        // Only the last step counts: an earlier one still resizes the pools the rung below
        // left, which the run, starting from this rung's pools, does not.
        tracker.take_step_peak();
        if settle && step == 1 {
            free_pages(device).await;
        }
        // As the run steps: in f32 under checkpointing without accumulation, the update
        // runs inside backward.
        model = if in_backward {
            let update = |model, grads| optimizer.step(VANISHING_LEARNING_RATE, model, grads);
            update_in_backward(model, &batch, steps, input, device, Some(&mut tracker), update)
                .await
                .0
        } else {
            let step = accumulate_gradients(&model, &batch, steps, input, device, Some(&mut tracker)).await;
            optimizer.step(VANISHING_LEARNING_RATE, model, step.grads)
        };
        tracker.sample();
    }
    drop(optimizer);
    (model, tracker.take_step_peak().gpu_bytes_reserved)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 6x384 GPT at batch 64 under 160 MiB, whose census picked micro-batch 32: one
    /// step does not pay for probing 64 (two steps of it), forty steps do; the climb goes
    /// on rung by rung while the budget lasts.
    #[test]
    fn the_climb_above_the_pick_costs_at_most_a_share_of_the_run() {
        let choices = vec![64, 32, 16, 8, 4, 2, 1];
        assert_eq!(climb(choices.clone(), 32, 64, 64, false), Vec::<usize>::new());
        assert_eq!(climb(choices.clone(), 32, 64, 40 * 64, false), vec![64]);
        assert_eq!(climb(choices.clone(), 32, 64, 8 * 64, false), vec![64]);
        assert_eq!(
            climb(choices.clone(), 32, 64, 8 * 64 - 1, false),
            Vec::<usize>::new()
        );
        // From 4: 8, 16 and 32 accumulate, two steps of two micro-batches each (32, 64
        // and 128 samples): 224 samples need a run of 896.
        assert_eq!(climb(choices.clone(), 4, 64, 896, true), vec![8, 16, 32]);
        assert_eq!(climb(choices.clone(), 4, 64, 895, true), vec![8, 16]);
        // Updating inside backward, the probe of 64 (one pass) takes three steps: 192
        // samples, a quarter of 768.
        assert_eq!(climb(choices.clone(), 32, 64, 12 * 64, true), vec![64]);
        assert_eq!(climb(choices, 32, 64, 12 * 64 - 1, true), Vec::<usize>::new());
    }
}
