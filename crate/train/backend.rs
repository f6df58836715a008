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
    /// burn's ndarray CPU backend.
    #[cfg(not(target_arch = "wasm32"))]
    Ndarray,
}

impl BackendKind {
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Wgpu => "wgpu",
            #[cfg(not(target_arch = "wasm32"))]
            BackendKind::Ndarray => "ndarray",
        }
    }

    /// The device, without autodiff (the trainer adds it for training).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn device(self) -> Device {
        match self {
            BackendKind::Wgpu => Device::wgpu(burn::tensor::DeviceKind::DefaultDevice),
            // burn marks ndarray deprecated in favour of flex; the CLI offers it as the
            // CPU backend the project was specified with.
            #[allow(deprecated)]
            BackendKind::Ndarray => Device::ndarray(),
        }
    }
}
