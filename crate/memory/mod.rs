//! Memory: what a run holds (tracker), what it will hold (planner, pool) and the cap
//! (enforcer).

pub mod allocator;
pub mod calibration;
pub mod enforcer;
pub mod planner;
pub mod tracker;

pub use allocator::PoolModel;
pub use calibration::{Calibration, Probe};
pub use enforcer::{Enforcement, Enforcer, Verdict};
pub use planner::{
    Breakdown, Candidate, DataOption, DataSettings, LeverCosts, Plan, PlanRequest, is_recomputed_input, plan,
    recomputed_inputs,
};
pub use tracker::{MemorySample, MemoryTracker, Phase, PhaseSample};
