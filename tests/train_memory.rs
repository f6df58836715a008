//! The memory levers end to end: f16 with master weights (wgpu on lavapipe supports f16),
//! its fallback where f16 is missing, and a cap no setting fits.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use burn::module::{Module, ModuleVisitor, Param};
use burn::prelude::*;
use burn::tensor::DType;
use headroom::data::{Codec, DataSource};
use headroom::model::ModelConfig;
use headroom::train::events::{RunStarted, RunSummary};
use headroom::train::{BackendKind, Duration, Precision, TrainConfig, TrainError, TrainEvent, Trainer};
use headroom::units::format_bytes_up;

/// One wgpu test at a time: they share the process's device, and the cap's probes measure
/// its pool, which a run beside them would fill (a cap named from one run's probes was
/// refused by the next's, a page apart, in a full `tests/run-all` on 2026-12-07).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn config(hidden: Vec<usize>, steps: u64) -> TrainConfig {
    TrainConfig {
        model: ModelConfig::Mlp { hidden },
        effective_batch: 128,
        duration: Duration::Steps(steps),
        evaluate: false,
        ..Default::default()
    }
}

struct Run {
    started: RunStarted,
    steps: Vec<headroom::train::events::StepRecord>,
    summary: RunSummary,
    parameter_dtypes: Vec<DType>,
}

struct Dtypes(Vec<DType>);

impl ModuleVisitor for Dtypes {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        self.0.push(param.val().dtype());
    }
}

async fn train(backend: BackendKind, config: TrainConfig) -> Result<Run, TrainError> {
    let dataset = common::synthetic_dataset(2048, 512, Codec::Lz4);
    let source = DataSource::open(dataset.dir.to_str().unwrap(), config.stream_options())
        .await
        .unwrap();
    let mut trainer = Trainer::new(config, &source, backend.device(), backend.name()).await?;
    let mut events = Vec::new();
    let summary = trainer.run(&source, |event| events.push(event.clone())).await?;
    let mut dtypes = Dtypes(Vec::new());
    trainer.model().visit(&mut dtypes);
    let started = events
        .iter()
        .find_map(|e| match e {
            TrainEvent::Started(s) => Some(s.clone()),
            _ => None,
        })
        .unwrap();
    let steps = events
        .iter()
        .filter_map(|e| match e {
            TrainEvent::Step(s) => Some(s.clone()),
            _ => None,
        })
        .collect();
    Ok(Run {
        started,
        steps,
        summary,
        parameter_dtypes: dtypes.0,
    })
}

fn mean(values: impl Iterator<Item = f32>) -> f32 {
    let values: Vec<f32> = values.collect();
    values.iter().sum::<f32>() / values.len() as f32
}

#[tokio::test]
async fn f16_on_wgpu_learns_with_f32_master_weights() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let run = train(
        BackendKind::Wgpu,
        TrainConfig {
            precision: Some(Precision::F16),
            evaluate: true,
            ..config(vec![64], 30)
        },
    )
    .await
    .unwrap();
    assert_eq!(run.started.precision, Precision::F16, "lavapipe supports f16");
    // Evaluation runs the f16 copy too.
    let eval = run.summary.eval.as_ref().expect("evaluated at the end");
    assert!(eval.accuracy > 0.6, "f16 test accuracy {}", eval.accuracy);
    assert!(run.started.precision_note.is_none());
    assert!(run.steps.iter().all(|s| s.loss_scale.is_some()));
    let first = mean(run.steps[..3].iter().map(|s| s.loss));
    let last = mean(run.steps[27..].iter().map(|s| s.loss));
    assert!(last < 0.7 * first, "f16 loss {first} -> {last}");
    assert!(
        run.summary.skipped_steps < 5,
        "{} steps skipped",
        run.summary.skipped_steps
    );
    assert!(
        run.parameter_dtypes.iter().all(|d| *d == DType::F32),
        "{:?}",
        run.parameter_dtypes
    );
}

/// Natively only ndarray lacks f16 (flex and lavapipe have it); in the browser
/// `wasm_train` checks the same on SwiftShader, which has no shader-f16.
#[cfg(feature = "ndarray")]
#[tokio::test]
async fn f16_on_ndarray_says_so_and_trains_in_f32() {
    let run = train(
        BackendKind::Ndarray,
        TrainConfig {
            precision: Some(Precision::F16),
            ..config(vec![32], 3)
        },
    )
    .await
    .unwrap();
    assert_eq!(run.started.precision, Precision::F32);
    let note = run.started.precision_note.expect("a note on the fallback");
    assert!(note.contains("f16") && note.contains("ndarray"), "{note}");
    assert!(run.steps.iter().all(|s| s.loss_scale.is_none()));
}

#[tokio::test]
async fn a_cap_below_every_plan_is_refused_before_training_with_the_cap_that_would_fit() {
    let _alone = ONE_AT_A_TIME.lock().await;
    // f32 and every activation kept, fixed by hand: the refusal then names what f16 and
    // checkpointing would need (left to the planner, it would weigh them itself).
    let capped = |cap: u64| TrainConfig {
        cap: Some(cap),
        precision: Some(Precision::F32),
        checkpointing: Some(false),
        ..config(vec![512, 256], 3)
    };
    let (error, refusal) = match train(BackendKind::Wgpu, capped(1 << 20)).await {
        Err(TrainError::CapTooSmall(refusal)) => (refusal.to_string(), refusal),
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("trained under a 1 MiB cap"),
    };
    // The figures come as data; the text is made from them.
    assert_eq!(refusal.cap_bytes, 1 << 20);
    assert!(refusal.needed_bytes > 1 << 20, "{error}");
    assert!(error.contains("a cap of 1.0 MiB fits no setting"), "{error}");
    // Each lever this run could still use is tried, with what it would need.
    assert!(
        error.contains("with checkpointing") && error.contains("with f16 storage"),
        "{error}"
    );
    // The cap it names is the one that fits: the run trains under it.
    let fitting = refusal.needed_bytes;
    assert!(
        error.contains(&format!(
            "the smallest cap that fits is {}",
            format_bytes_up(fitting as usize)
        )),
        "{error}"
    );
    let run = train(BackendKind::Wgpu, capped(fitting))
        .await
        .unwrap_or_else(|e| panic!("the named cap of {fitting} bytes did not fit: {e}"));
    assert_eq!(run.summary.steps, 3);
}
