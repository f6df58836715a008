//! The planner's second opinion: the device's own peak, measured on probe steps before
//! step 1, climbing a ladder of micro-batches up to the one the census picked (the idea
//! of a batch-size finder, without running out of memory to find it).
//!
//! The census counts tensors; what it misses is what the device adds around them (the
//! allocator's pages, kernel workspaces), and that is what a probe measures. On lavapipe
//! that addition is not even monotone in the micro-batch (a larger one can reserve less:
//! docs/benchmarks.md, "reservation against the micro-batch"), so no line through small
//! probes predicts the target within 10%: the ladder goes up to the target itself, and stops
//! before any rung whose expected peak (the census corrected by the rung below) would pass
//! the cap.

use serde::{Deserialize, Serialize};

use crate::settings::{Moments, Precision};

/// One probe: the peak device reservation over a few full steps (forward, backward,
/// optimizer update) at one micro-batch, beside what the census predicted for it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    pub micro_batch: usize,
    /// Whether the probe summed its gradients over two micro-batches, as a run that
    /// accumulates does. A one-pass probe's measurement is not an accumulating setting's,
    /// which holds the sums: the 8x512 GPT with the page's pool reserved 217.8 MiB at
    /// micro-batch 4 in one pass, and 268.2 at 4 x 2, which ran on the first figure and
    /// passed a 256 MiB cap at step 1. Runs saved before read false.
    #[serde(default)]
    pub accumulating: bool,
    pub peak_reserved: u64,
    pub census_reserved: u64,
    /// The levers of a probe that confirmed a pick made on the others' figures, where
    /// they differ from the calibration's (`None`: the calibration's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub levers: Option<ProbedLevers>,
}

impl Probe {
    /// Measured minus predicted: positive where the census fell short.
    pub fn excess(&self) -> i64 {
        self.peak_reserved as i64 - self.census_reserved as i64
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    pub probes: Vec<Probe>,
    /// The precision and checkpointing the probes ran with (`None`: not recorded, in runs
    /// saved before the planner picked levers).
    #[serde(default)]
    pub levers: Option<ProbedLevers>,
}

/// The levers of one setting beside its micro-batch (`Candidate::levers`); the default
/// is none: f32, every activation kept, f32 moments.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbedLevers {
    pub precision: Precision,
    pub checkpointing: bool,
    /// Runs saved before 8-bit moments read f32.
    #[serde(default)]
    pub moments: Moments,
}

impl Calibration {
    pub fn fit(probes: Vec<Probe>) -> Option<Calibration> {
        (!probes.is_empty()).then_some(Calibration { probes, levers: None })
    }

    /// The same, recording the levers the probes ran with.
    pub fn probed_with(self, levers: ProbedLevers) -> Calibration {
        Calibration {
            levers: Some(levers),
            ..self
        }
    }

    /// [`device_bytes`](Self::device_bytes) for a setting with these levers: a probe's
    /// measurement stands for its own levers only; another precision, checkpointing or
    /// moments at the same micro-batch gets its census corrected by the excess of the
    /// nearest probe that ran its levers, else of the calibration's own (mostly the
    /// allocator's pages, which the other levers keep).
    pub fn device_bytes_with(
        &self,
        micro_batch: usize,
        accumulating: bool,
        census_reserved: u64,
        levers: ProbedLevers,
    ) -> u64 {
        if let Some(probe) = self.exact(micro_batch, accumulating, Some(levers)) {
            return probe.peak_reserved;
        }
        let own = nearest(self.probes.iter().filter(|p| self.ran(p, levers)), micro_batch);
        let nearest = own.unwrap_or_else(|| self.nearest(micro_batch));
        census_reserved.saturating_add_signed(nearest.excess())
    }

    /// Whether a probe ran this micro-batch, accumulating or not, with these levers.
    pub fn measured(&self, micro_batch: usize, accumulating: bool, levers: ProbedLevers) -> bool {
        self.exact(micro_batch, accumulating, Some(levers)).is_some()
    }

    /// The peak a probe measured at this micro-batch, accumulating or not, with these levers.
    pub fn measured_peak(&self, micro_batch: usize, accumulating: bool, levers: ProbedLevers) -> Option<u64> {
        self.exact(micro_batch, accumulating, Some(levers))
            .map(|probe| probe.peak_reserved)
    }

    /// A probe that ran this micro-batch, accumulating or not, with these levers (`None`:
    /// the calibration's own probes).
    fn exact(&self, micro_batch: usize, accumulating: bool, levers: Option<ProbedLevers>) -> Option<&Probe> {
        self.probes.iter().find(|p| {
            let same_levers = match levers {
                Some(levers) => self.ran(p, levers),
                None => p.levers.is_none(),
            };
            p.micro_batch == micro_batch && p.accumulating == accumulating && same_levers
        })
    }

