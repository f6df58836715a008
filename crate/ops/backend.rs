//! Which burn backend a run uses. Only device creation differs per target.

#[cfg(not(target_arch = "wasm32"))]
use burn::prelude::Device;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// wgpu: Vulkan, Metal, DX12 natively (lavapipe on a machine without a GPU).
    Wgpu,
    /// burn's ndarray CPU backend (deprecated by burn in favour of flex), in builds with the
    /// `ndarray` feature.
    #[cfg(not(target_arch = "wasm32"))]
    Ndarray,
    /// burn's flex CPU backend: gemm matmuls and a conv2d whose backward is not a scalar
    /// loop.
    #[cfg(not(target_arch = "wasm32"))]
    Flex,
    /// NVIDIA GPUs through burn's CUDA backend, in builds with the `cuda` feature.
    #[cfg(not(target_arch = "wasm32"))]
    Cuda,
}

/// How to get a CUDA build: said wherever `--backend cuda` meets a build without it.
#[cfg(all(not(target_arch = "wasm32"), not(feature = "cuda")))]
const CUDA_MISSING: &str = "this headroom was built without CUDA: build it with \
    `cargo build --release --features cuda` on a machine with internet (burn's CUDA backend \
    downloads an LLVM bundle while building) and run it where an NVIDIA driver is installed";

/// How to get ndarray: said wherever `--backend ndarray` meets a build without it.
#[cfg(all(not(target_arch = "wasm32"), not(feature = "ndarray")))]
const NDARRAY_MISSING: &str = "this headroom was built without ndarray, which burn deprecates \
    in favour of flex (`--backend flex`, the CPU backend): for ndarray build it with \
    `cargo build --release --features ndarray`";

impl BackendKind {
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Wgpu => "wgpu",
            #[cfg(not(target_arch = "wasm32"))]
            BackendKind::Ndarray => "ndarray",
            #[cfg(not(target_arch = "wasm32"))]
            BackendKind::Flex => "flex",
            #[cfg(not(target_arch = "wasm32"))]
            BackendKind::Cuda => "cuda",
        }
    }

    /// Why this build cannot create the backend's device; `None` when it can.
    pub fn unavailable(self) -> Option<&'static str> {
        match self {
            #[cfg(all(not(target_arch = "wasm32"), not(feature = "cuda")))]
            BackendKind::Cuda => Some(CUDA_MISSING),
            #[cfg(all(not(target_arch = "wasm32"), not(feature = "ndarray")))]
            BackendKind::Ndarray => Some(NDARRAY_MISSING),
            _ => None,
        }
    }

    /// The device, without autodiff (the trainer adds it for training).
    ///
    /// # Panics
    /// When the build lacks the backend: check [`BackendKind::unavailable`] first.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn device(self) -> Device {
        if let Some(why) = self.unavailable() {
            panic!("{why}");
        }
        match self {
            BackendKind::Wgpu => wgpu_device(),
            // burn marks ndarray deprecated in favour of flex; the CLI still offers it, in
            // builds with the feature, for comparison.
            #[cfg(feature = "ndarray")]
            #[allow(deprecated)]
            BackendKind::Ndarray => Device::ndarray(),
            #[cfg(not(feature = "ndarray"))]
            BackendKind::Ndarray => unreachable!("unavailable() is checked above"),
            BackendKind::Flex => Device::flex(),
            #[cfg(feature = "cuda")]
            BackendKind::Cuda => Device::cuda(0),
            #[cfg(not(feature = "cuda"))]
            BackendKind::Cuda => unreachable!("unavailable() is checked above"),
        }
    }
}

/// The runtime serving `device`, as burn names it: `wgpu<spirv>` where the build has the
/// `vulkan` feature and the Vulkan adapter takes cubecl's SPIR-V compiler, `wgpu<wgsl>`
/// where it falls back to WGSL, so that a measurement says which compiler it measured.
#[cfg(not(target_arch = "wasm32"))]
pub fn runtime_name(device: &Device) -> String {
    use burn::backend::{Backend, Dispatch};
    <Dispatch as Backend>::name(device.as_dispatch())
}

/// Whether the wgpu adapter in use is a software renderer (lavapipe, SwiftShader): the
/// planner weighs the levers' time by a CPU's costs there (`train::plan::lever_costs`).
static SOFTWARE_ADAPTER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Records the kind of the wgpu adapter the runs use, where it is acquired.
pub fn set_adapter_is_software(software: bool) {
    SOFTWARE_ADAPTER.store(software, std::sync::atomic::Ordering::Relaxed);
}

pub fn adapter_is_software() -> bool {
    SOFTWARE_ADAPTER.load(std::sync::atomic::Ordering::Relaxed)
}

