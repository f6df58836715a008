//! What the wasm tests need to know about their run, read at run time: `tests/run-all`
//! writes it to `tests/artifacts/wasm-test-config.json`, which wasm-bindgen-test-runner
//! serves from the crate's folder beside the test itself. A second run with another server
//! or other data rebuilds nothing (a value read at compile time would).

use headroom::platform;
use serde::Deserialize;

const LOCATION: &str = "/tests/artifacts/wasm-test-config.json";
const LIMIT_BYTES: usize = 64 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
// Each test binary reads what it needs: wasm_train only the URL.
#[allow(dead_code)]
pub struct TestConfig {
    /// A running `headroom serve` over the generated datasets.
    pub data_url: String,
    /// `headroom stream --seed 7 --batch 64` of `synthetic`, computed natively.
    pub order_digest: String,
    /// The same for `text` with `--window 33`.
    pub text_digest: String,
    /// The chunk of `synthetic-corrupt` whose bytes were changed.
    pub corrupt_chunk: String,
}

pub async fn load() -> TestConfig {
    let bytes = platform::fetch_bytes(LOCATION, LIMIT_BYTES).await.unwrap_or_else(|cause| {
        panic!("{LOCATION} could not be read ({cause:?}): tests/run-all writes it and starts the server it names")
    });
    serde_json::from_slice(&bytes).unwrap_or_else(|error| panic!("{LOCATION}: {error}"))
}
