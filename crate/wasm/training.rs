//! A training run in the browser: the same trainer, planner and enforcer as the CLI,
//! advanced one step per call so that the worker can pause, resume and stop between steps.

use std::cell::RefCell;
use std::rc::Rc;

use serde::Serialize;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

use super::device::{self, Acquired, AdapterReport, Preference};
use super::{data_error_to_js, error_to_js, to_js, train_error_to_js};
use crate::data::DataSource;
use crate::data::ErrorKind;
use crate::memory::{Candidate, MemoryTracker, Plan};
use crate::model::generate::SampleSettings;
use crate::train::error::Refusal;
use crate::train::probe::ProbeReport;
use crate::train::{Precision, Progress, TrainConfig, TrainError, Trainer, advice, plan, saved_run};

fn preference(value: &str) -> Result<Preference, JsValue> {
    serde_wasm_bindgen::from_value(JsValue::from_str(value)).map_err(|_| {
        error_to_js(
            ErrorKind::BadSettings,
            format!("unknown backend {value:?}: auto, webgpu or cpu"),
        )
    })
}

fn config(value: JsValue) -> Result<TrainConfig, JsValue> {
    serde_wasm_bindgen::from_value(value)
        .map_err(|e| error_to_js(ErrorKind::BadSettings, format!("bad training settings: {e}")))
}

/// Which device a run gets and why, as the page shows it.
#[derive(Serialize)]
struct DeviceReport<'a> {
    backend: &'a str,
    adapter: &'a Option<AdapterReport>,
    fallback_reason: &'a Option<String>,
}

impl<'a> From<&'a Acquired> for DeviceReport<'a> {
    fn from(acquired: &'a Acquired) -> Self {
        DeviceReport {
            backend: acquired.backend,
            adapter: &acquired.adapter,
            fallback_reason: &acquired.fallback_reason,
        }
    }
}

/// The planner's answer before Start.
#[derive(Serialize)]
struct Preview<'a> {
    device: DeviceReport<'a>,
    plan: &'a Plan,
    chosen: Option<&'a Candidate>,
    /// Why nothing fits, as figures the page formats, when nothing does.
    refusal: Option<&'a Refusal>,
    precision: Precision,
    precision_note: &'a Option<String>,
    /// Why the planner picked its levers, where the cap left them to it.
    levers_reason: Option<String>,
    /// What each memory lever would hold for this run (census).
    levers: Vec<advice::LeverPeak>,
}

/// The device for `backend` ("auto", "webgpu" or "cpu") and its adapter, without training.
#[wasm_bindgen(js_name = describeDevice)]
pub fn describe_device(backend: String) -> js_sys::Promise {
    future_to_promise(async move {
        let acquired = device::acquire(preference(&backend)?)
            .await
            .map_err(|e| error_to_js(ErrorKind::NoDevice, e))?;
        to_js(&DeviceReport::from(&acquired))
    })
}

/// What a run needs before its first step: its settings, its device and its dataset.
async fn open(
    url: &str,
    config: JsValue,
    backend: &str,
) -> Result<(TrainConfig, Acquired, DataSource), JsValue> {
    let config = self::config(config)?;
    let acquired = device::acquire(preference(backend)?)
        .await
        .map_err(|e| error_to_js(ErrorKind::NoDevice, e))?;
    let source = DataSource::open(url, config.stream_options())
        .await
        .map_err(data_error_to_js)?;
    Ok((config, acquired, source))
}

/// What the planner predicts and picks for `config` on the dataset at `url`.
#[wasm_bindgen(js_name = planRun)]
pub fn plan_run(url: String, config: JsValue, backend: String) -> js_sys::Promise {
    future_to_promise(async move {
        let (config, acquired, source) = open(&url, config, &backend).await?;
        let run_plan =
            plan::for_run(&config, &source, &acquired.device, acquired.backend).map_err(train_error_to_js)?;
        let picked = run_plan.pick(&config);
        to_js(&Preview {
            device: DeviceReport::from(&acquired),
            plan: &run_plan.plan,
            chosen: picked.as_ref().ok().copied(),
            refusal: match &picked {
                Err(TrainError::CapTooSmall(refusal)) => Some(refusal.as_ref()),
                _ => None,
            },
            precision: run_plan.probed_levers().precision,
            precision_note: &run_plan.precision_note,
            levers_reason: advice::pick_reason(&run_plan),
            levers: advice::lever_peaks(&run_plan),
        })
    })
}

/// How long a failed step waits for WebGPU's device-lost notice: a destroyed device fails
/// the step's readback first, and the notice comes a moment later.
const LOST_NOTICE: std::time::Duration = std::time::Duration::from_millis(200);

