//! The wasm-bindgen surface: small classes the page's worker drives with promises.

pub mod device;
mod export;
mod stream;
mod training;

use wasm_bindgen::prelude::*;

#[wasm_bindgen(start)]
pub fn start() {
    console_error_panic_hook::set_once();
}

pub(crate) fn to_js<T: serde::Serialize>(value: &T) -> Result<JsValue, JsValue> {
    value
        .serialize(&serde_wasm_bindgen::Serializer::json_compatible())
        .map_err(JsValue::from)
}

pub(crate) fn error_to_js(error: impl std::fmt::Display) -> JsValue {
    JsError::new(&error.to_string()).into()
}