    /// Whether any probe ran with these levers.
    pub fn ran_levers(&self, levers: ProbedLevers) -> bool {
        self.probes.iter().any(|p| self.ran(p, levers))
    }

    /// Whether `probe` ran with `levers` (any, where the calibration did not record them).
    fn ran(&self, probe: &Probe, levers: ProbedLevers) -> bool {
        probe.levers.or(self.levers).is_none_or(|probed| probed == levers)
    }

    /// The nearest of the calibration's own probes (not a confirmation's).
    fn nearest(&self, micro_batch: usize) -> &Probe {
        nearest(self.probes.iter().filter(|p| p.levers.is_none()), micro_batch)
            .expect("a calibration holds a probe of its own")
    }

    /// The device reservation expected at `micro_batch`, accumulating or not, which the
    /// census puts at `census_reserved`: the probe's measurement where one ran that
    /// setting, else the census corrected by the excess of the probe nearest in
    /// micro-batch (the larger excess between two as near).
    pub fn device_bytes(&self, micro_batch: usize, accumulating: bool, census_reserved: u64) -> u64 {
        match self.exact(micro_batch, accumulating, None) {
            Some(probe) => probe.peak_reserved,
            None => census_reserved.saturating_add_signed(self.nearest(micro_batch).excess()),
        }
    }
}

/// The probe nearest in micro-batch, the one with the larger excess between two as near.
fn nearest<'a>(probes: impl Iterator<Item = &'a Probe>, micro_batch: usize) -> Option<&'a Probe> {
    probes.min_by_key(|p| (p.micro_batch.abs_diff(micro_batch), std::cmp::Reverse(p.excess())))
}

/// The rungs below and at `target`: a quarter, a half, the target itself.
pub fn probe_ladder(target: usize) -> Vec<usize> {
    let mut rungs = vec![target.div_ceil(4), target.div_ceil(2), target];
    rungs.retain(|&m| m >= 1);
    rungs.dedup();
    rungs
}

#[cfg(test)]
mod tests {
    use super::*;
    // In the browser (wasm-pack test, tests/run-all) these run as wasm-bindgen tests.
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    const MIB: u64 = 1 << 20;

    fn probe(micro_batch: usize, peak: u64, census: u64) -> Probe {
        Probe {
            micro_batch,
            accumulating: false,
            peak_reserved: peak * MIB,
            census_reserved: census * MIB,
            levers: None,
        }
    }

    #[test]
    fn a_probed_micro_batch_is_measured_and_the_others_corrected_by_the_nearest_probe() {
        let probes = Calibration::fit(vec![probe(64, 100, 90), probe(128, 150, 145)]).unwrap();
        assert_eq!(probes.device_bytes(128, false, 145 * MIB), 150 * MIB);
        assert_eq!(probes.device_bytes(32, false, 60 * MIB), 70 * MIB);
        assert_eq!(probes.device_bytes(256, false, 300 * MIB), 305 * MIB);
        // Halfway: the larger excess.
        assert_eq!(probes.device_bytes(96, false, 120 * MIB), 130 * MIB);
        // A census above every measurement is lowered, never below zero.
        let over = Calibration::fit(vec![probe(8, 40, 50)]).unwrap();
        assert_eq!(over.device_bytes(4, false, 30 * MIB), 20 * MIB);
        assert_eq!(over.device_bytes(2, false, MIB), 0);
        assert!(Calibration::fit(vec![]).is_none());
    }

