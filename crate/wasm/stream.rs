//! The data pipeline on its own: open a dataset, read an epoch, see what it held.

use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

use super::{data_error_to_js, error_to_js, to_js};
use crate::data::ErrorKind;
use crate::data::scan::scan_epoch;
use crate::data::{DataSource, Split, StreamOptions};

/// A dataset opened over HTTP. Works in a window and in a dedicated worker.
#[wasm_bindgen]
pub struct DataStream {
    source: DataSource,
}

#[wasm_bindgen]
impl DataStream {
    /// Resolves to a `DataStream` once the manifest at `url` is fetched and validated.
    /// `options` is a `StreamOptions` object (prefetch, seed, shuffle, retry) or undefined.
    pub fn open(url: String, options: JsValue) -> js_sys::Promise {
        future_to_promise(async move {
            let options: StreamOptions = if options.is_undefined() || options.is_null() {
                StreamOptions::default()
            } else {
                serde_wasm_bindgen::from_value(options).map_err(|e| error_to_js(ErrorKind::BadSettings, e))?
            };
            let source = DataSource::open(&url, options).await.map_err(data_error_to_js)?;
            Ok(DataStream { source }.into())
        })
    }

    pub fn manifest(&self) -> Result<JsValue, JsValue> {
        to_js(self.source.manifest())
    }

    /// Bytes the data pipeline holds now, its peak, and the bound it promises.
    pub fn memory(&self) -> Result<JsValue, JsValue> {
        to_js(&self.source.memory())
    }

    /// Reads one epoch of `split` in batches, verifying every chunk; resolves to its figures.
    #[wasm_bindgen(js_name = scanEpoch)]
    pub fn scan_epoch(&self, split: String, epoch: u32, batch: u32) -> js_sys::Promise {
        let source = self.source.clone();
        future_to_promise(async move {
            let split: Split = split
                .parse()
                .map_err(|e| error_to_js(ErrorKind::BadSettings, e))?;
            let figures = scan_epoch(&source, split, u64::from(epoch), batch as usize)
                .await
                .map_err(data_error_to_js)?;
            to_js(&figures)
        })
    }
}
