//! `headroom prepare`: IDX import, generated data, and bad input that leaves nothing behind.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::io::Write;
use std::path::Path;

use headroom::data::import::{DEFAULT_IDX_SOURCE, Provenance, import_idx, provenance};
use headroom::data::writer::WriterOptions;
use headroom::data::{Codec, DataError, Manifest, Split};

fn idx_bytes(dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut bytes = vec![0, 0, 0x08, dims.len() as u8];
    for d in dims {
        bytes.extend_from_slice(&d.to_be_bytes());
    }
    bytes.extend_from_slice(data);
    bytes
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

/// Writes a tiny MNIST-style folder: 4x3 images whose pixels encode their index.
fn write_idx_folder(dir: &Path, train: usize, test: usize, gzipped: bool) {
    for (prefix, count) in [("train", train), ("t10k", test)] {
        let images: Vec<u8> = (0..count * 12).map(|i| (i / 12 + i % 12) as u8).collect();
        let labels: Vec<u8> = (0..count).map(|i| (i % 10) as u8).collect();
        let files = [
            (
                format!("{prefix}-images-idx3-ubyte"),
                idx_bytes(&[count as u32, 4, 3], &images),
            ),
            (
                format!("{prefix}-labels-idx1-ubyte"),
                idx_bytes(&[count as u32], &labels),
            ),
        ];
        for (name, bytes) in files {
            if gzipped {
                std::fs::write(dir.join(format!("{name}.gz")), gzip(&bytes)).unwrap();
            } else {
                std::fs::write(dir.join(name), bytes).unwrap();
            }
        }
    }
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn idx_files_plain_or_gzipped_become_checksummed_chunks_of_the_requested_size() {
    for gzipped in [false, true] {
        let source = tempfile::tempdir().unwrap();
        write_idx_folder(source.path(), 10, 4, gzipped);
        let out = tempfile::tempdir().unwrap();
        let dataset = out.path().join("mnist");
        let options = WriterOptions {
            chunk_samples: 3,
            codec: Codec::Lz4,
        };
        let manifest = import_idx(source.path(), "mnist", &dataset, options).unwrap();
        assert_eq!(
            (manifest.count(Split::Train), manifest.count(Split::Test)),
            (10, 4)
        );
        assert_eq!(manifest.sample_shape, vec![4, 3]);
        let sizes: Vec<usize> = manifest
            .chunks_of(Split::Train)
            .iter()
            .map(|c| c.samples)
            .collect();
        assert_eq!(sizes, vec![3, 3, 3, 1]);
        let on_disk: Manifest =
            Manifest::parse(&std::fs::read_to_string(dataset.join("manifest.json")).unwrap()).unwrap();
        assert_eq!(on_disk, manifest);
        for chunk in &manifest.chunks {
            let body = std::fs::read(dataset.join(&chunk.file)).unwrap();
            assert_eq!(body.len(), chunk.compressed_bytes);
            assert_eq!(headroom::data::chunk::sha256_hex(&body), chunk.sha256);
        }
        // The first train chunk holds samples 0..3: labels, then their pixels.
        let first = &manifest.chunks[0];
        let raw = first
            .codec
            .decompress(
                &std::fs::read(dataset.join(&first.file)).unwrap(),
                first.raw_bytes,
            )
            .unwrap();
        assert_eq!(&raw[..3], &[0, 1, 2]);
        assert_eq!(raw[3 + 12], 1, "sample 1's first pixel encodes its index");
    }
}

#[test]
fn bad_idx_input_is_a_clear_error_and_leaves_no_partial_dataset() {
    type Spoil = fn(&Path);
    let spoilers: [(&str, Spoil, &str); 4] = [
        (
            "bad magic",
            |d| std::fs::write(d.join("train-labels-idx1-ubyte"), [1u8, 2, 3, 4, 0, 0, 0, 1, 5]).unwrap(),
            "magic",
        ),
        (
            "count mismatch",
            |d| std::fs::write(d.join("train-labels-idx1-ubyte"), idx_bytes(&[9], &[0; 9])).unwrap(),
            "holds 10 images but",
        ),
        (
            "truncated data",
            |d| std::fs::write(d.join("t10k-images-idx3-ubyte"), idx_bytes(&[4, 4, 3], &[0; 40])).unwrap(),
            "need 48 data bytes",
        ),
        (
            "missing file",
            |d| std::fs::remove_file(d.join("t10k-labels-idx1-ubyte")).unwrap(),
            "neither t10k-labels-idx1-ubyte",
        ),
    ];
    for (case, spoil, expected) in spoilers {
        let source = tempfile::tempdir().unwrap();
        write_idx_folder(source.path(), 10, 4, false);
        spoil(source.path());
        let out = tempfile::tempdir().unwrap();
        let error = import_idx(
            source.path(),
            "mnist",
            &out.path().join("mnist"),
            WriterOptions::default(),
        )
        .unwrap_err();
        assert!(matches!(error, DataError::Import(_)), "{case}: {error:?}");
        assert!(error.to_string().contains(expected), "{case}: {error}");
        assert!(
            entries(out.path()).is_empty(),
            "{case}: left {:?}",
            entries(out.path())
        );
    }
}

#[test]
fn an_out_of_range_label_is_refused_midway_without_touching_the_old_dataset() {
    let source = tempfile::tempdir().unwrap();
    write_idx_folder(source.path(), 10, 4, false);
    let out = tempfile::tempdir().unwrap();
    let dataset = out.path().join("mnist");
    import_idx(source.path(), "mnist", &dataset, WriterOptions::default()).unwrap();
    let before = std::fs::read(dataset.join("manifest.json")).unwrap();
    std::fs::write(
        source.path().join("t10k-labels-idx1-ubyte"),
        idx_bytes(&[4], &[0, 1, 2, 200]),
    )
    .unwrap();
    let error = import_idx(source.path(), "mnist", &dataset, WriterOptions::default()).unwrap_err();
    assert!(error.to_string().contains("label 200"), "{error}");
    assert_eq!(std::fs::read(dataset.join("manifest.json")).unwrap(), before);
    assert_eq!(entries(out.path()), vec!["mnist"]);
}

#[test]
fn the_real_fashion_mnist_imports_with_its_published_counts_and_checksums() {
    let source = Path::new(DEFAULT_IDX_SOURCE);
    if !source.is_dir() {
        eprintln!(
            "{DEFAULT_IDX_SOURCE} is absent (apt-get install dataset-fashion-mnist); .ci/run installs it"
        );
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let manifest = import_idx(
        source,
        "fashion-mnist",
        &out.path().join("fashion-mnist"),
        WriterOptions::default(),
    )
    .unwrap();
    assert_eq!(
        (manifest.count(Split::Train), manifest.count(Split::Test)),
        (60000, 10000)
    );
    assert_eq!(manifest.sample_shape, vec![28, 28]);
    assert_eq!(manifest.class_names[9], "Ankle boot");
    assert_eq!(
        manifest.chunks_of(Split::Train).len(),
        15,
        "60000 / 4096 rounded up"
    );
    assert!(
        manifest
            .sources
            .iter()
            .all(|s| provenance(s) == Provenance::Known),
        "{:?}",
        manifest.sources
    );
}

#[test]
fn the_cli_generates_synthetic_data_and_refuses_bad_values() {
    let out = tempfile::tempdir().unwrap();
    let root = out.path().to_str().unwrap();
    let done = common::headroom(&[
        "prepare",
        "--synthetic",
        "500",
        "--chunk-samples",
        "128",
        "--out-root",
        root,
    ]);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let manifest =
        Manifest::parse(&std::fs::read_to_string(out.path().join("synthetic/manifest.json")).unwrap())
            .unwrap();
    assert_eq!(
        (
            manifest.count(Split::Train),
            manifest.count(Split::Test),
            manifest.chunks.len()
        ),
        (500, 100, 5)
    );
    let index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("index.json")).unwrap()).unwrap();
    assert_eq!(index["datasets"][0]["path"], "synthetic");
    assert_eq!(index["datasets"][0]["train"], 500);

    for (args, expected) in [
        (
            vec!["prepare", "--synthetic", "100", "--chunk-samples", "0"],
            "chunk-samples",
        ),
        (vec!["prepare", "--synthetic", "0"], "at least 1 sample"),
        (
            vec!["prepare", "--synthetic", "10", "--codec", "zip"],
            "unknown codec 'zip'",
        ),
        (
            vec!["prepare", "--source", "/nonexistent-idx"],
            "dataset-fashion-mnist",
        ),
    ] {
        let args: Vec<&str> = args.into_iter().chain(["--out-root", root]).collect();
        let failed = common::headroom(&args);
        let stderr = String::from_utf8_lossy(&failed.stderr);
        assert!(!failed.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    assert_eq!(
        entries(out.path()),
        vec!["index.json", "synthetic"],
        "failed runs leave nothing behind"
    );
}

#[test]
fn text_becomes_token_chunks_split_by_position() {
    let root = tempfile::tempdir().unwrap();
    let (first, second) = (root.path().join("a.txt"), root.path().join("b.txt"));
    std::fs::write(&first, "abcabcabca".repeat(50)).unwrap();
    std::fs::write(&second, "xyz\n".repeat(25)).unwrap();
    let out = root.path().join("out");
    let done = common::headroom(&[
        "prepare",
        "--text",
        first.to_str().unwrap(),
        second.to_str().unwrap(),
        "--name",
        "letters",
        "--chunk-samples",
        "128",
        "--out-root",
        out.to_str().unwrap(),
    ]);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let manifest =
        headroom::data::Manifest::parse(&std::fs::read_to_string(out.join("letters/manifest.json")).unwrap())
            .unwrap();
    assert_eq!(
        manifest.vocabulary,
        Some(["\n", "a", "b", "c", "x", "y", "z"].map(String::from).to_vec())
    );
    // 600 characters: the last 60 are the test split, all of them from the second file.
    assert_eq!(
        (manifest.count(Split::Train), manifest.count(Split::Test)),
        (540, 60)
    );
    assert_eq!(manifest.sources.len(), 2);
    let test = manifest.chunks_of(Split::Test)[0];
    let raw = test
        .codec
        .decompress(
            &std::fs::read(out.join("letters").join(&test.file)).unwrap(),
            test.raw_bytes,
        )
        .unwrap();
    assert_eq!(&raw[..4], &[4, 5, 6, 0], "x y z newline");
    let index = std::fs::read_to_string(out.join("index.json")).unwrap();
    assert!(index.contains("\"kind\": \"text\""), "{index}");
}

#[test]
fn bad_text_is_a_clear_error_and_leaves_nothing_behind() {
    let many_symbols: String = (0..300u32).filter_map(|i| char::from_u32(0x4e00 + i)).collect();
    let cases: [(&str, Vec<u8>, &str); 4] = [
        (
            "not UTF-8",
            b"To be \xff or not".to_vec(),
            "is not UTF-8 text (invalid byte at offset 6)",
        ),
        ("empty", Vec::new(), "the text files are empty"),
        (
            "too short",
            "To be, or not to be.".into(),
            "too short: 20 characters, at least 100",
        ),
        (
            "too many symbols",
            many_symbols.into_bytes(),
            "300 distinct characters",
        ),
    ];
    for (case, bytes, expected) in cases {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("corpus.txt");
        std::fs::write(&file, bytes).unwrap();
        let out = root.path().join("out");
        let failed = common::headroom(&[
            "prepare",
            "--text",
            file.to_str().unwrap(),
            "--name",
            "corpus",
            "--out-root",
            out.to_str().unwrap(),
        ]);
        let stderr = String::from_utf8_lossy(&failed.stderr);
        assert!(!failed.status.success(), "{case}: accepted");
        assert!(stderr.contains(expected), "{case}: {stderr}");
        assert!(!stderr.contains("panicked"), "{case}: {stderr}");
        assert!(
            !out.exists() || entries(&out).is_empty(),
            "{case}: left files behind"
        );
    }
}

/// The page prepares dropped text in memory (crate/wasm/text.rs): the same manifest and the
/// same chunk bytes as `prepare --text` writes to a folder.
#[test]
fn text_prepared_in_memory_is_the_folders_byte_for_byte() {
    use headroom::data::text::{corpus, text_description, write_corpus};
    use headroom::data::writer::{DatasetWriter, WriterOptions};
    let root = tempfile::tempdir().unwrap();
    let text = "It is a tale told by an idiot, full of sound and fury.\n".repeat(40);
    let file = root.path().join("tale.txt");
    std::fs::write(&file, &text).unwrap();
    let options = WriterOptions {
        chunk_samples: 300,
        ..WriterOptions::default()
    };
    let folder = root.path().join("tale");
    let written =
        headroom::data::import::import_text(std::slice::from_ref(&file), "tale", &folder, options).unwrap();
    let corpus = corpus(&[("tale.txt".to_string(), text.into_bytes())]).unwrap();
    let mut writer = DatasetWriter::in_memory(text_description("tale", &corpus), options).unwrap();
    write_corpus(&mut writer, &corpus).unwrap();
    let (manifest, chunks) = writer.finish_in_memory().unwrap();
    assert_eq!(manifest, written);
    assert_eq!(chunks.len(), written.chunks.len());
    for (name, bytes) in chunks {
        assert_eq!(bytes, std::fs::read(folder.join(&name)).unwrap(), "{name}");
    }
}
