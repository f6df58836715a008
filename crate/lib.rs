//! Headroom: train small networks under a hard memory cap, in a browser tab or natively.
//!
//! The library is target-agnostic; `platform` holds the few places where wasm32 and
//! native differ (spawning, sleeping, fetching bytes).

// In the browser autotune can keep a kernel whose WGSL failed to compile: the launch looks
// successful and the error is logged later (docs/backends.md, "Autotune").
#[cfg(all(target_arch = "wasm32", feature = "autotune"))]
compile_error!("the `autotune` feature is native only: build the wasm module without it");
// The browser's CPU fallback is flex; the ndarray backend is offered natively only.
#[cfg(all(target_arch = "wasm32", feature = "ndarray"))]
compile_error!("the `ndarray` feature is native only: build the wasm module without it");

/// A burn backend extension (`backend_extension`) on the backends Headroom builds: the
/// one list for the routed matmul, the ReLU that keeps its output and the VJP seed.
#[cfg(feature = "train")]
macro_rules! headroom_backend_extension {
    ($($extension:tt)*) => {
        #[burn::backend::backend_extension(
            Cube,
            Flex,
            NdArray: cfg(all(not(target_arch = "wasm32"), feature = "ndarray")),
            Fusion: cfg(feature = "fusion"),
            Autodiff
        )]
        $($extension)*
    };
}

// The crate's unit tests run in a browser too (wasm-pack test --headless --chrome).
#[cfg(all(test, target_arch = "wasm32"))]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

// The layers, lowest first: error, units, settings < platform < data < ops < model < memory
// < train < flags, server, wasm < bench < cli. A module imports only from its own layer or
// below, and no imports go round in a cycle (docs/design.md, "Layering"; tests/check-layers
// fails the test command otherwise).
#[cfg(all(not(target_arch = "wasm32"), feature = "train"))]
pub mod bench;
#[cfg(not(target_arch = "wasm32"))]
pub mod cli;
pub mod data;
pub mod error;
#[cfg(all(not(target_arch = "wasm32"), feature = "train"))]
pub mod flags;
#[cfg(feature = "train")]
pub mod memory;
#[cfg(feature = "train")]
pub mod model;
#[cfg(feature = "train")]
pub mod ops;
pub mod platform;
#[cfg(not(target_arch = "wasm32"))]
pub mod server;
#[cfg(feature = "train")]
pub mod settings;
#[cfg(feature = "train")]
pub mod train;
pub mod units;
#[cfg(all(target_arch = "wasm32", feature = "train"))]
pub mod wasm;
