//! Helpers shared by the native integration tests: small generated datasets, and a real
//! HTTP server on 127.0.0.1 that injects faults on request.
#![allow(dead_code)]

pub mod fault_server;

use std::path::{Path, PathBuf};

use headroom::data::import::generate_synthetic;
use headroom::data::writer::WriterOptions;
use headroom::data::{Codec, Manifest};

/// A generated dataset in a temporary folder: `dir` holds `manifest.json` and the chunks.
pub struct TestDataset {
    pub root: tempfile::TempDir,
    pub dir: PathBuf,
    pub manifest: Manifest,
}

pub fn synthetic_dataset(train_samples: usize, chunk_samples: usize, codec: Codec) -> TestDataset {
    let root = tempfile::tempdir().expect("temp dir");
    let dir = root.path().join("synthetic");
    let manifest = generate_synthetic(train_samples, 11, &dir, WriterOptions { chunk_samples, codec })
        .expect("generate dataset");
    TestDataset { root, dir, manifest }
}

pub fn read_file(dir: &Path, name: &str) -> Vec<u8> {
    std::fs::read(dir.join(name)).expect("dataset file")
}

/// Runs the `headroom` binary this test build produced.
pub fn headroom(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(args)
        .output()
        .expect("run headroom")
}
