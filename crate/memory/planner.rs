//! Predicts a configuration's peak memory before it runs, from the model's tensor shapes
//! and the way the device allocator rounds them into pages.

use serde::{Deserialize, Serialize};

use super::allocator::PoolModel;
use super::calibration::{Calibration, ProbedLevers};
use super::enforcer;
use crate::model::{InputShape, ModelConfig, Segment};
use crate::settings::{Moments, OptimizerKind, Precision, UPDATE_CHUNK};

/// What a plan is made for: everything about a run that moves its memory, except the
/// settings the planner chooses.
#[derive(Clone, Debug)]
pub struct PlanRequest {
    pub model: ModelConfig,
    pub input: InputShape,
    pub effective_batch: usize,
    pub optimizer: OptimizerKind,
    /// Whether SGD keeps a momentum buffer.
    pub momentum: bool,
    /// The ways the data pipeline may run, each with the bytes it holds at its peak.
    pub data: Vec<DataOption>,
    pub pool: PoolModel,
    /// Micro-batches to consider; empty means every divisor of the effective batch.
    pub micro_batches: Vec<usize>,
    pub precisions: Vec<Precision>,
    pub checkpointing: Vec<bool>,
    /// How Adam keeps its moments (f32 alone for SGD).
    pub moments: Vec<Moments>,
    /// What each lever costs in time on the device: how the pick weighs one setting that
    /// fits against another.
    pub costs: LeverCosts,
}

/// What the levers cost in time on a device, as factors on a step's time per sample:
/// measured figures, not a fixed order of preference (docs/design.md, "Levers the cap
/// picks").
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LeverCosts {
    /// f16 storage's time per sample against f32's.
    pub f16: f64,
    /// The work one pass needs to fill the device, in activation elements: below it a
    /// pass costs about as much as a pass of this size, so a micro-batch whose activations
    /// are a fraction of it pays for the rest in fixed costs (launches, syncs, passes over
    /// the weights).
    pub fill_elements: f64,
    /// 8-bit moments' time per sample against f32 moments': decoding and encoding every
    /// parameter's moments each step. On the cubecl backends one kernel does it
    /// (`ops::adam8`): 1.04x on lavapipe (the GPT 4x128 at context 256, batch 8, median of
    /// three rounds, 2026-12-07), taken to hold on a GPU until measured there. As tensor ops
    /// (flex, ndarray) 1.18x, measured on lavapipe before the kernel (2026-12-06).
    pub eight_bit: f64,
}

impl LeverCosts {
    /// A GPU: f16 ran the 6x384 GPT at 1.44x f32's tokens/s on an H200 (wgpu over
    /// Vulkan, 2026-12-04, docs/benchmarks.md), and thousands of lanes idle below some
    /// millions of elements a pass.
    pub const GPU: LeverCosts = LeverCosts {
        f16: 0.69,
        fill_elements: 4_194_304.0,
        eight_bit: 1.04,
    };
    /// A software adapter (lavapipe, SwiftShader) or a CPU backend: f16 ran at 0.93-1.04x
    /// f32's time on lavapipe (MLP 4x1024, CNN 16,32), and two cores are full with a few
    /// thousand elements a pass (accumulating 4x cost 0.90-1.01x, same runs). f16 is then
    /// no faster, and f32 is kept among equals.
    pub const CPU: LeverCosts = LeverCosts {
        f16: 1.0,
        fill_elements: 32_768.0,
        eight_bit: 1.18,
    };
    /// A software adapter: the CPU's costs, but 8-bit moments in one kernel.
    pub const SOFTWARE_ADAPTER: LeverCosts = LeverCosts {
        eight_bit: 1.04,
        ..LeverCosts::CPU
    };
}

/// How the data pipeline runs: what the planner picks beside the micro-batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataSettings {
    /// Chunks each stream fetches ahead of the one being read.
    pub prefetch: usize,
    /// Evaluation runs with the training stream's chunks released (fetched again after
    /// it), so that the two streams never hold chunks at the same time.
    pub pause_training_for_eval: bool,
}

impl std::fmt::Display for DataSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "prefetch {}", self.prefetch)?;
        if self.pause_training_for_eval {
            write!(f, ", training stream paused for evaluation")?;
        }
        Ok(())
    }
}

/// A way to run the data pipeline and what it holds at its peak (host memory).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct DataOption {
    pub settings: DataSettings,
    pub bytes: u64,
}

impl PlanRequest {
    /// The least the data pipeline can hold: what a probe step, which draws no data,
    /// must leave room for.
    pub fn least_data_bytes(&self) -> u64 {
        self.data.iter().map(|d| d.bytes).min().unwrap_or(0)
    }
}