/// The error a failed step reports: a lost device where that is the cause (what failed is
/// then only a symptom), else the step's own error.
async fn cause_of(error: crate::train::TrainError) -> JsValue {
    if device::device_lost().is_none() && error.kind() == ErrorKind::Readback {
        crate::platform::sleep(LOST_NOTICE).await;
    }
    match device::device_lost() {
        // The step's own error (a failed readback) says nothing more.
        Some(reason) => error_to_js(ErrorKind::DeviceLost, reason),
        None => train_error_to_js(error),
    }
}

/// Characters one Generate asks for, at most: each is a forward pass.
const MAX_GENERATED: usize = 2000;

/// What the page lists of a saved run.
#[derive(Serialize)]
struct SavedSummary<'a> {
    step: u64,
    total_steps: u64,
    history: &'a crate::train::run::History,
}

/// The run, taken out for one call (put back when it ends); `busy` says why a call that
/// comes meanwhile must wait.
fn take(running: &Rc<RefCell<Option<Running>>>, busy: &str) -> Result<Running, JsValue> {
    running
        .borrow_mut()
        .take()
        .ok_or_else(|| error_to_js(ErrorKind::Busy, busy))
}

struct Running {
    trainer: Trainer,
    source: DataSource,
    progress: Progress,
}

/// One run. `advance` and `exportModel` take turns: the worker awaits each.
#[wasm_bindgen]
pub struct Training {
    running: Rc<RefCell<Option<Running>>>,
    /// Samples memory between steps, for charts that update while a long step runs.
    probe: RefCell<MemoryTracker>,
    acquired: Acquired,
}

impl Training {
    fn new(trainer: Trainer, progress: Progress, source: DataSource, acquired: Acquired) -> Self {
        let probe = MemoryTracker::new(acquired.device.clone(), source.gauge().clone());
        Training {
            running: Rc::new(RefCell::new(Some(Running {
                trainer,
                source,
                progress,
            }))),
            probe: RefCell::new(probe),
            acquired,
        }
    }
}

#[wasm_bindgen]
impl Training {
    /// Resolves to a `Training` once the device is acquired, the manifest is read and the
    /// plan fits the cap; rejects with the reason otherwise (a cap too small names the cap
    /// that fits).
    ///
    /// `init`, where given, is a safetensors file of parameters to start from (see
    /// `headroom train --init`): one that does not fit the model rejects with
    /// `bad-checkpoint`, naming the first mismatch.
    ///
    /// `on_probe`, where given, is called with each probe step's `ProbeReport` as it
    /// starts and ends, before the promise resolves (the probes take minutes on a slow
    /// device).
    pub fn create(
        url: String,
        config: JsValue,
        backend: String,
        init: Option<Vec<u8>>,
        on_probe: Option<js_sys::Function>,
    ) -> js_sys::Promise {
        future_to_promise(async move {
            let (config, acquired, source) = open(&url, config, &backend).await?;
            // A report that cannot reach the page is dropped: it is progress, not the run.
            let mut report = |report: &ProbeReport| {
                if let (Some(on_probe), Ok(value)) = (&on_probe, to_js(report)) {
                    let _ = on_probe.call1(&JsValue::NULL, &value);
                }
            };
            let mut trainer = Trainer::reporting_probes(
                config,
                &source,
                acquired.device.clone(),
                acquired.backend,
                &mut report,
            )
            .await
            .map_err(train_error_to_js)?;
            if let Some(bytes) = init {
                trainer.load_weights(&bytes).map_err(train_error_to_js)?;
            }
            Ok(Training::new(trainer, Progress::default(), source, acquired).into())
        })
    }

    /// Resolves to a `Training` that goes on from `bytes`, a checkpoint `checkpoint` made
    /// (the same settings, step, optimizer state and place in the data), on the device
    /// `backend` gives; rejects with `bad-checkpoint` where the bytes are not such a run or
    /// the dataset at `url` is not the one it trained on.
    pub fn resume(url: String, bytes: Vec<u8>, backend: String) -> js_sys::Promise {
        future_to_promise(async move {
            let saved = saved_run::Checkpoint::from_bytes(&bytes).map_err(train_error_to_js)?;
            let acquired = device::acquire(preference(&backend)?)
                .await
                .map_err(|e| error_to_js(ErrorKind::NoDevice, e))?;
            let source = DataSource::open(&url, saved.state.config.stream_options())
                .await
                .map_err(data_error_to_js)?;
            let (trainer, progress) =
                saved_run::restore(&saved, |_| {}, &source, acquired.device.clone(), acquired.backend)
                    .await
                    .map_err(train_error_to_js)?;
            Ok(Training::new(trainer, progress, source, acquired).into())
        })
    }

