//! Deliberately broken HTTP: each fault is written at the byte level, which no well-behaved
//! server framework would let us do.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fault {
    NotFound,
    ServerError,
    /// Announces the full length, sends half, closes.
    Truncate,
    /// Sends the full body with one byte inverted.
    FlipByte,
    /// Sends headers and half the body, then stops sending for a long while.
    Stall,
    /// Resets the connection (RST) without answering.
    Reset,
}

#[derive(Default)]
struct State {
    files: HashMap<String, Vec<u8>>,
    faults: HashMap<String, VecDeque<Fault>>,
    always: HashMap<String, Fault>,
    requests: HashMap<String, usize>,
}

#[derive(Clone)]
pub struct FaultServer {
    pub base_url: String,
    state: Arc<Mutex<State>>,
}

impl FaultServer {
    /// Serves every file of `dir` under `/<prefix>/`.
    pub async fn start(dir: &Path, prefix: &str) -> FaultServer {
        let mut state = State::default();
        for entry in std::fs::read_dir(dir).expect("dataset dir") {
            let entry = entry.expect("dir entry");
            let name = entry.file_name().to_string_lossy().into_owned();
            state.files.insert(
                format!("/{prefix}/{name}"),
                std::fs::read(entry.path()).expect("file"),
            );
        }
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base_url = format!("http://{}/{prefix}", listener.local_addr().expect("addr"));
        let state = Arc::new(Mutex::new(state));
        let server_state = state.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(answer(stream, server_state.clone()));
            }
        });
        FaultServer { base_url, state }
    }

    fn path_of(&self, file: &str) -> String {
        let prefix = self.base_url.splitn(4, '/').nth(3).unwrap_or_default();
        format!("/{prefix}/{file}")
    }

    /// The next `times` requests for `file` get `fault`; later ones are answered normally.
    pub fn fail_next(&self, file: &str, fault: Fault, times: usize) {
        let path = self.path_of(file);
        self.state
            .lock()
            .unwrap()
            .faults
            .entry(path)
            .or_default()
            .extend(std::iter::repeat_n(fault, times));
    }

    pub fn fail_always(&self, file: &str, fault: Fault) {
        let path = self.path_of(file);
        self.state.lock().unwrap().always.insert(path, fault);
    }

    pub fn set_file(&self, file: &str, body: Vec<u8>) {
        let path = self.path_of(file);
        self.state.lock().unwrap().files.insert(path, body);
    }

    pub fn requests_for(&self, file: &str) -> usize {
        let path = self.path_of(file);
        self.state
            .lock()
            .unwrap()
            .requests
            .get(&path)
            .copied()
            .unwrap_or(0)
    }
}

async fn read_request_path(stream: &mut TcpStream) -> Option<String> {
    let mut buffer = Vec::new();
    let mut piece = [0u8; 1024];
    while !buffer.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut piece).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&piece[..n]);
    }
    let request = String::from_utf8_lossy(&buffer);
    request
        .lines()
        .next()?
        .split_whitespace()
        .nth(1)
        .map(str::to_string)
}

fn head(status: &str, length: usize) -> Vec<u8> {
    format!("HTTP/1.1 {status}\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n").into_bytes()
}

async fn answer(mut stream: TcpStream, state: Arc<Mutex<State>>) {
    let Some(path) = read_request_path(&mut stream).await else {
        return;
    };
    let (body, fault) = {
        let mut state = state.lock().unwrap();
        *state.requests.entry(path.clone()).or_default() += 1;
        let fault = state
            .faults
            .get_mut(&path)
            .and_then(VecDeque::pop_front)
            .or_else(|| state.always.get(&path).copied());
        (state.files.get(&path).cloned(), fault)
    };
    let Some(mut body) = body else {
        let _ = stream.write_all(&head("404 Not Found", 0)).await;
        return;
    };
    let _ = match fault {
        None => {
            stream
                .write_all(&[head("200 OK", body.len()), body].concat())
                .await
        }
        Some(Fault::NotFound) => stream.write_all(&head("404 Not Found", 0)).await,
        Some(Fault::ServerError) => stream.write_all(&head("500 Internal Server Error", 0)).await,
        Some(Fault::Truncate) => {
            stream
                .write_all(&[head("200 OK", body.len()), body[..body.len() / 2].to_vec()].concat())
                .await
        }
        Some(Fault::FlipByte) => {
            let middle = body.len() / 2;
            body[middle] = !body[middle];
            stream
                .write_all(&[head("200 OK", body.len()), body].concat())
                .await
        }
        Some(Fault::Stall) => {
            let _ = stream
                .write_all(&[head("200 OK", body.len()), body[..body.len() / 2].to_vec()].concat())
                .await;
            tokio::time::sleep(Duration::from_secs(20)).await;
            Ok(())
        }
        Some(Fault::Reset) => {
            let _ = stream.set_zero_linger();
            drop(stream);
            return;
        }
    };
    let _ = stream.shutdown().await;
}