/// Where the predicted bytes go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Breakdown {
    /// The parameters the forward pass reads (f16 copies under f16).
    pub parameters: u64,
    /// f32 master weights kept beside f16 parameters.
    pub master_weights: u64,
    /// One micro-batch's gradients (under checkpointing only the largest segment's, where a
    /// sum takes them in), plus the running sum when accumulating (f32; f16 under
    /// f16-pure) or their f32 copies for the master weights under f16.
    pub gradients: u64,
    pub optimizer_state: u64,
    /// Activations saved for backward, the input batch and its targets.
    pub activations: u64,
    /// Transients of the largest backward op and of the optimizer update.
    pub workspace: u64,
    /// Pages the device allocator holds beyond the live tensors.
    pub allocator_overhead: u64,
    /// What the data pipeline holds at its peak (host memory).
    pub data: u64,
}

impl Breakdown {
    pub fn tensors(&self) -> u64 {
        self.parameters
            + self.master_weights
            + self.gradients
            + self.optimizer_state
            + self.activations
            + self.workspace
    }

    /// What the device allocator reserves.
    pub fn device(&self) -> u64 {
        self.tensors() + self.allocator_overhead
    }

    /// Everything the run holds: the device's reservation and the data pipeline.
    pub fn total(&self) -> u64 {
        self.device() + self.data
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub micro_batch: usize,
    pub accumulation_steps: usize,
    pub precision: Precision,
    pub checkpointing: bool,
    /// Runs saved before 8-bit moments read f32.
    #[serde(default)]
    pub moments: Moments,
    pub data: DataSettings,
    pub breakdown: Breakdown,
    /// The census's peak: device reservation plus data pipeline.
    pub predicted_peak: u64,
    /// The same corrected by the probe steps' measurements, once calibrated: what the
    /// pick and `fits` then rest on.
    pub calibrated_peak: Option<u64>,
    pub fits: bool,
    /// The expected time per sample, against one f32 pass over the whole effective batch
    /// with every activation kept (1.0): what the pick minimises among those that fit.
    /// Runs saved before it was planned read 0.
    #[serde(default)]
    pub relative_time: f64,
}

impl Candidate {
    /// The figure the pick rests on: calibrated where measured, the census otherwise.
    pub fn peak(&self) -> u64 {
        self.calibrated_peak.unwrap_or(self.predicted_peak)
    }

    /// Its precision, checkpointing and moments.
    pub fn levers(&self) -> ProbedLevers {
        ProbedLevers {
            precision: self.precision,
            checkpointing: self.checkpointing,
            moments: self.moments,
        }
    }

    /// Whether it sums gradients over more than one micro-batch a step.
    pub fn accumulates(&self) -> bool {
        self.accumulation_steps > 1
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    pub cap: Option<u64>,
    pub candidates: Vec<Candidate>,
    /// A candidate fits when its predicted peak leaves the enforcer's headroom under the
    /// cap (10%): the measured peak may differ from the prediction.
    /// Index into `candidates` of the pick: the least expected time per sample among
    /// those that fit, preferring f32 and no checkpointing among equals (less rounding,
    /// less recompute).
    pub chosen: Option<usize>,
    /// The probes' correction, once the device was measured.
    pub calibration: Option<Calibration>,
}

impl Plan {
    pub fn chosen(&self) -> Option<&Candidate> {
        self.chosen.map(|i| &self.candidates[i])
    }

    /// The candidate that fits under the smallest cap, with the enforcer's headroom.
    pub fn smallest_fitting(&self) -> Option<&Candidate> {
        self.candidates.iter().min_by_key(|c| enforcer::cap_for(c.peak()))
    }

    /// The smallest cap any candidate fits under, with the enforcer's headroom.
    pub fn smallest_fitting_cap(&self) -> Option<u64> {
        self.smallest_fitting().map(|c| enforcer::cap_for(c.peak()))
    }

    /// The pick the census alone would make among the candidates `eligible` lets in.
    pub fn census_pick_among(&self, eligible: impl Fn(&Candidate) -> bool) -> Option<&Candidate> {
        let judged: Vec<Candidate> = self
            .candidates
            .iter()
            .map(|c| Candidate {
                fits: eligible(c) && enforcer::within_limit(self.cap, c.predicted_peak),
                ..c.clone()
            })
            .collect();
        choose(&judged).map(|i| &self.candidates[i])
    }

    /// Where nothing fits on the calibrated figures: a setting that accumulates at a
    /// micro-batch a probe ran in one pass (the rungs below a one-pass target run as it
    /// does) within the cap beside the least data any setting holds, the largest such
    /// micro-batch. Its figure is the census corrected by that probe's excess, which counts
    /// the gradient sums as the census does, in whole pages, where they may fit the pages'
    /// slack; measured, it also stands for the smaller chunks a refusal advises.
    pub fn accumulating_measured_in_one_pass(&self, calibration: &Calibration) -> Option<&Candidate> {
        let least_data = self
            .candidates
            .iter()
            .map(|c| c.breakdown.data)
            .min()
            .unwrap_or(0);
        let one_pass_fits = |c: &&Candidate| {
            let peak = calibration.measured_peak(c.micro_batch, false, c.levers());
            peak.is_some_and(|peak| enforcer::within_limit(self.cap, peak + least_data))
        };
        self.candidates
            .iter()
            .filter(|c| c.accumulates() && !calibration.measured(c.micro_batch, true, c.levers()))
            .filter(one_pass_fits)
            .max_by_key(|c| (c.micro_batch, std::cmp::Reverse(c.breakdown.data)))
    }

