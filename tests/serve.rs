//! `headroom serve`: what a browser and the streaming reader rely on from the server.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::net::SocketAddr;

use headroom::server::spawn_local;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Site {
    _dir: tempfile::TempDir,
    addr: SocketAddr,
}

const WASM: &[u8] = b"\0asm\x01\0\0\0";

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

/// `<tmp>/secret.txt` beside the served root `<tmp>/site/`.
async fn site() -> Site {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("site");
    std::fs::create_dir_all(root.join("pkg")).unwrap();
    std::fs::write(root.join("index.html"), "<!doctype html><title>headroom</title>").unwrap();
    std::fs::write(root.join("pkg/headroom_bg.wasm"), WASM).unwrap();
    std::fs::write(root.join("pkg/headroom_bg.wasm.gz"), gzip(WASM)).unwrap();
    std::fs::write(root.join("chunk.bin"), (0..=255u8).collect::<Vec<u8>>()).unwrap();
    std::fs::write(dir.path().join("secret.txt"), "do not serve").unwrap();
    let addr = spawn_local(root, "127.0.0.1:0".parse().unwrap()).await.unwrap();
    Site { _dir: dir, addr }
}

/// A request written byte for byte: HTTP clients normalise `..` away before sending.
async fn raw_get(addr: SocketAddr, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
}

#[tokio::test]
async fn pages_are_cross_origin_isolated_and_wasm_has_its_mime_type() {
    let site = site().await;
    let client = reqwest::Client::new();
    let page = client.get(format!("http://{}/", site.addr)).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["cross-origin-opener-policy"], "same-origin");
    assert_eq!(page.headers()["cross-origin-embedder-policy"], "require-corp");
    assert!(page.text().await.unwrap().contains("headroom"));
    let wasm = client
        .get(format!("http://{}/pkg/headroom_bg.wasm", site.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(wasm.headers()["content-type"], "application/wasm");
}

#[tokio::test]
async fn a_client_that_accepts_gzip_gets_the_precompressed_file_and_others_the_plain_one() {
    let site = site().await;
    let client = reqwest::Client::new();
    let url = format!("http://{}/pkg/headroom_bg.wasm", site.addr);
    let compressed = client
        .get(&url)
        .header("Accept-Encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(compressed.headers()["content-encoding"], "gzip");
    assert_eq!(compressed.headers()["content-type"], "application/wasm");
    let body = compressed.bytes().await.unwrap();
    let mut unpacked = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&body[..]), &mut unpacked).unwrap();
    assert_eq!(unpacked, WASM);
    let plain = client.get(&url).send().await.unwrap();
    assert!(!plain.headers().contains_key("content-encoding"));
    assert_eq!(plain.bytes().await.unwrap(), WASM);
}

#[tokio::test]
async fn range_requests_get_206_with_exactly_those_bytes() {
    let site = site().await;
    let response = reqwest::Client::new()
        .get(format!("http://{}/chunk.bin", site.addr))
        .header("Range", "bytes=10-19")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 206);
    assert_eq!(response.headers()["content-range"], "bytes 10-19/256");
    assert_eq!(
        response.bytes().await.unwrap().to_vec(),
        (10..20u8).collect::<Vec<u8>>()
    );
}

#[tokio::test]
async fn an_unchanged_file_revalidates_with_its_etag_as_304() {
    let site = site().await;
    let client = reqwest::Client::new();
    let url = format!("http://{}/chunk.bin", site.addr);
    let first = client.get(&url).send().await.unwrap();
    let etag = first.headers()["etag"].clone();
    assert!(first.headers().contains_key("last-modified"));
    let again = client
        .get(&url)
        .header("If-None-Match", etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);
    let changed = client
        .get(&url)
        .header("If-None-Match", "\"something-else\"")
        .send()
        .await
        .unwrap();
    assert_eq!(changed.status(), 200);
}

#[tokio::test]
async fn paths_that_leave_the_root_are_refused_encoded_or_not() {
    let site = site().await;
    for path in [
        "/../secret.txt",
        "/pkg/../../secret.txt",
        "/%2e%2e/secret.txt",
        "/pkg/%2E%2E/%2e%2e/secret.txt",
        "/..%2fsecret.txt",
    ] {
        let response = raw_get(site.addr, path).await;
        let status_line = response.lines().next().unwrap_or_default().to_string();
        assert!(!status_line.contains("200"), "{path}: {status_line}");
        assert!(!response.contains("do not serve"), "{path} leaked the file");
    }
    assert!(
        raw_get(site.addr, "/missing.bin")
            .await
            .starts_with("HTTP/1.1 404")
    );
}

#[tokio::test]
async fn other_origins_may_read_the_chunks() {
    let site = site().await;
    let response = reqwest::Client::new()
        .get(format!("http://{}/chunk.bin", site.addr))
        .header("Origin", "http://127.0.0.1:9999")
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["access-control-allow-origin"], "*");
    assert_eq!(response.headers()["cross-origin-resource-policy"], "cross-origin");
}

/// The server has no authentication: an address other machines reach needs --public.
#[test]
fn serving_beyond_this_machine_needs_an_explicit_flag() {
    let root = tempfile::tempdir().unwrap();
    let output = common::headroom(&[
        "serve",
        "--addr",
        "0.0.0.0:0",
        "--root",
        root.path().to_str().unwrap(),
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("pass --public"), "{stderr}");
}

/// Many clients streaming an epoch at once from a `headroom serve` process all get the
/// samples one client alone gets, and the server holds no body per client: its peak memory
/// grows by less than one chunk per client (`headroom bench serve` runs 200).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_all_get_the_same_epoch_and_the_server_stays_small() {
    use headroom::bench::load::{peak_rss, read_epoch, spawn_serve, stream_concurrently};
    use headroom::data::Codec;

    let dataset = common::synthetic_dataset(20_000, 1000, Codec::Lz4);
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_headroom"));
    let (mut server, base) = spawn_serve(exe, dataset.root.path()).unwrap();
    let url = format!("{base}/synthetic");
    let (reference, _) = read_epoch(&url).await.unwrap();
    let before = peak_rss(server.id()).unwrap();
    let clients = 64;
    let figures = stream_concurrently(&url, clients, &reference.order_digest).await;
    let after = peak_rss(server.id()).unwrap();
    server.kill().unwrap();
    assert_eq!(figures.correct, clients, "{figures:?}");
    let chunk = dataset.manifest.chunks[0].compressed_bytes as u64;
    assert!(
        after - before < clients as u64 * chunk,
        "the server grew by {} bytes for {clients} clients (a chunk is {chunk})",
        after - before
    );
}
