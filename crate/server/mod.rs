//! `headroom serve`: the static files of the playground and the dataset chunks.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;

use axum::Router;
use axum::http::{HeaderName, HeaderValue, Method, header};
use tower_http::cors::{Any, CorsLayer};
use tower_http::services::ServeDir;
use tower_http::set_header::SetResponseHeaderLayer;

pub const DEFAULT_ADDR: &str = "127.0.0.1:8080";

fn always(name: HeaderName, value: &'static str) -> SetResponseHeaderLayer<HeaderValue> {
    SetResponseHeaderLayer::overriding(name, HeaderValue::from_static(value))
}

/// Files under `root`; where `NAME.br` or `NAME.gz` lies beside `NAME` (web/scripts/build-wasm
/// writes them for the wasm module), a client that accepts that encoding gets it.
fn static_files(root: PathBuf) -> ServeDir {
    ServeDir::new(root).precompressed_br().precompressed_gzip()
}

/// ServeDir answers Range (206), ETag/Last-Modified revalidation (304) and refuses paths
/// that leave the root. The headers make the page cross-origin isolated, which it needs
/// to measure its own memory, while still letting other origins read the chunks.
///
/// `web` (the JS front end) is mounted at `/web/` when given.
pub fn router(root: PathBuf, web: Option<PathBuf>) -> Router {
    let cors = CorsLayer::new()
        .allow_origin(Any)
        .allow_methods([Method::GET, Method::HEAD])
        .allow_headers([header::RANGE, header::IF_NONE_MATCH, header::IF_MODIFIED_SINCE])
        .expose_headers([
            header::CONTENT_LENGTH,
            header::CONTENT_RANGE,
            header::ETAG,
            header::ACCEPT_RANGES,
        ]);
    let mut router = Router::new();
    if let Some(web) = web {
        router = router.nest_service("/web", static_files(web));
    }
    router
        .fallback_service(static_files(root))
        .layer(always(
            HeaderName::from_static("cross-origin-opener-policy"),
            "same-origin",
        ))
        .layer(always(
            HeaderName::from_static("cross-origin-embedder-policy"),
            "require-corp",
        ))
        .layer(always(
            HeaderName::from_static("cross-origin-resource-policy"),
            "cross-origin",
        ))
        // Revalidate on every load (cheap with ETag) so a rebuilt wasm is never stale.
        .layer(always(header::CACHE_CONTROL, "no-cache"))
        .layer(cors)
}

/// Serves `router` on an already-bound listener until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Binds `addr` and serves in the background; returns the bound address (port 0 picks a
/// free one), for tests and benchmarks that need a real server.
pub async fn spawn_local(root: PathBuf, addr: SocketAddr) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(serve(listener, router(root, None), std::future::pending()));
    Ok(bound)
}
