//! Streaming chunks over real HTTP inside headless Chromium, in a worker.
#![cfg(target_arch = "wasm32")]

mod wasm_common;
mod wasm_config;

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_dedicated_worker);

all_streaming_tests!();
