//! One run's settings (`TrainConfig`): the same struct, as JSON, drives the CLI and the
//! page.

use serde::{Deserialize, Serialize};

use crate::data::StreamOptions;
use crate::model::generate::SampleSettings;
use crate::model::{InputShape, ModelConfig};
pub use crate::settings::{Moments, OptimizerKind, Precision};

#[cfg_attr(all(test, not(target_arch = "wasm32")), derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OptimizerConfig {
    pub kind: OptimizerKind,
    pub learning_rate: f64,
    /// SGD momentum; ignored by Adam(W).
    pub momentum: f64,
    pub weight_decay: f64,
    /// Adam(W)'s epsilon.
    pub epsilon: f32,
    /// Adam(W)'s second-moment decay (nanoGPT's small models use 0.99).
    pub beta_2: f32,
    pub warmup_steps: u64,
    /// The learning rate at the end of the run, as a fraction of `learning_rate`.
    pub final_lr_fraction: f64,
    /// Clip the gradients' global L2 norm to this value.
    pub clip_norm: Option<f32>,
}

impl Default for OptimizerConfig {
    fn default() -> Self {
        OptimizerConfig {
            kind: OptimizerKind::Adam,
            learning_rate: 1e-3,
            momentum: 0.9,
            weight_decay: 0.0,
            epsilon: 1e-8,
            beta_2: 0.999,
            warmup_steps: 0,
            final_lr_fraction: 0.05,
            clip_norm: None,
        }
    }
}

/// How long to train: whole epochs, or a number of optimizer steps.
#[cfg_attr(all(test, not(target_arch = "wasm32")), derive(tsify::Tsify))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Duration {
    Epochs(u64),
    Steps(u64),
}

/// One run's settings; the same struct drives the CLI and the page.
/// A field it does not know is refused, not ignored: the page, the comparison worker and a
/// saved run cannot drift from this type without an error naming the field.
#[cfg_attr(all(test, not(target_arch = "wasm32")), derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainConfig {
    pub model: ModelConfig,
    pub optimizer: OptimizerConfig,
    /// Samples per optimizer step.
    pub effective_batch: usize,
    /// Samples per forward/backward pass; `effective_batch / micro_batch` passes are
    /// accumulated into one step. `None`: the planner picks the largest that fits the cap
    /// (the effective batch without a cap).
    pub micro_batch: Option<usize>,
    // tsify reads any type named Duration as std's.
    #[cfg_attr(all(test, not(target_arch = "wasm32")), tsify(type = "Duration"))]
    pub duration: Duration,
    /// Activation checkpointing: keep only each segment's input (a layer of the MLP, a
    /// conv block of the CNN) and recompute the segment during backward: less memory, one
    /// more forward pass, same gradients. `None` (auto): under a cap the planner decides,
    /// by what it costs against the other settings that fit; without a cap, off.
    pub checkpointing: Option<bool>,
    /// `None` (auto): under a cap the planner picks f16 where the device has it and it
    /// is the faster setting that fits; without a cap, f32.
    pub precision: Option<Precision>,
    /// How Adam(W) keeps its two moments: f32, or 8 bits a value (block-wise dynamic
    /// quantisation, `train::quantize`). `None` (auto): under a cap the planner may pick
    /// 8 bits where f32 does not fit; without a cap, f32. SGD keeps f32.
    pub moments: Option<Moments>,
    /// Hard cap on the bytes the run holds (device reservation plus data pipeline);
    /// the enforcer halves the micro-batch when a step would pass it.
    pub cap: Option<u64>,
    /// Measure the peak of probe steps before step 1 and plan on it (see
    /// `train::calibrate`); off, the plan rests on the tensor census alone.
    pub calibrate: bool,
    /// Evaluate on the test split every this many steps (0: at the end of each epoch).
    pub eval_every: u64,
    /// Whether to evaluate at all (benchmarks measure training alone).
    pub evaluate: bool,
    /// Evaluate on at most this many test samples, the first the test stream yields
    /// (without shuffling, the first of the split): a quick, repeatable evaluation where
    /// the whole split would take longer than the training.
    pub eval_samples: Option<usize>,
    /// Whether evaluation runs with the training stream's chunks released (fetched again
    /// after it); `None`: the planner decides, releasing them only where the cap needs it.
    pub pause_training_for_eval: Option<bool>,
    pub seed: u64,
    pub stream: StreamOptions,
    /// The GPT writes a sample every this many steps (0: only at the end).
    pub sample_every: u64,
    pub sample: SampleConfig,
}