    /// Resolves to `{ bytes, step, total_steps, history }`: the whole run as one blob (see
    /// `Checkpoint::to_bytes`), read back asynchronously between two steps, and what the
    /// page lists of it.
    pub fn checkpoint(&self) -> js_sys::Promise {
        let running = self.running.clone();
        future_to_promise(async move {
            let state = take(&running, "the run is busy: await each call")?;
            let saved = saved_run::capture(&state.trainer, &state.progress, &state.source).await;
            let total_steps = state
                .trainer
                .config()
                .total_steps(state.source.sample_count(crate::data::Split::Train));
            *running.borrow_mut() = Some(state);
            let saved = saved.map_err(train_error_to_js)?;
            let summary = SavedSummary {
                step: saved.state.step,
                total_steps,
                history: &saved.state.history,
            };
            let reply = js_sys::Object::new();
            let bytes = js_sys::Uint8Array::from(saved.to_bytes().as_slice());
            js_sys::Reflect::set(&reply, &"bytes".into(), &bytes)?;
            js_sys::Reflect::set(&reply, &"summary".into(), &to_js(&summary)?)?;
            Ok(reply.into())
        })
    }

    /// The device this run trains on and why.
    pub fn device(&self) -> Result<JsValue, JsValue> {
        to_js(&DeviceReport::from(&self.acquired))
    }

    /// Resolves to the events of the next piece of the run (see `Progress::advance`): an
    /// empty array once it finished.
    pub fn advance(&self) -> js_sys::Promise {
        let running = self.running.clone();
        future_to_promise(async move {
            if let Some(reason) = device::device_lost() {
                return Err(error_to_js(
                    ErrorKind::DeviceLost,
                    format!("{reason}. Reload the page to start again."),
                ));
            }
            let mut state = take(&running, "the run is busy: await each call")?;
            let result = state.progress.advance(&mut state.trainer, &state.source).await;
            *running.borrow_mut() = Some(state);
            let events = match result {
                Ok(events) => events,
                Err(error) => return Err(cause_of(error).await),
            };
            to_js(&events)
        })
    }

    /// Memory now (device pool, data pipeline, wasm linear memory), callable at any time.
    pub fn memory(&self) -> Result<JsValue, JsValue> {
        let sample = self.probe.borrow_mut().sample();
        to_js(&sample)
    }

    /// Resolves to the model's parameters as a safetensors file in PyTorch's names and
    /// layouts (what `headroom export` writes), read back asynchronously.
    #[wasm_bindgen(js_name = exportSafetensors)]
    pub fn export_safetensors(&self) -> js_sys::Promise {
        let running = self.running.clone();
        future_to_promise(async move {
            let state = take(&running, "the run is busy: pause it first")?;
            let bytes = saved_run::safetensors_bytes(&state.trainer, &state.source).await;
            *running.borrow_mut() = Some(state);
            let bytes = bytes.map_err(train_error_to_js)?;
            Ok(js_sys::Uint8Array::from(bytes.as_slice()).into())
        })
    }

    /// Resolves to `{ step, prompt, text }`: `tokens` characters the GPT writes after
    /// `prompt` at `temperature` (0: the likeliest each time), drawn by `seed`. Between two
    /// steps only: the worker calls it when the run rests.
    pub fn generate(&self, prompt: String, tokens: u32, temperature: f32, seed: u32) -> js_sys::Promise {
        let running = self.running.clone();
        future_to_promise(async move {
            if !(0.0..=10.0).contains(&temperature) {
                return Err(error_to_js(
                    ErrorKind::BadSettings,
                    "the temperature must be from 0 to 10",
                ));
            }
            let settings = SampleSettings {
                tokens: (tokens as usize).min(MAX_GENERATED),
                temperature,
                seed: u64::from(seed),
            };
            let state = take(&running, "the run is busy: await each call")?;
            let sample = state
                .trainer
                .generate_text(&state.source, &prompt, &settings)
                .await;
            *running.borrow_mut() = Some(state);
            to_js(&sample.map_err(train_error_to_js)?)
        })
    }

    /// Resolves to the model's parameters as a burnpack file (the `model-STEP.bpk` of a run
    /// `headroom train --save` writes), read back asynchronously.
    #[wasm_bindgen(js_name = exportModel)]
    pub fn export_model(&self) -> js_sys::Promise {
        let running = self.running.clone();
        future_to_promise(async move {
            let state = take(&running, "the run is busy: pause it first")?;
            let bytes = saved_run::model_bytes(state.trainer.model()).await;
            *running.borrow_mut() = Some(state);
            let bytes = bytes.map_err(train_error_to_js)?;
            Ok(js_sys::Uint8Array::from(bytes.as_slice()).into())
        })
    }
}
