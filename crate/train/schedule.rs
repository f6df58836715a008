//! Learning rate over the run: linear warmup from zero, then cosine decay to a floor.

#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Schedule {
    pub base_lr: f64,
    pub warmup_steps: u64,
    pub total_steps: u64,
    /// The rate the cosine ends at, as a fraction of `base_lr`.
    pub final_fraction: f64,
}

impl Schedule {
    /// The rate for optimizer step `step` (0-based).
    pub fn lr_at(&self, step: u64) -> f64 {
        if step < self.warmup_steps {
            return self.base_lr * (step + 1) as f64 / self.warmup_steps as f64;
        }
        let decay_steps = self.total_steps.saturating_sub(self.warmup_steps).max(1);
        let progress = ((step - self.warmup_steps) as f64 / decay_steps as f64).min(1.0);
        let floor = self.base_lr * self.final_fraction;
        floor + (self.base_lr - floor) * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    // In the browser (wasm-pack test, tests/run-all) these run as wasm-bindgen tests.
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn warms_up_linearly_then_decays_along_a_cosine_to_the_floor() {
        let schedule = Schedule {
            base_lr: 1.0,
            warmup_steps: 4,
            total_steps: 104,
            final_fraction: 0.1,
        };
        let lrs: Vec<f64> = (0..4).map(|s| schedule.lr_at(s)).collect();
        assert_eq!(lrs, vec![0.25, 0.5, 0.75, 1.0]);
        assert!((schedule.lr_at(4) - 1.0).abs() < 1e-12);
        assert!(
            (schedule.lr_at(54) - 0.55).abs() < 1e-12,
            "halfway is the midpoint"
        );
        assert!((schedule.lr_at(104) - 0.1).abs() < 1e-12);
        assert!((schedule.lr_at(500) - 0.1).abs() < 1e-12, "stays at the floor");
    }
}
