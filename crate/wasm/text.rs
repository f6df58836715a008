//! Text the user drops into the page, prepared in the browser into the chunk format
//! `headroom prepare --text` writes, under the same rules (crate/data/text.rs's `corpus`).

use wasm_bindgen::prelude::*;

use super::{data_error_to_js, error_to_js};
use crate::data::ErrorKind;
use crate::data::text::{DEFAULT_CHUNK_TOKENS, corpus, text_description, write_corpus};
use crate::data::writer::{DatasetWriter, WriterOptions};

/// `names[i]`'s text is `contents[i]` (a Uint8Array). Returns `{ manifest, chunks }`: the
/// manifest as JSON and each chunk as `{ file, bytes }`, which the page keeps in the
/// browser's storage beside it. Throws a `bad-dataset` error, in words, where a file is not
/// UTF-8 or the text is too short or has too many distinct characters.
#[wasm_bindgen(js_name = prepareText)]
pub fn prepare_text(name: String, names: Vec<String>, contents: js_sys::Array) -> Result<JsValue, JsValue> {
    if names.len() != contents.length() as usize {
        return Err(error_to_js(ErrorKind::BadSettings, "one name a file"));
    }
    let files: Vec<(String, Vec<u8>)> = names
        .into_iter()
        .zip(contents.iter())
        .map(|(name, bytes)| (name, js_sys::Uint8Array::new(&bytes).to_vec()))
        .collect();
    let corpus = corpus(&files).map_err(data_error_to_js)?;
    let options = WriterOptions {
        chunk_samples: DEFAULT_CHUNK_TOKENS,
        ..WriterOptions::default()
    };
    let mut writer =
        DatasetWriter::in_memory(text_description(&name, &corpus), options).map_err(data_error_to_js)?;
    write_corpus(&mut writer, &corpus).map_err(data_error_to_js)?;
    let (manifest, chunks) = writer.finish_in_memory().map_err(data_error_to_js)?;
    let reply = js_sys::Object::new();
    let json = serde_json::to_string_pretty(&manifest).expect("a manifest serializes");
    js_sys::Reflect::set(&reply, &"manifest".into(), &json.into())?;
    let list = js_sys::Array::new();
    for (file, bytes) in chunks {
        let chunk = js_sys::Object::new();
        js_sys::Reflect::set(&chunk, &"file".into(), &file.into())?;
        js_sys::Reflect::set(
            &chunk,
            &"bytes".into(),
            &js_sys::Uint8Array::from(bytes.as_slice()),
        )?;
        list.push(&chunk);
    }
    js_sys::Reflect::set(&reply, &"chunks".into(), &list)?;
    Ok(reply.into())
}