    /// Re-judges every candidate on the probes' measurements and picks again.
    pub fn calibrate(&mut self, calibration: Calibration) {
        for c in &mut self.candidates {
            let device = c.breakdown.device();
            let peak = calibration.device_bytes_with(c.micro_batch, c.accumulates(), device, c.levers())
                + c.breakdown.data;
            c.calibrated_peak = Some(peak);
            c.fits = enforcer::within_limit(self.cap, peak);
        }
        self.chosen = choose(&self.candidates);
        self.calibration = Some(calibration);
    }
}

/// Times within this fraction of each other count as equal: the cost factors are
/// measurements with a spread, not exact figures.
const TIME_TOLERANCE: f64 = 0.02;

/// The least expected time per sample among those that fit; among times within the
/// tolerance, f32 storage and moments and no checkpointing (less rounding, less
/// recompute), the larger
/// micro-batch, then the deepest prefetch (fewer stalls) and evaluation beside training
/// (nothing fetched twice). With the precision and checkpointing fixed this is the
/// largest micro-batch that fits, since a pass's fixed costs only grow with more passes.
fn choose(candidates: &[Candidate]) -> Option<usize> {
    let fitting = || candidates.iter().enumerate().filter(|(_, c)| c.fits);
    let fastest = fitting().map(|(_, c)| c.relative_time).reduce(f64::min)?;
    fitting()
        .filter(|(_, c)| c.relative_time <= fastest * (1.0 + TIME_TOLERANCE))
        .max_by_key(|(_, c)| {
            (
                precision_preference(c.precision),
                c.moments == Moments::F32,
                !c.checkpointing,
                c.micro_batch,
                c.data.prefetch,
                !c.data.pause_training_for_eval,
                std::cmp::Reverse(c.peak()),
            )
        })
        .map(|(i, _)| i)
}

/// Among equal times: f32, then f16 with its master copy (rounding to nearest), then
/// f16-pure (rounding stochastically).
fn precision_preference(precision: Precision) -> u8 {
    match precision {
        Precision::F32 => 2,
        Precision::F16 => 1,
        Precision::F16Pure => 0,
    }
}

/// The expected time per sample of a setting, against one f32 pass over the whole
/// effective batch with every activation kept: each pass pays for filling the device
/// (`LeverCosts::fill_elements`), f16 its measured factor, and checkpointing one more
/// forward of every segment plus one of each segment whose input it drops, a forward
/// being about a third of a step (backward is about two), and 8-bit moments their
/// measured factor.
pub fn relative_time(
    request: &PlanRequest,
    micro_batch: usize,
    precision: Precision,
    checkpointing: bool,
    moments: Moments,
) -> f64 {
    let census = request.model.census(&request.input);
    let per_sample = census.saved_activations().iter().sum::<usize>().max(1) as f64;
    let pass = |m: usize| 1.0 + request.costs.fill_elements / (m.max(1) as f64 * per_sample);
    let passes = pass(micro_batch) / pass(request.effective_batch);
    let precision = match precision {
        Precision::F32 => 1.0,
        Precision::F16 | Precision::F16Pure => request.costs.f16,
    };
    let segments = census.segments.len().max(1) as f64;
    let recompute = match checkpointing {
        false => 1.0,
        true => {
            let dropped = recomputed_inputs(&census.segments).count_ones() as f64;
            1.0 + (segments + dropped) / segments / 3.0
        }
    };
    let moments = match moments {
        Moments::F32 => 1.0,
        Moments::Q8 => request.costs.eight_bit,
    };
    passes * precision * recompute * moments
}

fn divisors(n: usize) -> Vec<usize> {
    (1..=n).rev().filter(|&d| n.is_multiple_of(d)).collect()
}

/// Every checkpointing setting with every way of keeping the moments.
fn lever_pairs(request: &PlanRequest) -> impl Iterator<Item = (&bool, &Moments)> {
    request
        .checkpointing
        .iter()
        .flat_map(|c| request.moments.iter().map(move |m| (c, m)))
}

pub fn plan(request: &PlanRequest, cap: Option<u64>) -> Plan {
    let micro_batches = if request.micro_batches.is_empty() {
        divisors(request.effective_batch)
    } else {
        request.micro_batches.clone()
    };
    let mut candidates = Vec::new();
    for &micro_batch in &micro_batches {
        for &precision in &request.precisions {
            for (&checkpointing, &moments) in lever_pairs(request) {
                let device = predict(request, micro_batch, precision, checkpointing, moments);
                let relative_time = relative_time(request, micro_batch, precision, checkpointing, moments);
                for option in &request.data {
                    let breakdown = Breakdown {
                        data: option.bytes,
                        ..device
                    };
                    let predicted_peak = breakdown.total();
                    candidates.push(Candidate {
                        micro_batch,
                        accumulation_steps: request.effective_batch.div_ceil(micro_batch),
                        precision,
                        checkpointing,
                        moments,
                        data: option.settings,
                        breakdown,
                        predicted_peak,
                        calibrated_peak: None,
                        fits: enforcer::within_limit(cap, predicted_peak),
                        relative_time,
                    });
                }
            }
        }
    }
    Plan {
        cap,
        chosen: choose(&candidates),
        candidates,
        calibration: None,
    }
}

/// The device's breakdown of one setting (`data` is left at zero): every live tensor at
/// the step's peak (the last micro-batch's backward, with the optimizer state and
/// gradient sum alive), then the allocator's pages around them.
pub fn predict(
    request: &PlanRequest,
    micro_batch: usize,
    precision: Precision,
    checkpointing: bool,
    moments: Moments,
) -> Breakdown {
    let census = request.model.census(&request.input);
    let store = precision.bytes() as u64;
    let micro = micro_batch as u64;
    let accumulating = request.effective_batch > micro_batch;
    let mut live: Vec<u64> = Vec::new();
    let add = |live: &mut Vec<u64>, bytes: u64| {
        live.push(bytes);
        bytes
    };

    let parameters: u64 = census
        .parameters
        .iter()
        .map(|&p| add(&mut live, p as u64 * store))
        .sum();
    let master_weights: u64 = match precision {
        Precision::F32 | Precision::F16Pure => 0,
        Precision::F16 => census
            .parameters
            .iter()
            .map(|&p| add(&mut live, p as u64 * 4))
            .sum(),
    };
    // The running sum (f32, f16 for f16-pure), and f16 gradients brought to f32 for the
    // master weights.
    let sum = match precision {
        Precision::F16Pure => store,
        Precision::F32 | Precision::F16 => 4,
    };
    let summed = accumulating || precision == Precision::F16;
    // A backward pass's own gradients: all of them at once, or under checkpointing one
    // segment's, which are summed away as soon as its backward yields them
    // (`recompute::backward_by_segments`), or, in f32 without a sum, spent on that
    // segment's update there and then (`step::update_in_backward`).
    let yielded = match checkpointing && (summed || precision == Precision::F32) {
        true => census
            .segment_parameters()
            .into_iter()
            .max_by_key(|tensors| tensors.iter().sum::<usize>())
            .unwrap_or_default(),
        false => &census.parameters[..],
    };
    let mut gradients: u64 = yielded.iter().map(|&p| add(&mut live, p as u64 * store)).sum();
    if summed {
        gradients += census
            .parameters
            .iter()
            .map(|&p| add(&mut live, p as u64 * sum))
            .sum::<u64>();
    }
    let state_tensors = match request.optimizer {
        OptimizerKind::Adam | OptimizerKind::AdamW => 2,
        OptimizerKind::Sgd => u64::from(request.momentum),
    };
    let eight_bit = moments == Moments::Q8 && request.optimizer != OptimizerKind::Sgd;
    let optimizer_state: u64 = (0..state_tensors)
        .map(|_| {
            census
                .parameters
                .iter()
                .map(|&p| match eight_bit {
                    // The codes and the block scales are two tensors.
                    true => add(&mut live, Moments::code_bytes(p)) + add(&mut live, Moments::scale_bytes(p)),
                    false => add(&mut live, p as u64 * 4),
                })
                .sum::<u64>()
        })
        .sum();
    let saved_activations = census.saved_activations();
    let saved: Vec<usize> = if checkpointing {
        recomputed_peak(&census.segments)
    } else {
        saved_activations.clone()
    };
    let mut activations: u64 = saved
        .iter()
        .map(|&a| add(&mut live, micro * a as u64 * store))
        .sum();
    // The first saved activation is the input itself, uploaded in the storage precision.
    // Targets are i32.
    activations += add(&mut live, micro * 4);
    // Transients: backward through the widest layer (the model's own factor of it), and the
    // update's temporaries of the largest parameter. The factors were fitted against
    // lavapipe over `headroom bench plan`'s configurations.
    // A segment's widest backward build (a conv's patches) is alive with that segment's
    // activations: all of them without checkpointing, only its own recomputed ones with it.
    let backward_width = if checkpointing { 0 } else { census.backward_width };
    let widest = saved_activations
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(backward_width) as u64;
    let largest_parameter = census.parameters.iter().copied().max().unwrap_or(0) as u64;
    let backward = (census.backward_transients * (micro * widest * store) as f64) as u64;
    let mut workspace = add(&mut live, backward) + add(&mut live, largest_parameter * 4 / 2);
    let update = UpdateShape {
        largest: largest_parameter,
        eight_bit,
        pure: precision == Precision::F16Pure,
        store,
        state_tensors,
    };
    for bytes in update.workspace() {
        workspace += add(&mut live, bytes);
    }

    let mut breakdown = Breakdown {
        parameters,
        master_weights,
        gradients,
        optimizer_state,
        activations,
        workspace,
        allocator_overhead: 0,
        data: 0,
    };
    // Pages never hold less than the tensors on them.
    let slack = match request.pool {
        PoolModel::Sliced { .. } => (census.pool_slack * activations as f64) as u64,
        _ => 0,
    };
    breakdown.allocator_overhead = request.pool.reserved(&live).saturating_sub(breakdown.tensors()) + slack;
    breakdown
}

/// What the optimizer's update of the largest parameter needs beside the fixed bytes.
struct UpdateShape {
    largest: u64,
    eight_bit: bool,
    /// f16-pure: the parameter is updated in f32 and rounded back.
    pure: bool,
    /// Bytes a stored parameter value takes.
    store: u64,
    state_tensors: u64,
}

impl UpdateShape {
    /// The allocations the update adds at its peak. 8-bit moments are decoded for one
    /// parameter's update at a time: its two f32 moments, their successors, and the
    /// encoder's codes and gathers. f16-pure updates each parameter in f32: its f32 copy
    /// and gradient, the update, and the rounding's noise. Where these updates are one
    /// kernel (`ops::adam8`, `ops::adam`: the cubecl backends) the same is counted:
    /// with nothing counted for them, the refusal of `tests/train_memory.rs` named a cap
    /// (16.9 MiB) that the probes then found short (18.8 MiB), and what the kernels hold
    /// beside the state is not yet measured. Both update a parameter larger
    /// than `UPDATE_CHUNK` chunk by chunk (`train::optimizer`): those copies are a chunk's,
    /// and the updated chunks of the value and the state are alive beside their joined copy.
    fn workspace(&self) -> Vec<u64> {
        let chunked = (self.eight_bit || self.pure) && self.largest > UPDATE_CHUNK as u64;
        let at_once = match chunked {
            true => UPDATE_CHUNK as u64,
            false => self.largest,
        };
        let mut live = Vec::new();
        if self.eight_bit {
            live.push(Moments::code_bytes(at_once as usize) * 4 * EIGHT_BIT_UPDATE_COPIES);
        }
        if self.pure {
            live.push(at_once * 4 * PURE_UPDATE_COPIES);
        }
        if chunked {
            let state = match self.eight_bit {
                true => {
                    Moments::code_bytes(self.largest as usize) + Moments::scale_bytes(self.largest as usize)
                }
                false => self.largest * 4,
            };
            // The chunks, then their join.
            for _ in 0..2 {
                live.push(self.largest * self.store);
                live.extend((0..self.state_tensors).map(|_| state));
            }
        }
        live
    }
}

/// The f32 copies of the largest parameter's moments an 8-bit update holds at once: the
/// two decoded moments, the two updated ones, and the encoder's normalised values, codes
/// and gathered midpoints (an estimate: calibration measures the rest).
const EIGHT_BIT_UPDATE_COPIES: u64 = 7;

/// The f32-sized copies of the largest parameter an f16-pure update holds at once (its
/// f32 value and gradient, the updated value, the rounding's hash and noise).
const PURE_UPDATE_COPIES: u64 = 4;

/// Which segment inputs checkpointing recomputes rather than keeps: bit `i` set means
/// segment `i`'s input is not kept from the forward pass but computed again, for its turn
/// in backward, from the input just below it (the batch, for segment 1), which is kept.
///
/// Every kept input below a segment is alive while that segment recomputes, so on a chain
/// of equal layers the top one holds all the others: dropping every other input lowers
/// that peak for one extra segment forward each. An input is dropped only where the
/// census says the peak falls, counting up from the first segment, and never two in a
/// row (each is recomputed from a kept one, at most one segment away). Where the peak is
/// set by a segment's own activations (a CNN block's ReLU output), nothing is dropped
/// and checkpointing costs no extra forward.
pub fn recomputed_inputs(segments: &[Segment]) -> u64 {
    let peak = |dropped: u64| {
        (0..segments.len())
            .map(|i| alive_during(segments, i, dropped).iter().sum::<usize>())
            .max()
            .unwrap_or(0)
    };
    let mut dropped = 0u64;
    // The last segment's input is the first one backward needs: recomputing it saves
    // nothing.
    for i in 1..segments.len().saturating_sub(1).min(64) {
        if !is_recomputed_input(dropped, i - 1) && peak(dropped | 1 << i) < peak(dropped) {
            dropped |= 1 << i;
        }
    }
    dropped
}

/// Whether `recomputed` (from [`recomputed_inputs`]) has segment `segment`'s input
/// computed again rather than kept.
pub fn is_recomputed_input(recomputed: u64, segment: usize) -> bool {
    segment < 64 && recomputed & (1 << segment) != 0
}

/// What is alive while segment `i` recomputes: the kept inputs of segments 1..i (segment
/// 0's is the batch, uploaded again for its turn), its own input, what its recomputation
/// saves, and the upstream gradient of its output. The transients of backward itself are
/// the workspace, as without checkpointing.
fn alive_during(segments: &[Segment], i: usize, dropped: u64) -> Vec<usize> {
    let segment = &segments[i];
    let kept_below = (1..i)
        .filter(|&j| !is_recomputed_input(dropped, j))
        .map(|j| segments[j].input);
    kept_below
        .chain([segment.input])
        .chain(segment.saved.iter().copied())
        .chain([segment.output])
        .collect()
}

/// The activations alive while checkpointing recomputes, at the segment where they peak,
/// with the inputs [`recomputed_inputs`] drops.
fn recomputed_peak(segments: &[Segment]) -> Vec<usize> {
    let dropped = recomputed_inputs(segments);
    (0..segments.len())
        .map(|i| alive_during(segments, i, dropped))
        .max_by_key(|alive| alive.iter().sum::<usize>())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Probe;
    use crate::memory::enforcer::HEADROOM;
    // In the browser (wasm-pack test, tests/run-all) these run as wasm-bindgen tests.
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn request(pool: PoolModel) -> PlanRequest {
        PlanRequest {
            model: ModelConfig::mlp_default(),
            input: InputShape {
                height: 28,
                width: 28,
                classes: 10,
                kind: crate::model::InputKind::Images,
            },
            effective_batch: 256,
            optimizer: OptimizerKind::Adam,
            momentum: false,
            data: vec![DataOption {
                settings: DataSettings {
                    prefetch: 1,
                    pause_training_for_eval: false,
                },
                bytes: 1 << 20,
            }],
            pool,
            micro_batches: vec![],
            precisions: vec![Precision::F32, Precision::F16],
            checkpointing: vec![false, true],
            moments: vec![Moments::F32],
            costs: LeverCosts::CPU,
        }
    }

    #[test]
    fn each_lever_lowers_the_predicted_tensors() {
        let r = request(PoolModel::Host);
        let base = predict(&r, 256, Precision::F32, false, Moments::F32);
        assert!(predict(&r, 64, Precision::F32, false, Moments::F32).activations < base.activations);
        assert!(predict(&r, 256, Precision::F32, true, Moments::F32).activations < base.activations);
        let half = predict(&r, 256, Precision::F16, false, Moments::F32);
        assert!(half.activations < base.activations);
        assert!(half.parameters * 2 == base.parameters && half.master_weights == base.parameters);
        // Adam keeps two f32 moments per parameter.
        assert_eq!(base.optimizer_state, 2 * base.parameters);
    }

    /// nanoGPT's Shakespeare-char GPT (issue 44): parameters, gradients and Adam's two f32
    /// moments are 16 bytes a parameter; with 8-bit moments at most 0.65x of that.
    #[test]
    fn eight_bit_moments_hold_a_byte_a_value_and_a_scale_a_block() {
        let r = PlanRequest {
            model: ModelConfig::Gpt(crate::model::GptShape {
                layers: 6,
                heads: 6,
                width: 384,
                context: 256,
            }),
            input: InputShape {
                height: 1,
                width: 1,
                classes: 65,
                kind: crate::model::InputKind::Tokens,
            },
            effective_batch: 1,
            ..request(PoolModel::Host)
        };
        let fixed = |b: Breakdown| b.parameters + b.master_weights + b.gradients + b.optimizer_state;
        let full = predict(&r, 1, Precision::F32, false, Moments::F32);
        let eight = predict(&r, 1, Precision::F32, false, Moments::Q8);
        assert_eq!(fixed(full), 4 * full.parameters);
        let ratio = fixed(eight) as f64 / fixed(full) as f64;
        assert!((0.62..=0.65).contains(&ratio), "{ratio}");
        // A byte a value padded to whole blocks, and a 4-byte scale a block: a little over
        // a quarter of f32's.
        let quarter = eight.optimizer_state as f64 / full.optimizer_state as f64;
        assert!((0.25..0.26).contains(&quarter), "{quarter}");
        assert!(
            eight.workspace > full.workspace,
            "the update decodes a parameter's moments"
        );
        let pure = predict(&r, 1, Precision::F16Pure, false, Moments::Q8);
        assert_eq!(pure.master_weights, 0);
        assert_eq!(pure.gradients, full.gradients / 2, "f16 gradients");
        let ratio = fixed(pure) as f64 / fixed(full) as f64;
        assert!((0.37..=0.45).contains(&ratio), "{ratio}");
        // Accumulating, the running sum is f16 too.
        let accumulating = PlanRequest {
            effective_batch: 2,
            ..r.clone()
        };
        let summed = predict(&accumulating, 1, Precision::F16Pure, false, Moments::Q8);
        assert_eq!(summed.gradients, full.gradients);
        // Checkpointing sums each segment's gradients away as its backward yields them:
        // beside the sum, only the largest segment's are alive: the first block's (12 d^2 +
        // 13 d) with the embeddings' ((65 + 256) d).
        let by_segments = predict(&accumulating, 1, Precision::F16Pure, true, Moments::Q8);
        let first = 12 * 384 * 384 + 13 * 384 + (65 + 256) * 384;
        assert_eq!(by_segments.gradients, summed.gradients / 2 + 2 * first as u64);
        assert_eq!(
            predict(&r, 1, Precision::F16Pure, true, Moments::Q8).gradients,
            pure.gradients,
            "without a sum the gradients are the sum"
        );
        // In f32 without a sum, checkpointing spends each segment's gradients on its
        // update as its backward yields them (`step::update_in_backward`): only the
        // largest segment's are alive: with 8-bit moments the fixed bytes are 0.42x of the
        // 16 bytes a parameter, f32 weights and all.
        let in_backward = predict(&r, 1, Precision::F32, true, Moments::Q8);
        assert_eq!(in_backward.gradients, 4 * first as u64);
        let ratio = fixed(in_backward) as f64 / fixed(full) as f64;
        assert!((0.41..=0.43).contains(&ratio), "{ratio}");
    }

    /// With the precision and checkpointing fixed (by hand, or by no cap), the micro-batch is
    /// the lever left: the largest that fits.
    #[test]
    fn the_pick_is_the_largest_micro_batch_that_fits() {
        let r = PlanRequest {
            precisions: vec![Precision::F32],
            checkpointing: vec![false],
            ..request(PoolModel::Sliced { alignment: 256 })
        };
        let uncapped = plan(&r, None);
        let top = uncapped.chosen().unwrap();
        assert_eq!(
            (top.micro_batch, top.precision, top.checkpointing),
            (256, Precision::F32, false)
        );
        let peak = predict(&r, 64, Precision::F32, false, Moments::F32).total() + r.least_data_bytes();
        let cap = (peak as f64 / HEADROOM) as u64 + 1;
        let capped = plan(&r, Some(cap));
        let pick = capped.chosen().unwrap();
        assert!(pick.predicted_peak <= enforcer::limit(cap));
        assert!(pick.micro_batch >= 64);
        assert!(
            capped
                .candidates
                .iter()
                .all(|c| !c.fits || c.micro_batch <= pick.micro_batch),
            "a larger micro-batch fits"
        );
        assert_eq!(pick.accumulation_steps * pick.micro_batch, 256);
    }

    /// The setting to probe where nothing fits on corrected figures: the largest micro-batch
    /// a one-pass probe measured within the cap, as the run would take it, accumulating;
    /// none once that is measured too, or where the one-pass probe is over the cap.
    #[test]
    fn an_accumulating_setting_measured_only_in_one_pass_is_the_one_to_probe() {
        let r = request(PoolModel::Host);
        let plain = plan(&r, None).chosen().unwrap().peak();
        let capped = plan(&r, Some(enforcer::cap_for(plain)));
        let levers = ProbedLevers::default();
        let largest = capped
            .candidates
            .iter()
            .filter(|c| c.accumulates() && c.levers() == levers)
            .map(|c| c.micro_batch)
            .max()
            .expect("an accumulating setting");
        let one_pass = Probe {
            micro_batch: largest,
            accumulating: false,
            peak_reserved: 1 << 20,
            census_reserved: 1 << 20,
            levers: None,
        };
        let calibration = Calibration::fit(vec![one_pass]).unwrap().probed_with(levers);
        let next = capped
            .accumulating_measured_in_one_pass(&calibration)
            .expect("the one-pass probe fits");
        assert_eq!((next.micro_batch, next.levers()), (largest, levers));
        assert!(next.accumulates());
        let mut measured = calibration;
        measured.probes.push(Probe {
            accumulating: true,
            ..one_pass
        });
        assert!(capped.accumulating_measured_in_one_pass(&measured).is_none());
        let over = Probe {
            peak_reserved: capped.cap.unwrap(),
            ..one_pass
        };
        let over = Calibration::fit(vec![over]).unwrap().probed_with(levers);
        assert!(capped.accumulating_measured_in_one_pass(&over).is_none());
    }

    /// Where the probes of one lever put every setting over the cap, the others rest on
    /// that lever's excess: the census names the setting of another lever to probe before
    /// the cap is refused (probe.rs's `confirm`), and once measured it is picked.
    #[test]
    fn where_one_levers_probes_fit_nothing_another_lever_is_named_and_picked() {
        let r = request(PoolModel::Host);
        let plain = plan(&r, None).chosen().unwrap().peak();
        let mut capped = plan(&r, Some(enforcer::cap_for(plain)));
        let probed = ProbedLevers {
            precision: Precision::F16,
            checkpointing: false,
            moments: Moments::F32,
        };
        let census = |c: &Candidate| c.breakdown.device();
        let over = |micro_batch: usize, levers: Option<ProbedLevers>, census_reserved: u64, by: u64| Probe {
            micro_batch,
            accumulating: false,
            peak_reserved: census_reserved + by,
            census_reserved,
            levers,
        };
        let f16 = capped.candidates.iter().find(|c| c.levers() == probed).unwrap();
        let calibration = Calibration::fit(vec![over(f16.micro_batch, None, census(f16), 1 << 30)])
            .unwrap()
            .probed_with(probed);
        capped.calibrate(calibration.clone());
        assert!(capped.chosen().is_none(), "a GiB over fits nothing");
        let untried = |c: &Candidate| !calibration.ran_levers(c.levers());
        let named = capped
            .census_pick_among(untried)
            .expect("another lever fits by the census");
        assert_ne!(named.levers(), probed);
        assert!(enforcer::within_limit(capped.cap, named.predicted_peak));
        let (micro_batch, levers, device) = (named.micro_batch, named.levers(), census(named));
        let mut confirmed = calibration;
        confirmed.probes.push(over(micro_batch, Some(levers), device, 0));
        capped.calibrate(confirmed);
        let pick = capped.chosen().expect("the measured setting fits");
        assert_eq!(pick.levers(), levers);
        assert!(!capped.candidates.iter().any(|c| c.fits && c.levers() == probed));
    }

    fn setting(c: &Candidate) -> (usize, Precision, bool) {
        (c.micro_batch, c.precision, c.checkpointing)
    }

    /// The pick is the least expected time by the device's lever costs, not a fixed order:
    /// f16 where it is faster, f32 where it is not, and under a cap that the plain setting
    /// passes, the cheapest of the settings that fit.
    #[test]
    fn the_pick_weighs_each_levers_cost_on_the_device() {
        let mut r = request(PoolModel::Host);
        r.costs = LeverCosts::GPU;
        assert_eq!(
            setting(plan(&r, None).chosen().unwrap()),
            (256, Precision::F16, false)
        );
        r.costs = LeverCosts {
            f16: 1.5,
            ..LeverCosts::GPU
        };
        assert_eq!(
            setting(plan(&r, None).chosen().unwrap()),
            (256, Precision::F32, false)
        );
        let plain = predict(&r, 256, Precision::F32, false, Moments::F32).total() + r.least_data_bytes();
        let capped = plan(&r, Some(enforcer::cap_for(plain) - 1));
        let pick = capped.chosen().unwrap();
        assert_ne!(
            setting(pick),
            (256, Precision::F32, false),
            "the plain setting passes this cap"
        );
        let fastest = capped
            .candidates
            .iter()
            .filter(|c| c.fits)
            .map(|c| c.relative_time)
            .reduce(f64::min)
            .unwrap();
        assert!(pick.relative_time <= fastest * (1.0 + TIME_TOLERANCE), "{pick:?}");
    }

    #[test]
    fn a_cap_below_every_setting_picks_nothing_and_names_the_smallest() {
        let r = request(PoolModel::Sliced { alignment: 256 });
        let capped = plan(&r, Some(1 << 20));
        assert!(capped.chosen().is_none());
        let smallest = capped.smallest_fitting_cap().unwrap();
        assert!(plan(&r, Some(smallest)).chosen().is_some());
    }

    fn layer(width: usize) -> Segment {
        Segment {
            input: width,
            saved: vec![width],
            output: width,
            parameters: 0,
        }
    }

    #[test]
    fn checkpointing_recomputes_every_other_input_of_a_chain_of_equal_layers() {
        // Six equal layers: inputs 1 and 3 are dropped, each recomputed from the kept one
        // below it.
        let chain: Vec<Segment> = (0..6).map(|_| layer(100)).collect();
        let dropped = recomputed_inputs(&chain);
        assert_eq!(dropped & 1, 0, "segment 0 reads the batch");
        assert_eq!(dropped & (dropped >> 1), 0, "two dropped in a row");
        assert_eq!(dropped, 0b1010);
        let kept_peak: usize = (0..6)
            .map(|i| alive_during(&chain, i, 0).iter().sum::<usize>())
            .max()
            .unwrap();
        assert!(recomputed_peak(&chain).iter().sum::<usize>() < kept_peak);
    }

    #[test]
    fn checkpointing_keeps_every_input_where_dropping_one_lowers_no_peak() {
        // A wide first segment sets the peak; the rest are small.
        let segments = vec![
            Segment {
                input: 10,
                saved: vec![10_000],
                output: 100,
                parameters: 0,
            },
            layer(100),
            layer(10),
        ];
        assert_eq!(recomputed_inputs(&segments), 0);
    }

    /// What docs/design.md ("Activation checkpointing") says of the two models it benchmarks.
    #[test]
    fn the_mlps_first_hidden_output_is_recomputed_and_the_cnn_keeps_its_inputs() {
        let input = request(PoolModel::Host).input;
        let mlp = ModelConfig::Mlp {
            hidden: vec![1024; 4],
        }
        .census(&input);
        assert_eq!(recomputed_inputs(&mlp.segments), 0b10);
        let cnn = ModelConfig::cnn_default().census(&input);
        assert_eq!(recomputed_inputs(&cnn.segments), 0);
    }

    #[test]
    fn sliced_pools_round_up_to_pages() {
        let pool = PoolModel::Sliced { alignment: 256 };
        const MIB: u64 = 1 << 20;
        // Metadata alone holds one small page.
        assert_eq!(pool.reserved(&[1024]), 8 * MIB);
        // 3 MiB of tensors take two 2 MiB pages.
        assert_eq!(pool.reserved(&[3 * MIB / 2, 3 * MIB / 2]), 8 * MIB + 4 * MIB);
        // A 10 MiB tensor grows pages to 11 MiB.
        assert_eq!(pool.reserved(&[10 * MIB]), 8 * MIB + 11 * MIB);
    }
}
