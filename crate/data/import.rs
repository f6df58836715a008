//! Turning source data (IDX files, or a generator) into a chunked dataset.

use std::path::{Path, PathBuf};

use super::chunk::sha256_hex;
use super::error::DataError;
use super::idx::read_idx;
use super::manifest::{Manifest, SourceFile, Split};
use super::synthetic::{self, SyntheticImages};
use super::text::{corpus, text_description, write_corpus};
use super::writer::{DatasetDescription, DatasetWriter, WriterOptions};

pub const DEFAULT_IDX_SOURCE: &str = "/usr/share/datasets/fashion-mnist";

const FASHION_CLASSES: [&str; 10] = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
];

/// sha256 of the Fashion-MNIST files as Debian's `dataset-fashion-mnist` ships them, so an
/// import can say whether it read the data everyone else reads.
const KNOWN_FASHION_SHA256: [(&str, &str); 4] = [
    (
        "train-images-idx3-ubyte.gz",
        "b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7",
    ),
    (
        "train-labels-idx1-ubyte.gz",
        "0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056",
    ),
    (
        "t10k-images-idx3-ubyte.gz",
        "cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa",
    ),
    (
        "t10k-labels-idx1-ubyte.gz",
        "8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05",
    ),
];

/// Whether a source file is byte-identical to a known published file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Provenance {
    Known,
    Unknown,
}

pub fn provenance(source: &SourceFile) -> Provenance {
    let known = KNOWN_FASHION_SHA256
        .iter()
        .any(|(file, sha)| *file == source.file && *sha == source.sha256);
    if known {
        Provenance::Known
    } else {
        Provenance::Unknown
    }
}

pub fn class_names_for(name: &str) -> Vec<String> {
    match name {
        "fashion-mnist" => FASHION_CLASSES.iter().map(|s| s.to_string()).collect(),
        _ => (0..10).map(|d| d.to_string()).collect(),
    }
}

/// Finds `<stem>` or `<stem>.gz` in `dir`.
fn find_idx(dir: &Path, stem: &str) -> Result<PathBuf, DataError> {
    [stem.to_string(), format!("{stem}.gz")]
        .into_iter()
        .map(|name| dir.join(name))
        .find(|path| path.is_file())
        .ok_or_else(|| {
            DataError::Import(format!(
                "{}: neither {stem} nor {stem}.gz is there",
                dir.display()
            ))
        })
}

fn source_file(path: &Path) -> Result<SourceFile, DataError> {
    let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
    let file = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(SourceFile {
        file,
        sha256: sha256_hex(&bytes),
    })
}

struct IdxSplit {
    images: super::idx::IdxArray,
    labels: Vec<u8>,
}

fn read_split(dir: &Path, prefix: &str) -> Result<(IdxSplit, [SourceFile; 2]), DataError> {
    let images_path = find_idx(dir, &format!("{prefix}-images-idx3-ubyte"))?;
    let labels_path = find_idx(dir, &format!("{prefix}-labels-idx1-ubyte"))?;
    let images = read_idx(&images_path, 3)?;
    let labels = read_idx(&labels_path, 1)?;
    if images.dims[0] != labels.dims[0] {
        return Err(DataError::Import(format!(
            "{} holds {} images but {} holds {} labels",
            images_path.display(),
            images.dims[0],
            labels_path.display(),
            labels.dims[0]
        )));
    }
    let sources = [source_file(&images_path)?, source_file(&labels_path)?];
    Ok((
        IdxSplit {
            images,
            labels: labels.data,
        },
        sources,
    ))
}

/// Imports the MNIST-family IDX files in `source_dir` into `out_dir`.
pub fn import_idx(
    source_dir: &Path,
    name: &str,
    out_dir: &Path,
    options: WriterOptions,
) -> Result<Manifest, DataError> {
    let (train, train_sources) = read_split(source_dir, "train")?;
    let (test, test_sources) = read_split(source_dir, "t10k")?;
    let shape = train.images.dims[1..].to_vec();
    if test.images.dims[1..] != shape[..] {
        return Err(DataError::Import(format!(
            "train images are {:?} but test images are {:?}",
            shape,
            &test.images.dims[1..]
        )));
    }
    let class_names = class_names_for(name);
    let description = DatasetDescription {
        name: name.to_string(),
        version: "1".into(),
        sample_shape: shape,
        class_names,
        sources: train_sources.into_iter().chain(test_sources).collect(),
        vocabulary: None,
    };
    let mut writer = DatasetWriter::create(out_dir, description, options)?;
    for (split, data) in [(Split::Train, &train), (Split::Test, &test)] {
        let sample_bytes = data.images.dims[1..].iter().product::<usize>();
        for (label, features) in data
            .labels
            .iter()
            .zip(data.images.data.chunks_exact(sample_bytes))
        {
            writer.push(split, *label, features)?;
        }
    }
    writer.finish()
}

/// Writes `train_samples` generated training samples (and a fifth as many for test).
pub fn generate_synthetic(
    train_samples: usize,
    seed: u64,
    out_dir: &Path,
    options: WriterOptions,
) -> Result<Manifest, DataError> {
    if train_samples == 0 {
        return Err(DataError::InvalidOption(
            "--synthetic needs at least 1 sample".into(),
        ));
    }
    let description = DatasetDescription {
        name: out_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "synthetic".into()),
        version: format!("seed-{seed}"),
        sample_shape: vec![synthetic::SIDE, synthetic::SIDE],
        class_names: SyntheticImages::class_names(),
        sources: Vec::new(),
        vocabulary: None,
    };
    let mut writer = DatasetWriter::create(out_dir, description, options)?;
    let mut images = SyntheticImages::new(seed);
    let test_samples = train_samples.div_ceil(5);
    for (split, count) in [(Split::Train, train_samples), (Split::Test, test_samples)] {
        for _ in 0..count {
            let (label, features) = images.next_sample();
            writer.push(split, label, &features)?;
        }
    }
    writer.finish()
}

/// Text to token chunks, split into train and test by position. Writes the concatenated
/// `files` to `out_dir` as a text dataset named `name`: the last
/// [`TEST_FRACTION`](super::text::TEST_FRACTION) of the
/// tokens is the test split (the rules: [`corpus`]). Nothing is left behind on an error.
pub fn import_text(
    files: &[PathBuf],
    name: &str,
    out_dir: &Path,
    options: WriterOptions,
) -> Result<Manifest, DataError> {
    let mut read = Vec::new();
    for path in files {
        let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        read.push((name, bytes));
    }
    let corpus = corpus(&read)?;
    let mut writer = DatasetWriter::create(out_dir, text_description(name, &corpus), options)?;
    write_corpus(&mut writer, &corpus)?;
    writer.finish()
}
