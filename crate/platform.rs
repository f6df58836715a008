//! The only places where wasm32 and native differ: spawning a task, waiting, fetching
//! bytes, splitting CPU work over threads. Everything above this module is written once.

use std::future::Future;
use std::time::Duration;

use crate::error::FetchCause;

/// `Send` natively (tasks may move between threads), nothing in wasm32 (one thread,
/// JS futures are not `Send`).
#[cfg(not(target_arch = "wasm32"))]
pub trait MaybeSend: Send {}
#[cfg(not(target_arch = "wasm32"))]
impl<T: Send> MaybeSend for T {}
#[cfg(target_arch = "wasm32")]
pub trait MaybeSend {}
#[cfg(target_arch = "wasm32")]
impl<T> MaybeSend for T {}

/// Runs a background task. Natively it needs a tokio runtime (the CLI and tests run in one).
pub fn spawn<F>(task: F)
where
    F: Future<Output = ()> + MaybeSend + 'static,
{
    #[cfg(not(target_arch = "wasm32"))]
    tokio::spawn(task);
    #[cfg(target_arch = "wasm32")]
    wasm_bindgen_futures::spawn_local(task);
}

pub async fn sleep(duration: Duration) {
    #[cfg(not(target_arch = "wasm32"))]
    tokio::time::sleep(duration).await;
    #[cfg(target_arch = "wasm32")]
    gloo_timers::future::sleep(duration).await;
}

/// `None` when `limit` passes first.
pub async fn with_timeout<F: Future>(limit: Duration, work: F) -> Option<F::Output> {
    #[cfg(not(target_arch = "wasm32"))]
    {
        tokio::time::timeout(limit, work).await.ok()
    }
    #[cfg(target_arch = "wasm32")]
    {
        use futures::future::{Either, select};
        let work = std::pin::pin!(work);
        let deadline = std::pin::pin!(sleep(limit));
        match select(work, deadline).await {
            Either::Left((output, _)) => Some(output),
            Either::Right(_) => None,
        }
    }
}

/// Makes glibc keep the heap's freed memory for the next step instead of returning it to
/// the kernel. A CPU training step frees and allocates the same activations every step;
/// with glibc's defaults the large ones are mapped and unmapped, or trimmed off the top of
/// the heap, each time, and faulting their pages in again (zeroed) was a good share of a
/// flex CNN step: keeping them nearly doubled its speed for a little more resident memory
/// (docs/benchmarks.md, "glibc's heap, kept for the next step"). Only the
/// commands that train call it: `headroom serve` keeps glibc's defaults, whose memory a
/// test bounds. A no-op off glibc and in wasm32 (dlmalloc never returns memory anyway).
pub fn keep_freed_heap_for_reuse() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // Above every tensor a step of these models allocates; glibc caps the threshold
        // at half its heap size (32 MiB on 64-bit), so ask for that.
        const MMAP_THRESHOLD: libc::c_int = 32 << 20;
        const TRIM_THRESHOLD: libc::c_int = 1 << 30;
        // SAFETY: mallopt only sets allocator parameters; it is called before any thread
        // of ours allocates concurrently, and a refused value leaves the default in place.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
            libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
        }
    }
}

/// Runs `work` on each `chunk_len`-long chunk of `items`, with the chunk's index: natively
/// split over rayon's threads, the pool flex runs its own ops on: run on the calling thread
/// alone, beside flex's workers still spinning from the op before, the CNN's pool made its
/// step slower, where with one thread for both it was faster
/// (docs/benchmarks.md, "the CNN's conv and pool on flex, op by op"); in wasm32, which has
/// one thread here, in order on it.
#[cfg(feature = "train")]
pub fn for_each_chunk_mut<T: Send>(
    items: &mut [T],
    chunk_len: usize,
    work: impl Fn(usize, &mut [T]) + Send + Sync,
) {
    #[cfg(not(target_arch = "wasm32"))]
    {
        use rayon::prelude::*;
        items
            .par_chunks_mut(chunk_len)
            .enumerate()
            .for_each(|(index, chunk)| work(index, chunk));
    }
    #[cfg(target_arch = "wasm32")]
    for (index, chunk) in items.chunks_mut(chunk_len).enumerate() {
        work(index, chunk);
    }
}

/// Resident memory of this process natively; the wasm linear memory in the browser.
pub fn host_memory_bytes() -> Option<u64> {
    #[cfg(not(target_arch = "wasm32"))]
    {
        memory_stats::memory_stats().map(|stats| stats.physical_mem as u64)
    }
    #[cfg(target_arch = "wasm32")]
    {
        use wasm_bindgen::JsCast;
        let memory: js_sys::WebAssembly::Memory = wasm_bindgen::memory().dyn_into().ok()?;
        let buffer: js_sys::ArrayBuffer = memory.buffer().dyn_into().ok()?;
        Some(u64::from(buffer.byte_length()))
    }
}

