//! The browser's devices. WebGPU is acquired once per worker and kept: wgpu cannot be
//! initialized twice in one module instance. Where no adapter is offered, burn's CPU
//! backend (flex, wasm SIMD) runs the same trainer.

use std::sync::OnceLock;

use burn::prelude::Device;

use crate::ops::matmul::{MatmulRoutine, routine_for_adapter, set_gpu_routine};
use burn::tensor::wgpu::wgpu;
use futures::lock::Mutex;
use serde::{Deserialize, Serialize};
use wasm_bindgen::JsValue;

/// What the page asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Preference {
    /// WebGPU where the browser offers a hardware adapter, the CPU otherwise.
    Auto,
    WebGpu,
    Cpu,
}

/// The adapter as the page shows it, with the limits a training run runs into.
#[derive(Clone, Debug, Serialize)]
pub struct AdapterReport {
    pub name: String,
    pub vendor: String,
    pub driver: String,
    pub backend: String,
    pub device_type: String,
    /// Without it f16 storage falls back to f32.
    pub shader_f16: bool,
    pub max_buffer_size: u64,
    pub max_storage_buffer_binding_size: u64,
    pub max_storage_buffers_per_shader_stage: u32,
    pub max_compute_invocations_per_workgroup: u32,
    pub max_compute_workgroup_storage_size: u32,
}

/// The device a run gets, and why it is that one.
#[derive(Clone, Debug)]
pub struct Acquired {
    pub device: Device,
    /// The backend's name as the trainer and planner know it.
    pub backend: &'static str,
    pub adapter: Option<AdapterReport>,
    /// Why WebGPU is not used, when it was asked for or would have been preferred.
    pub fallback_reason: Option<String>,
}

struct WebGpu {
    device: Device,
    adapter: AdapterReport,
    /// The routine its matmuls take (`model::matmul::routine_for_adapter`).
    matmul: MatmulRoutine,
}

static WEBGPU: OnceLock<Mutex<Option<Result<WebGpu, String>>>> = OnceLock::new();
static DEVICE_LOST: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Why the WebGPU device was lost, once it was: every later step must fail, in words.
pub fn device_lost() -> Option<String> {
    DEVICE_LOST.lock().ok()?.clone()
}

fn navigator_has_gpu() -> bool {
    let global = js_sys::global();
    js_sys::Reflect::get(&global, &JsValue::from_str("navigator"))
        .and_then(|navigator| js_sys::Reflect::get(&navigator, &JsValue::from_str("gpu")))
        .is_ok_and(|gpu| !gpu.is_undefined() && !gpu.is_null())
}

fn report(adapter: &wgpu::Adapter) -> AdapterReport {
    let info = adapter.get_info();
    let limits = adapter.limits();
    AdapterReport {
        name: info.name,
        vendor: format!("{:#06x}", info.vendor),
        driver: [info.driver, info.driver_info]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(" "),
        backend: format!("{:?}", info.backend),
        device_type: format!("{:?}", info.device_type),
        shader_f16: adapter.features().contains(wgpu::Features::SHADER_F16),
        max_buffer_size: limits.max_buffer_size,
        max_storage_buffer_binding_size: limits.max_storage_buffer_binding_size,
        max_storage_buffers_per_shader_stage: limits.max_storage_buffers_per_shader_stage,
        max_compute_invocations_per_workgroup: limits.max_compute_invocations_per_workgroup,
        max_compute_workgroup_storage_size: limits.max_compute_workgroup_storage_size,
    }
}

async fn acquire_webgpu() -> Result<WebGpu, String> {
    if !navigator_has_gpu() {
        return Err(
            "this browser offers no WebGPU (navigator.gpu is missing). Chrome and Edge \
                    113+ have it; Firefox and Safari behind a setting; headless Chromium needs \
                    --enable-unsafe-webgpu"
                .into(),
        );
    }
    // cubecl requests every feature and the adapter's full limits, so a plan that fits
    // the adapter's limits fits the device.
    let (device, setup) = Device::wgpu_options()
        .init_with_setup_async()
        .await
        .map_err(|e| format!("no usable WebGPU adapter: {e}"))?;
    setup.device.set_device_lost_callback(|reason, message| {
        let text = format!("The WebGPU device was lost ({reason:?}: {message})");
        if let Ok(mut lost) = DEVICE_LOST.lock() {
            *lost = Some(text);
        }
    });
    Ok(WebGpu {
        device,
        adapter: report(&setup.adapter),
        matmul: routine_for_adapter(&setup.adapter.get_info()),
    })
}

/// The WebGPU device and its adapter, acquired on the first call.
pub async fn webgpu() -> Result<(Device, AdapterReport), String> {
    webgpu_with_routine()
        .await
        .map(|(device, adapter, _)| (device, adapter))
}

/// `webgpu`, with the matmul routine chosen for the adapter.
async fn webgpu_with_routine() -> Result<(Device, AdapterReport, MatmulRoutine), String> {
    let mut cached = WEBGPU.get_or_init(Default::default).lock().await;
    if cached.is_none() {
        *cached = Some(acquire_webgpu().await);
    }
    match cached.as_ref().expect("filled above") {
        Ok(gpu) => Ok((gpu.device.clone(), gpu.adapter.clone(), gpu.matmul)),
        Err(reason) => Err(reason.clone()),
    }
}

fn adapter_label(adapter: &AdapterReport) -> String {
    match adapter.name.as_str() {
        "" => format!("device type {}", adapter.device_type),
        name => name.to_string(),
    }
}

/// burn's flex backend, with wasm SIMD: gemm's simd128 matmuls and a conv2d whose backward
/// is im2col and gemm.
pub(super) fn cpu() -> Device {
    Device::flex()
}

pub async fn acquire(preference: Preference) -> Result<Acquired, String> {
    super::run_static_constructors();
    // Until a run is on WebGPU; the CPU ignores it anyway.
    set_gpu_routine(MatmulRoutine::Burn);
    if preference == Preference::Cpu {
        return Ok(Acquired {
            device: cpu(),
            backend: "flex",
            adapter: None,
            fallback_reason: None,
        });
    }
    match webgpu_with_routine().await {
        // A software adapter (SwiftShader) is a GPU emulated on the CPU: burn's CPU backend
        // beats it by far (the MLP ran ~90x faster in headless Chromium).
        Ok((_, adapter, _)) if preference == Preference::Auto && adapter.device_type == "Cpu" => {
            Ok(Acquired {
                device: cpu(),
                backend: "flex",
                fallback_reason: Some(format!(
                    "the WebGPU adapter is a software renderer ({}), slower than the CPU \
                     backend; choose WebGPU to train on it anyway",
                    adapter_label(&adapter)
                )),
                adapter: Some(adapter),
            })
        }
        Ok((device, adapter, matmul)) => {
            set_gpu_routine(matmul);
            crate::ops::backend::set_adapter_is_software(adapter.device_type == "Cpu");
            Ok(Acquired {
                device,
                backend: "webgpu",
                adapter: Some(adapter),
                fallback_reason: None,
            })
        }
        Err(reason) if preference == Preference::Auto => Ok(Acquired {
            device: cpu(),
            backend: "flex",
            adapter: None,
            fallback_reason: Some(reason),
        }),
        Err(reason) => Err(reason),
    }
}
