//! The wasm-bindgen surface: small classes the page's worker drives with promises.

pub mod device;
mod stream;
mod text;
mod training;

use wasm_bindgen::prelude::*;

use crate::data::{DataError, ErrorKind};
use crate::train::TrainError;

unsafe extern "C" {
    /// The module's static constructors, which the wasm linker synthesizes: cubecl's IR
    /// crate (pliron) registers thousands of items through `inventory`.
    fn __wasm_call_ctors();
}

/// Runs the static constructors, once per instance. Where no code calls them, the linker
/// treats the module as a command and calls them at the top of every exported function:
/// every call from JS, each promise callback included. A profile of the WebGPU worker had
/// 70% of its time in them (docs/benchmarks.md, "the wasm module's static constructors, run
/// once"). Since this call exists, the linker adds none, so whatever reaches cubecl must come
/// through here first: `start` (the page's instantiation) and `device::acquire` (every run;
/// the wasm tests start there).
pub fn run_static_constructors() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: the constructors only register statics, and `inventory`'s are idempotent.
    ONCE.call_once(|| unsafe { __wasm_call_ctors() });
}

#[wasm_bindgen(start)]
pub fn start() {
    run_static_constructors();
    console_error_panic_hook::set_once();
}

pub(crate) fn to_js<T: serde::Serialize>(value: &T) -> Result<JsValue, JsValue> {
    value
        .serialize(&serde_wasm_bindgen::Serializer::json_compatible())
        .map_err(JsValue::from)
}

/// A JS `Error` carrying its [`ErrorKind`] as `kind`, so that the page acts on the kind and
/// shows the message, never matching the text.
pub(crate) fn error_to_js(kind: ErrorKind, error: impl std::fmt::Display) -> JsValue {
    let value: JsValue = js_sys::Error::new(&error.to_string()).into();
    // A unit variant serializes to its name, and setting a property on a fresh Error
    // cannot fail.
    if let Ok(kind) = to_js(&kind) {
        let _ = js_sys::Reflect::set(&value, &"kind".into(), &kind);
    }
    value
}

pub(crate) fn data_error_to_js(error: DataError) -> JsValue {
    error_to_js(error.kind(), error)
}

/// A refused cap also carries its figures as data (`refusal`, a [`Refusal`]), which the
/// page formats.
///
/// [`Refusal`]: crate::train::error::Refusal
pub(crate) fn train_error_to_js(error: TrainError) -> JsValue {
    let value = error_to_js(error.kind(), &error);
    if let TrainError::CapTooSmall(refusal) = &error
        && let Ok(refusal) = to_js(refusal.as_ref())
    {
        let _ = js_sys::Reflect::set(&value, &"refusal".into(), &refusal);
    }
    value
}
