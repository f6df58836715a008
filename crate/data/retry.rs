//! Retries with exponential backoff, and the deadline that turns a stalled fetch into a
//! retryable failure.

use std::time::Duration;

/// Bounded retries with exponential backoff, and a per-attempt deadline that turns a
/// stalled connection into an ordinary, retryable failure.
#[cfg_attr(all(test, not(target_arch = "wasm32")), derive(tsify::Tsify))]
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    #[cfg_attr(all(test, not(target_arch = "wasm32")), tsify(type = "StdDuration"))]
    pub initial_backoff: Duration,
    #[cfg_attr(all(test, not(target_arch = "wasm32")), tsify(type = "StdDuration"))]
    pub max_backoff: Duration,
    #[cfg_attr(all(test, not(target_arch = "wasm32")), tsify(type = "StdDuration"))]
    pub attempt_timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 4,
            initial_backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(4),
            attempt_timeout: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// Wait before attempt `attempt` (1-based; the first attempt does not wait).
    pub fn backoff_before(&self, attempt: u32) -> Duration {
        if attempt <= 1 {
            return Duration::ZERO;
        }
        let doublings = (attempt - 2).min(16);
        self.initial_backoff
            .saturating_mul(1 << doublings)
            .min(self.max_backoff)
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.max_attempts == 0 {
            return Err("max_attempts must be at least 1".into());
        }
        if self.attempt_timeout.is_zero() {
            return Err("attempt_timeout must be positive".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    // In the browser (wasm-pack test, tests/run-all) these run as wasm-bindgen tests.
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn backoff_doubles_from_the_second_attempt_and_is_capped() {
        let policy = RetryPolicy {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(300),
            ..RetryPolicy::default()
        };
        let waits: Vec<_> = (1..=5).map(|a| policy.backoff_before(a).as_millis()).collect();
        assert_eq!(waits, vec![0, 100, 200, 300, 300]);
    }
}