/// What the GPT's samples start from and how they are drawn.
#[cfg_attr(all(test, not(target_arch = "wasm32")), derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SampleConfig {
    pub prompt: String,
    pub generation: SampleSettings,
}

impl Default for SampleConfig {
    fn default() -> Self {
        SampleConfig {
            prompt: "\n".into(),
            generation: SampleSettings::default(),
        }
    }
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            model: ModelConfig::mlp_default(),
            optimizer: OptimizerConfig::default(),
            effective_batch: 256,
            micro_batch: None,
            duration: Duration::Epochs(1),
            checkpointing: None,
            precision: None,
            moments: None,
            cap: None,
            calibrate: true,
            eval_every: 0,
            evaluate: true,
            eval_samples: None,
            pause_training_for_eval: None,
            seed: 0,
            stream: StreamOptions::default(),
            sample_every: 0,
            sample: SampleConfig::default(),
        }
    }
}

impl TrainConfig {
    /// The precisions the planner may choose from: the one asked for, or under a cap both
    /// where the device has f16 (`f16_available`), or f32 alone.
    pub fn precision_choices(&self, f16_available: bool) -> Vec<Precision> {
        match (self.precision, self.cap) {
            (Some(fixed), _) => vec![fixed],
            (None, Some(_)) if f16_available => vec![Precision::F32, Precision::F16, Precision::F16Pure],
            (None, _) => vec![Precision::F32],
        }
    }

    /// With checkpointing, without, or (auto, under a cap) both for the planner to weigh.
    pub fn checkpointing_choices(&self) -> Vec<bool> {
        match (self.checkpointing, self.cap) {
            (Some(fixed), _) => vec![fixed],
            (None, Some(_)) => vec![false, true],
            (None, None) => vec![false],
        }
    }

    /// Adam's moments as fixed, or (auto, under a cap, for Adam and AdamW) f32 and 8 bits
    /// for the planner to weigh.
    pub fn moments_choices(&self) -> Vec<Moments> {
        let adam = self.optimizer.kind != OptimizerKind::Sgd;
        match (self.moments, self.cap) {
            (Some(fixed), _) => vec![fixed],
            (None, Some(_)) if adam => vec![Moments::F32, Moments::Q8],
            (None, _) => vec![Moments::F32],
        }
    }

    /// The stream options a source for this run opens with: the configured ones, with the
    /// text window the model reads.
    pub fn stream_options(&self) -> StreamOptions {
        StreamOptions {
            window: self.model.text_window(),
            ..self.stream.clone()
        }
    }

    pub fn steps_per_epoch(&self, train_samples: usize) -> u64 {
        train_samples.div_ceil(self.effective_batch.max(1)) as u64
    }

    pub fn total_steps(&self, train_samples: usize) -> u64 {
        match self.duration {
            Duration::Epochs(epochs) => epochs * self.steps_per_epoch(train_samples),
            Duration::Steps(steps) => steps,
        }
    }

