//! The hard cap: decides, from a step's measured peak, whether the next step needs a
//! smaller micro-batch. Accumulation grows to match, so the effective batch (and the
//! math) stays the same.

use serde::{Deserialize, Serialize};

/// The share of the cap a step may use before the next one is shrunk: a step can allocate
/// what the one before did not (optimizer state on the first update, a new page), so the
/// enforcer acts before the cap, not at it.
pub const HEADROOM: f64 = 0.9;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Within,
    /// Continue with this micro-batch.
    Shrink(usize),
    /// Over the cap at the smallest micro-batch: nothing left to give.
    Exhausted,
}

/// Why and when the micro-batch changed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Enforcement {
    /// The step after which it changed (0: before training, from the plan).
    pub step: u64,
    pub from_micro_batch: usize,
    pub to_micro_batch: usize,
    pub accumulation_steps: usize,
    /// The bytes that triggered it: measured, or predicted before training.
    pub peak_bytes: u64,
    pub cap: u64,
    pub predicted: bool,
}

/// The next micro-batch below `micro_batch` that still divides the effective batch: about
/// half, so one shrink frees about half the activations.
pub fn smaller_micro_batch(micro_batch: usize, effective_batch: usize) -> Option<usize> {
    (1..=micro_batch / 2)
        .rev()
        .find(|&m| effective_batch.is_multiple_of(m))
}

/// A shrink that lowered the next step's peak by less than this share freed nothing worth
/// having: the peak is parameters, optimizer state or cached pages, not activations.
const RELIEF: f64 = 0.02;

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Enforcer {
    pub cap: u64,
    /// The peak that caused the last shrink.
    shrunk_at: Option<u64>,
}

/// The bytes a step may reach under `cap`.
pub fn limit(cap: u64) -> u64 {
    (cap as f64 * HEADROOM) as u64
}

/// The smallest cap under which `peak` leaves the enforcer's headroom.
pub fn cap_for(peak: u64) -> u64 {
    (peak as f64 / HEADROOM).ceil() as u64
}

/// Whether `bytes` leave the enforcer's headroom under `cap` (always, without one).
pub fn within_limit(cap: Option<u64>, bytes: u64) -> bool {
    cap.is_none_or(|cap| bytes <= limit(cap))
}

impl Enforcer {
    pub fn new(cap: u64) -> Self {
        Enforcer { cap, shrunk_at: None }
    }

    pub fn limit(&self) -> u64 {
        limit(self.cap)
    }

    pub fn check(&mut self, peak_bytes: u64, micro_batch: usize, effective_batch: usize) -> Verdict {
        if peak_bytes <= self.limit() {
            return Verdict::Within;
        }
        let relieved = self
            .shrunk_at
            .is_none_or(|before| (peak_bytes as f64) < before as f64 * (1.0 - RELIEF));
        match smaller_micro_batch(micro_batch, effective_batch) {
            Some(smaller) if relieved => {
                self.shrunk_at = Some(peak_bytes);
                Verdict::Shrink(smaller)
            }
            _ if peak_bytes <= self.cap => Verdict::Within,
            _ => Verdict::Exhausted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    // In the browser (wasm-pack test, tests/run-all) these run as wasm-bindgen tests.
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn shrinking_keeps_the_effective_batch_divisible() {
        assert_eq!(smaller_micro_batch(256, 256), Some(128));
        assert_eq!(smaller_micro_batch(96, 96), Some(48));
        assert_eq!(smaller_micro_batch(60, 60), Some(30));
        assert_eq!(smaller_micro_batch(7, 7), Some(1));
        assert_eq!(smaller_micro_batch(1, 256), None);
    }

    #[test]
    fn the_enforcer_acts_before_the_cap() {
        let mut enforcer = Enforcer::new(1000);
        assert_eq!(enforcer.check(800, 64, 256), Verdict::Within);
        assert_eq!(enforcer.check(950, 64, 256), Verdict::Shrink(32));
        assert_eq!(enforcer.check(920, 32, 256), Verdict::Shrink(16));
        assert_eq!(Enforcer::new(1000).check(950, 1, 256), Verdict::Within);
        assert_eq!(Enforcer::new(1000).check(1001, 1, 256), Verdict::Exhausted);
    }

    #[test]
    fn a_shrink_that_freed_nothing_is_not_repeated() {
        let mut enforcer = Enforcer::new(1000);
        assert_eq!(enforcer.check(950, 64, 256), Verdict::Shrink(32));
        assert_eq!(enforcer.check(945, 32, 256), Verdict::Within);
        assert_eq!(enforcer.check(1010, 32, 256), Verdict::Exhausted);
    }
}
