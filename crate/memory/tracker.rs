//! What a run holds, sampled at each phase of a step: device reserved and in use, the
//! data pipeline, the host's and the wasm heap's bytes.

use burn::prelude::Device;
use serde::{Deserialize, Serialize};

use crate::data::MemoryGauge;
use crate::platform;

/// Memory at one moment, from every source a run can read. `None` where the backend or
/// platform does not report a figure (ndarray has no device pool).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemorySample {
    /// Bytes of live device allocations.
    pub gpu_bytes_in_use: Option<u64>,
    /// Bytes the device allocator holds, live or cached: what counts against a cap.
    pub gpu_bytes_reserved: Option<u64>,
    pub gpu_allocations: Option<u64>,
    /// Bytes the data pipeline holds (chunks fetched, decoded, in use).
    pub data_bytes_held: u64,
    /// Resident memory of the process natively; the wasm linear memory in the browser.
    pub host_bytes: Option<u64>,
}

fn max_option(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

impl MemorySample {
    /// Field-wise maximum: the peak of two samples.
    pub fn max(self, other: MemorySample) -> MemorySample {
        MemorySample {
            gpu_bytes_in_use: max_option(self.gpu_bytes_in_use, other.gpu_bytes_in_use),
            gpu_bytes_reserved: max_option(self.gpu_bytes_reserved, other.gpu_bytes_reserved),
            gpu_allocations: max_option(self.gpu_allocations, other.gpu_allocations),
            data_bytes_held: self.data_bytes_held.max(other.data_bytes_held),
            host_bytes: max_option(self.host_bytes, other.host_bytes),
        }
    }
}

/// Where in a step a sample was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum Phase {
    /// After a micro-batch's forward pass (with checkpointing: once the kept segment
    /// inputs exist).
    Forward,
    /// Checkpointing: after segment `segment` ran again under autodiff, before its
    /// backward.
    Recomputed { segment: usize },
    /// After a micro-batch's backward pass, its gradients summed.
    Backward,
    /// After the optimizer's update.
    Update,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Phase::Forward => write!(f, "forward"),
            Phase::Recomputed { segment } => write!(f, "recomputed segment {segment}"),
            Phase::Backward => write!(f, "backward"),
            Phase::Update => write!(f, "update"),
        }
    }
}

/// One sample and where it was taken: with every phase of a step, it shows which one set
/// the peak and how far the reservation stands above what is in use there.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseSample {
    #[serde(flatten)]
    pub phase: Phase,
    pub memory: MemorySample,
}

/// Samples memory at the points of a step where it peaks (after each forward and backward
/// pass and after the optimizer update) and keeps the step's peak; on request also every
/// sample with its phase.
pub struct MemoryTracker {
    device: Device,
    data: MemoryGauge,
    step_peak: MemorySample,
    /// `Some` while phases are recorded: this step's samples so far.
    phases: Option<Vec<PhaseSample>>,
}

impl MemoryTracker {
    pub fn new(device: Device, data: MemoryGauge) -> Self {
        MemoryTracker {
            device,
            data,
            step_peak: MemorySample::default(),
            phases: None,
        }
    }

    /// Keep every sample with its phase, for [`Self::take_phases`].
    pub fn record_phases(&mut self) {
        self.phases.get_or_insert_with(Vec::new);
    }

    /// A sample taken at `phase`, recorded when phases are.
    pub fn sample_at(&mut self, phase: Phase) -> MemorySample {
        let memory = self.sample();
        if let Some(phases) = self.phases.as_mut() {
            phases.push(PhaseSample { phase, memory });
        }
        memory
    }

    /// The phases recorded since the last call; empty unless [`Self::record_phases`].
    pub fn take_phases(&mut self) -> Vec<PhaseSample> {
        self.phases.as_mut().map(std::mem::take).unwrap_or_default()
    }

    pub fn sample(&mut self) -> MemorySample {
        let pool = self.device.memory_pool_usage();
        let now = MemorySample {
            gpu_bytes_in_use: pool.as_ref().map(|p| p.bytes_in_use),
            gpu_bytes_reserved: pool.as_ref().map(|p| p.bytes_reserved),
            gpu_allocations: pool.as_ref().map(|p| p.number_allocs),
            data_bytes_held: self.data.bytes_held() as u64,
            host_bytes: platform::host_memory_bytes(),
        };
        self.step_peak = self.step_peak.max(now);
        now
    }

    /// The peak since the last call.
    pub fn take_step_peak(&mut self) -> MemorySample {
        std::mem::take(&mut self.step_peak)
    }
}