    pub fn validate(&self, input: &InputShape) -> Result<(), String> {
        self.model.validate(input)?;
        if self.effective_batch == 0 {
            return Err("effective batch must be at least 1".into());
        }
        if let Some(micro_batch) = self.micro_batch {
            if micro_batch == 0 || micro_batch > self.effective_batch {
                return Err(format!(
                    "micro-batch {micro_batch} must be between 1 and the effective batch {}",
                    self.effective_batch
                ));
            }
            if !self.effective_batch.is_multiple_of(micro_batch) {
                return Err(format!(
                    "effective batch {} is not a multiple of micro-batch {micro_batch}: accumulation would change the math",
                    self.effective_batch
                ));
            }
        }
        if self.eval_samples == Some(0) {
            return Err(
                "evaluate on at least 1 sample (or leave eval_samples unset for the whole split)".into(),
            );
        }
        if self.cap == Some(0) {
            return Err("the memory cap must be more than zero bytes".into());
        }
        match self.duration {
            Duration::Epochs(0) | Duration::Steps(0) => {
                return Err("train for at least 1 epoch or step".into());
            }
            _ => {}
        }
        let o = &self.optimizer;
        if !(o.learning_rate > 0.0 && o.learning_rate.is_finite()) {
            return Err(format!("learning rate {} must be positive", o.learning_rate));
        }
        if !(0.0..1.0).contains(&o.momentum) {
            return Err(format!("momentum {} must be in [0, 1)", o.momentum));
        }
        if o.weight_decay < 0.0 {
            return Err(format!("weight decay {} must not be negative", o.weight_decay));
        }
        if !(0.0..=1.0).contains(&o.final_lr_fraction) {
            return Err(format!(
                "final_lr_fraction {} must be in [0, 1]",
                o.final_lr_fraction
            ));
        }
        if !(0.0..1.0).contains(&o.beta_2) {
            return Err(format!("beta2 {} must be in [0, 1)", o.beta_2));
        }
        if o.clip_norm.is_some_and(|c| c.is_nan() || c <= 0.0) {
            return Err("gradient clipping norm must be positive".into());
        }
        if o.kind == OptimizerKind::Sgd && self.moments == Some(Moments::Q8) {
            return Err("8-bit moments are Adam's and AdamW's; SGD keeps its velocity in f32".into());
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
    fn the_pages_settings_parse_and_a_field_this_type_lacks_is_named() {
        // What web/page/controls.js sends for the GPT, and web/compare's worker for the MLP.
        let page = r#"{"model":{"kind":"gpt","layers":2,"heads":4,"width":128,"context":64},
            "sample_every":50,"optimizer":{"learning_rate":0.001},"effective_batch":16,
            "micro_batch":null,"duration":{"steps":300},"checkpointing":false,"precision":"f32",
            "cap":268435456,"eval_every":100,"eval_samples":256,"seed":0,
            "stream":{"prefetch":2,"seed":0}}"#;
        let compare = r#"{"model":{"kind":"mlp","hidden":[128]},
            "optimizer":{"kind":"adam","learning_rate":0.001,"epsilon":1e-7,"warmup_steps":0,"final_lr_fraction":1},
            "effective_batch":64,"micro_batch":64,"duration":{"steps":20},"evaluate":true,
            "eval_every":0,"eval_samples":1000,"stream":{"shuffle":false,"prefetch":2}}"#;
        for json in [page, compare] {
            serde_json::from_str::<TrainConfig>(json).unwrap();
        }
        for (json, field) in [
            (r#"{"learning_rate":0.1}"#, "learning_rate"),
            (r#"{"optimizer":{"learning_rat":0.1}}"#, "learning_rat"),
            (r#"{"stream":{"prefetc":1}}"#, "prefetc"),
        ] {
            let error = serde_json::from_str::<TrainConfig>(json).unwrap_err().to_string();
            assert!(error.contains(&format!("unknown field `{field}`")), "{error}");
        }
    }

    #[test]
    fn levers_are_chosen_only_under_a_cap_and_one_fixed_by_hand_stays() {
        let uncapped = TrainConfig::default();
        assert_eq!(uncapped.precision_choices(true), vec![Precision::F32]);
        assert_eq!(uncapped.checkpointing_choices(), vec![false]);
        assert_eq!(uncapped.moments_choices(), vec![Moments::F32]);
        let capped = TrainConfig {
            cap: Some(1 << 28),
            ..TrainConfig::default()
        };
        assert_eq!(
            capped.precision_choices(true),
            vec![Precision::F32, Precision::F16, Precision::F16Pure]
        );
        assert_eq!(capped.precision_choices(false), vec![Precision::F32]);
        assert_eq!(capped.checkpointing_choices(), vec![false, true]);
        assert_eq!(capped.moments_choices(), vec![Moments::F32, Moments::Q8]);
        let sgd = TrainConfig {
            optimizer: OptimizerConfig {
                kind: OptimizerKind::Sgd,
                ..OptimizerConfig::default()
            },
            ..capped.clone()
        };
        assert_eq!(sgd.moments_choices(), vec![Moments::F32]);
        let eight_bit_sgd = TrainConfig {
            moments: Some(Moments::Q8),
            ..sgd
        };
        let input = crate::model::InputShape {
            height: 28,
            width: 28,
            classes: 10,
            kind: crate::model::InputKind::Images,
        };
        assert!(eight_bit_sgd.validate(&input).unwrap_err().contains("SGD"));
        let fixed = TrainConfig {
            precision: Some(Precision::F32),
            checkpointing: Some(false),
            moments: Some(Moments::Q8),
            ..capped.clone()
        };
        assert_eq!(fixed.precision_choices(true), vec![Precision::F32]);
        assert_eq!(fixed.checkpointing_choices(), vec![false]);
        assert_eq!(fixed.moments_choices(), vec![Moments::Q8]);
        let on = TrainConfig {
            precision: Some(Precision::F16),
            checkpointing: Some(true),
            cap: None,
            ..capped
        };
        assert_eq!(on.precision_choices(true), vec![Precision::F16]);
        assert_eq!(on.checkpointing_choices(), vec![true]);
        // The page's "auto" is null.
        let auto: TrainConfig =
            serde_json::from_str(r#"{"precision":null,"checkpointing":null,"moments":null}"#).unwrap();
        assert_eq!(
            (auto.precision, auto.checkpointing, auto.moments),
            (None, None, None)
        );
        let eight: TrainConfig = serde_json::from_str(r#"{"moments":"8bit"}"#).unwrap();
        assert_eq!(eight.moments, Some(Moments::Q8));
    }

    /// The config type the page and the comparison worker build (web/page/types/train-config.d.ts)
    /// is generated from these types, and `tsc` checks the JS that builds one against it
    /// (tests/run-all): a field renamed or retyped here fails there, not in a user's run.
    /// Native only: tsify is a native dev-dependency (see Cargo.toml).
    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn the_js_config_type_is_generated_from_these_types() {
        use crate::data::RetryPolicy;
        use crate::model::GptShape;
        use tsify::Tsify;
        const HEADER: &str = "\
// Generated from the Rust types by crate/train/config.rs's test
// the_js_config_type_is_generated_from_these_types; do not edit. After changing a type, run
//   HEADROOM_WRITE_TYPES=1 cargo test --lib js_config_type
// Every field of a struct with #[serde(default)] is optional: Rust fills in the default.

/** std::time::Duration as serde writes it. */
export interface StdDuration {
    secs: number;
    nanos: number;
}
";
        let declarations = [
            TrainConfig::DECL,
            ModelConfig::DECL,
            GptShape::DECL,
            OptimizerConfig::DECL,
            OptimizerKind::DECL,
            Precision::DECL,
            Moments::DECL,
            Duration::DECL,
            StreamOptions::DECL,
            RetryPolicy::DECL,
            SampleConfig::DECL,
            SampleSettings::DECL,
        ];
        let generated = format!("{HEADER}\n{}\n", declarations.join("\n\n"));
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/web/page/types/train-config.d.ts");
        if std::env::var_os("HEADROOM_WRITE_TYPES").is_some() {
            std::fs::write(path, &generated).unwrap();
        }
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == generated,
            "web/page/types/train-config.d.ts differs from the Rust config types; regenerate it with \
             HEADROOM_WRITE_TYPES=1 cargo test --lib js_config_type"
        );
    }
}