/// The wgpu device, initialized once with its adapter in hand so that its matmuls take the
/// routine chosen for that adapter (`model::matmul::routine_for_adapter`).
#[cfg(not(target_arch = "wasm32"))]
fn wgpu_device() -> Device {
    use crate::ops::matmul::{routine_for_adapter, set_gpu_routine};
    static DEVICE: std::sync::OnceLock<Device> = std::sync::OnceLock::new();
    DEVICE
        .get_or_init(|| match wgpu_options().init_with_setup() {
            Ok((device, setup)) => {
                let info = setup.adapter.get_info();
                set_adapter_is_software(info.device_type == burn::tensor::wgpu::wgpu::DeviceType::Cpu);
                let chosen = routine_for_adapter(&info);
                set_gpu_routine(routine_from_env().unwrap_or(chosen));
                device
            }
            // Initialized already (a test's own device), or no adapter: burn's device, which
            // reports a missing adapter where it is first used, as before.
            Err(_) => Device::wgpu(burn::tensor::DeviceKind::DefaultDevice),
        })
        .clone()
}

/// The device's options: burn's, with the page's pool where `HEADROOM_EXCLUSIVE_PAGES=1`.
#[cfg(not(target_arch = "wasm32"))]
fn wgpu_options() -> burn::tensor::wgpu::WgpuOptions {
    let options = Device::wgpu_options();
    match exclusive_pages() {
        true => options.memory_config(burn::tensor::wgpu::MemoryConfiguration::ExclusivePages),
        false => options,
    }
}

/// `HEADROOM_EXCLUSIVE_PAGES=1` gives the native wgpu device the pool WebGPU gets in the page
/// (cubecl's exclusive pages, one page per allocation) and the planner its model of it: to
/// measure the page's reservation on lavapipe, phase by phase, in minutes rather than hours
/// of SwiftShader.
pub fn exclusive_pages() -> bool {
    // Read once: the device's pool is chosen once, and the planner must model that one.
    static EXCLUSIVE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *EXCLUSIVE.get_or_init(|| {
        cfg!(target_arch = "wasm32") || std::env::var("HEADROOM_EXCLUSIVE_PAGES").is_ok_and(|v| v == "1")
    })
}

/// Gives `device`'s free pages back (cubecl's `memory_cleanup`), where the pool gives each
/// allocation a page of its own ([`exclusive_pages`]) only once the device has run all the
/// work queued before. In the page nothing else waits for it: cubecl on WebGPU queues work
/// without bound (natively it waits every 512 tasks), and a page given back while queued
/// work still reads it stays in the GPU process until that work has run, beside the new
/// pages made in its place. Given back once a recomputed segment, SwiftShader's process
/// grew to 12 GiB and crashed while the 12x768 GPT's probes counted under 1 GiB
/// (docs/benchmarks.md, "the page's queue and its pages").
pub async fn free_pages(device: &burn::prelude::Device) {
    if exclusive_pages() {
        drained(device).await;
    }
    device.memory_cleanup();
}

/// Waits until `device` has run everything queued before: a readback waits for the work
/// ahead of it on the one, in-order, queue. A failed wait shows in the next readback.
async fn drained(device: &burn::prelude::Device) {
    let marker = burn::tensor::Tensor::<1>::zeros([1], device);
    let _ = marker.into_data_async().await;
}

/// `f(input)`, allocating in `device`'s persistent pool (exact-size slices, reused by the
/// next allocation of that size) where the pool otherwise gives each allocation a page of
/// its own ([`exclusive_pages`]): there a tensor that outlives the step's activations (a
/// parameter, a moment, a gradient sum) made while their pages are free takes one many
/// times its size and holds it (docs/benchmarks.md, "the page's pool under
/// checkpointing"). Elsewhere the sliced pools pack such tensors already, and moving them
/// reserved more (same entry).
pub fn lasting<I: Send, O: Send>(device: &burn::prelude::Device, input: I, f: impl Fn(I) -> O + Send) -> O {
    match exclusive_pages() {
        true => device.memory_persistent_allocations(input, f),
        false => f(input),
    }
}

/// `HEADROOM_GPU_MATMUL=<routine>` (as `headroom bench matmul --routines` names them)
/// overrides the routine chosen for the adapter: to measure one against another.
#[cfg(not(target_arch = "wasm32"))]
fn routine_from_env() -> Option<crate::ops::matmul::MatmulRoutine> {
    use clap::ValueEnum;
    let name = std::env::var("HEADROOM_GPU_MATMUL").ok()?;
    match crate::ops::matmul::MatmulRoutine::from_str(&name, true) {
        Ok(routine) => Some(routine),
        Err(_) => {
            eprintln!("warning: HEADROOM_GPU_MATMUL={name} names no routine; the adapter's is used");
            None
        }
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;

    /// The compiler a wgpu run names is the one the build chose: WGSL through naga unless the
    /// build has the `vulkan` feature and the adapter is a Vulkan one that can take SPIR-V.
    #[test]
    fn runtime_names_the_compiler() {
        let name = runtime_name(&BackendKind::Wgpu.device());
        assert!(name.starts_with("dispatch<cubecl<wgpu<"), "{name}");
        if !cfg!(feature = "vulkan") {
            assert!(
                name.contains("wgpu<wgsl>"),
                "a build without `vulkan` compiled SPIR-V: {name}"
            );
        }
        assert_eq!(runtime_name(&BackendKind::Flex.device()), "dispatch<flex>");
    }
}