/// Reads a whole body: over HTTP(S) with the platform's client, or from a local path or
/// `file://` URL natively. A body longer than `limit` bytes is refused as
/// [`FetchCause::TooLarge`], before it is held where the transport says its length up front.
pub async fn fetch_bytes(location: &str, limit: usize) -> Result<Vec<u8>, FetchCause> {
    #[cfg(not(target_arch = "wasm32"))]
    {
        native::fetch_bytes(location, limit).await
    }
    #[cfg(target_arch = "wasm32")]
    {
        web::fetch_bytes(location, limit).await
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use super::FetchCause;
    use std::sync::OnceLock;

    fn client() -> &'static reqwest::Client {
        static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
        CLIENT.get_or_init(reqwest::Client::new)
    }

    fn describe(error: &reqwest::Error) -> String {
        let mut text = error.to_string();
        let mut source = std::error::Error::source(error);
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        text
    }

    pub async fn fetch_bytes(location: &str, limit: usize) -> Result<Vec<u8>, FetchCause> {
        if location.starts_with("http://") || location.starts_with("https://") {
            let mut response = client()
                .get(location)
                .send()
                .await
                .map_err(|e| FetchCause::Network(describe(&e)))?;
            let status = response.status();
            if !status.is_success() {
                return Err(FetchCause::Status(status.as_u16()));
            }
            let expected = response.content_length().map(|n| n as usize);
            if expected.is_some_and(|n| n > limit) {
                return Err(FetchCause::TooLarge { limit });
            }
            let mut body = Vec::with_capacity(expected.unwrap_or(0));
            loop {
                match response.chunk().await {
                    Ok(Some(piece)) if body.len() + piece.len() > limit => {
                        return Err(FetchCause::TooLarge { limit });
                    }
                    Ok(Some(piece)) => body.extend_from_slice(&piece),
                    Ok(None) => break,
                    // A connection that ends before Content-Length is a truncated body.
                    Err(_) if expected.is_some_and(|n| body.len() < n) => {
                        return Err(FetchCause::Truncated {
                            expected: expected.unwrap_or(0),
                            got: body.len(),
                        });
                    }
                    Err(e) => return Err(FetchCause::Network(describe(&e))),
                }
            }
            Ok(body)
        } else {
            let path = location.strip_prefix("file://").unwrap_or(location);
            let io = |e: std::io::Error| FetchCause::Io(format!("{path}: {e}"));
            if tokio::fs::metadata(path).await.map_err(io)?.len() > limit as u64 {
                return Err(FetchCause::TooLarge { limit });
            }
            tokio::fs::read(path).await.map_err(io)
        }
    }
}

#[cfg(target_arch = "wasm32")]
mod web {
    use super::FetchCause;
    use wasm_bindgen::{JsCast, JsValue, prelude::wasm_bindgen};
    use wasm_bindgen_futures::JsFuture;

    #[wasm_bindgen]
    extern "C" {
        // The global `fetch`, which exists both in a window and in a worker.
        #[wasm_bindgen(js_name = fetch)]
        fn global_fetch(request: &web_sys::Request) -> js_sys::Promise;
    }

    fn describe(value: JsValue) -> String {
        value
            .dyn_ref::<js_sys::Error>()
            .map(|e| String::from(e.message()))
            .or_else(|| value.as_string())
            .unwrap_or_else(|| format!("{value:?}"))
    }

    pub async fn fetch_bytes(location: &str, limit: usize) -> Result<Vec<u8>, FetchCause> {
        let init = web_sys::RequestInit::new();
        init.set_method("GET");
        let request = web_sys::Request::new_with_str_and_init(location, &init)
            .map_err(|e| FetchCause::Network(describe(e)))?;
        let response = JsFuture::from(global_fetch(&request))
            .await
            .map_err(|e| FetchCause::Network(describe(e)))?;
        let response: web_sys::Response = response
            .dyn_into()
            .map_err(|e| FetchCause::Network(describe(e)))?;
        if !response.ok() {
            return Err(FetchCause::Status(response.status()));
        }
        let announced = response
            .headers()
            .get("content-length")
            .ok()
            .flatten()
            .and_then(|n| n.parse::<usize>().ok());
        if announced.is_some_and(|n| n > limit) {
            return Err(FetchCause::TooLarge { limit });
        }
        let buffer = response
            .array_buffer()
            .map_err(|e| FetchCause::Network(describe(e)))?;
        let buffer = JsFuture::from(buffer)
            .await
            .map_err(|e| FetchCause::Network(describe(e)))?;
        // Checked again before the copy into wasm memory: a compressed transfer's
        // Content-Length is not the body's.
        let body = js_sys::Uint8Array::new(&buffer);
        if body.length() as usize > limit {
            return Err(FetchCause::TooLarge { limit });
        }
        Ok(body.to_vec())
    }
}