    /// A one-pass probe's measurement is not that of the same micro-batch accumulated, which
    /// holds the gradient sums: that setting gets its census corrected by the probe's excess.
    #[test]
    fn a_one_pass_probe_corrects_the_accumulating_setting_and_does_not_measure_it() {
        let levers = ProbedLevers::default();
        let calibration = Calibration::fit(vec![probe(4, 218, 297)])
            .unwrap()
            .probed_with(levers);
        assert_eq!(calibration.device_bytes(4, false, 297 * MIB), 218 * MIB);
        assert_eq!(calibration.device_bytes(4, true, 357 * MIB), 278 * MIB);
        assert_eq!(
            calibration.device_bytes_with(4, true, 357 * MIB, levers),
            278 * MIB
        );
        assert!(calibration.measured(4, false, levers) && !calibration.measured(4, true, levers));
        let accumulated = Probe {
            accumulating: true,
            ..probe(4, 268, 357)
        };
        let mut both = calibration;
        both.probes.push(accumulated);
        assert_eq!(both.device_bytes_with(4, true, 357 * MIB, levers), 268 * MIB);
        assert_eq!(both.device_bytes(4, false, 297 * MIB), 218 * MIB);
        // Saved before: one pass.
        let saved: Probe =
            serde_json::from_str(r#"{"micro_batch":1,"peak_reserved":5,"census_reserved":6}"#).unwrap();
        assert!(!saved.accumulating);
    }

    /// The f16 probe's measurement is not the f32 setting's: under a cap that left the
    /// levers to the planner, that would let a setting the probes never ran pass on another's
    /// figure (measured: the 6x128 GPT at context 512 on lavapipe, f16 40.8 MiB, f32 50.9).
    #[test]
    fn a_probe_measures_its_own_levers_and_corrects_the_others() {
        let levers = |precision, checkpointing, moments| ProbedLevers {
            precision,
            checkpointing,
            moments,
        };
        let half = levers(Precision::F16, false, Moments::F32);
        let probed = Calibration::fit(vec![probe(1, 40, 41)])
            .unwrap()
            .probed_with(half);
        assert_eq!(probed.device_bytes_with(1, false, 41 * MIB, half), 40 * MIB);
        let full = levers(Precision::F32, false, Moments::F32);
        assert_eq!(probed.device_bytes_with(1, false, 55 * MIB, full), 54 * MIB);
        let recomputed = levers(Precision::F16, true, Moments::F32);
        assert_eq!(probed.device_bytes_with(1, false, 30 * MIB, recomputed), 29 * MIB);
        let eight_bit = levers(Precision::F16, false, Moments::Q8);
        assert_eq!(probed.device_bytes_with(1, false, 33 * MIB, eight_bit), 32 * MIB);
        // Unrecorded (a run saved before): as before.
        let unrecorded = Calibration::fit(vec![probe(1, 40, 41)]).unwrap();
        assert_eq!(unrecorded.device_bytes_with(1, false, 55 * MIB, full), 40 * MIB);
        // Recorded before 8-bit moments: f32 moments.
        let saved: ProbedLevers =
            serde_json::from_str(r#"{"precision":"f16","checkpointing":false}"#).unwrap();
        assert_eq!(saved, half);
    }

    /// A pick confirmed by a probe of its own levers is measured, and corrects the settings
    /// with its levers; the others keep the calibration's own correction (the 6x384 GPT
    /// under 160 MiB: probed with checkpointing, picked without, 88.0 MiB measured).
    #[test]
    fn a_confirmed_pick_is_measured_and_corrects_its_own_levers_only() {
        let levers = |checkpointing| ProbedLevers {
            precision: Precision::F16Pure,
            checkpointing,
            moments: Moments::Q8,
        };
        let mut calibration = Calibration::fit(vec![probe(1, 100, 150)])
            .unwrap()
            .probed_with(levers(true));
        assert!(!calibration.measured(1, false, levers(false)));
        assert_eq!(
            calibration.device_bytes_with(1, false, 151 * MIB, levers(false)),
            101 * MIB
        );
        calibration.probes.push(Probe {
            levers: Some(levers(false)),
            ..probe(1, 88, 151)
        });
        assert!(
            calibration.measured(1, false, levers(false)) && calibration.measured(1, false, levers(true))
        );
        assert!(!calibration.measured(4, false, levers(false)));
        assert_eq!(
            calibration.device_bytes_with(1, false, 151 * MIB, levers(false)),
            88 * MIB
        );
        assert_eq!(
            calibration.device_bytes_with(4, false, 200 * MIB, levers(false)),
            137 * MIB
        );
        assert_eq!(
            calibration.device_bytes_with(4, false, 180 * MIB, levers(true)),
            130 * MIB
        );
        let plain = ProbedLevers::default();
        assert_eq!(
            calibration.device_bytes_with(1, false, 160 * MIB, plain),
            110 * MIB
        );
        assert_eq!(calibration.device_bytes(2, false, 180 * MIB), 130 * MIB);
        // Saved before confirmations: no `levers` on a probe.
        let saved: Probe =
            serde_json::from_str(r#"{"micro_batch":1,"peak_reserved":5,"census_reserved":6}"#).unwrap();
        assert_eq!(saved.levers, None);
    }

    #[test]
    fn the_ladder_climbs_to_the_target() {
        assert_eq!(probe_ladder(256), vec![64, 128, 256]);
        assert_eq!(probe_ladder(96), vec![24, 48, 96]);
        assert_eq!(probe_ladder(3), vec![1, 2, 3]);
        assert_eq!(probe_ladder(2), vec![1, 2]);
        assert_eq!(probe_ladder(1), vec![1]);
    }
}
