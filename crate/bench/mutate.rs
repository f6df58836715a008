//! Mutated manifests and chunks, for the promise that bad input is a clear error and never
//! a panic. Each case mutates a valid dataset (numbers set to extremes, fields dropped or
//! duplicated, path tricks, other codecs, JSON cut short or with a flipped byte; chunks
//! truncated, bit-flipped, extended, swapped or emptied, some re-signed so that their
//! checksum passes and the decoder sees the damage), then does what opening and reading it
//! does: parse and validate the manifest and its vocabulary, verify and decode each
//! chunk, cut it into samples or windows and read every one.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use rand::{Rng, RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use serde_json::Value;

use crate::data::chunk::{sha256_hex, verify_and_decode};
use crate::data::codec::Codec;
use crate::data::error::DataError;
use crate::data::gauge::MemoryGauge;
use crate::data::import::{generate_synthetic, import_text};
use crate::data::manifest::{MANIFEST_FILE, Manifest};
use crate::data::stream::{self, StreamOptions};
use crate::data::text;
use crate::data::writer::WriterOptions;

/// Tokens per window a text case is read with.
const WINDOW: usize = 9;

/// A dataset as files: the manifest's text and every chunk's body.
#[derive(Clone, Debug)]
pub struct DatasetFiles {
    pub manifest: String,
    pub chunks: BTreeMap<String, Vec<u8>>,
}

impl DatasetFiles {
    pub fn read(dir: &Path) -> std::io::Result<Self> {
        let manifest = std::fs::read_to_string(dir.join(MANIFEST_FILE))?;
        let parsed = Manifest::parse(&manifest).map_err(std::io::Error::other)?;
        let mut chunks = BTreeMap::new();
        for entry in &parsed.chunks {
            chunks.insert(entry.file.clone(), std::fs::read(dir.join(&entry.file))?);
        }
        Ok(DatasetFiles { manifest, chunks })
    }
}

/// Small datasets of each kind, written under `dir`: images in each codec, and text.
pub fn sample_datasets(dir: &Path) -> Result<Vec<(String, DatasetFiles)>, DataError> {
    let read = |out: &Path| DatasetFiles::read(out).map_err(|e| DataError::io(out, e));
    let mut found = Vec::new();
    for codec in Codec::ALL {
        let out = dir.join(format!("images-{}", codec.name()));
        generate_synthetic(
            120,
            3,
            &out,
            WriterOptions {
                chunk_samples: 50,
                codec,
            },
        )?;
        found.push((format!("images ({})", codec.name()), read(&out)?));
    }
    let corpus = dir.join("corpus.txt");
    std::fs::write(&corpus, "To be, or not to be, that is the question:\n".repeat(8))
        .map_err(|e| DataError::io(&corpus, e))?;
    let out = dir.join("text");
    let options = WriterOptions {
        chunk_samples: 100,
        codec: Codec::Deflate,
    };
    import_text(&[corpus], "text", &out, options)?;
    found.push(("text".into(), read(&out)?));
    Ok(found)
}

/// What the cases came to.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Figures {
    pub cases: usize,
    /// Cases that still made a valid dataset, read to the end.
    pub valid: usize,
    /// Cases refused with an error.
    pub refused: usize,
    pub panics: usize,
    /// The first few panics: the case's seed and the message.
    pub panic_examples: Vec<String>,
}

/// Runs `cases` mutations of `dataset`, case `i` drawn from `seed` and `i`.
pub fn run(dataset: &DatasetFiles, seed: u64, cases: usize) -> Figures {
    let mut figures = Figures::default();
    // Parsed once: every case mutates a copy.
    let manifest: Value = serde_json::from_str(&dataset.manifest).unwrap_or(Value::Null);
    for case in 0..cases {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(case as u64);
        let (manifest, chunks) = mutated(manifest.clone(), &dataset.chunks, &mut rng);
        figures.cases += 1;
        match catch_unwind(AssertUnwindSafe(|| open_and_read(&manifest, &chunks))) {
            Ok(Ok(())) => figures.valid += 1,
            Ok(Err(_)) => figures.refused += 1,
            Err(panic) => {
                figures.panics += 1;
                if figures.panic_examples.len() < 5 {
                    let message = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    figures
                        .panic_examples
                        .push(format!("seed {seed} case {case}: {message}"));
                }
            }
        }
    }
    figures
}

/// What opening a dataset and reading an epoch of it does, without the transport.
pub fn open_and_read(manifest: &str, chunks: &BTreeMap<String, Vec<u8>>) -> Result<(), String> {
    let manifest = Manifest::parse(manifest)?;
    let options = StreamOptions {
        seed: 1,
        window: manifest.is_text().then_some(WINDOW),
        ..StreamOptions::default()
    };
    stream::check_window(&manifest, options.window).map_err(|e| e.to_string())?;
    if let Some(vocabulary) = &manifest.vocabulary {
        text::CharTokenizer::from_vocabulary(vocabulary)?;
    }
    let gauge = MemoryGauge::default();
    for (index, entry) in manifest.chunks.iter().enumerate() {
        let body = chunks
            .get(&entry.file)
            .ok_or_else(|| format!("{} is missing", entry.file))?;
        let raw = verify_and_decode(&manifest, entry, body).map_err(|e| e.to_string())?;
        let chunk = stream::epoch_chunk(&manifest, &options, 0, index, raw, &gauge);
        let mut checksum = 0u64;
        for position in 0..chunk.len() {
            let (label, features) = chunk.sample(position);
            checksum += u64::from(label.unwrap_or(0)) + features.len() as u64;
        }
        std::hint::black_box(checksum);
    }
    Ok(())
}

/// One case: `dataset` mutated by the draws of `rng`, then opened and read. Any source of
/// draws will do: the seeded runs above, or a property-based test's shrinkable sequence.
pub fn mutate_and_read<R: Rng + ?Sized>(dataset: &DatasetFiles, rng: &mut R) -> Result<(), String> {
    let manifest: Value = serde_json::from_str(&dataset.manifest).unwrap_or(Value::Null);
    let (manifest, chunks) = mutated(manifest, &dataset.chunks, rng);
    open_and_read(&manifest, &chunks)
}

fn mutated<R: Rng + ?Sized>(
    mut manifest: Value,
    originals: &BTreeMap<String, Vec<u8>>,
    rng: &mut R,
) -> (String, BTreeMap<String, Vec<u8>>) {
    let mut chunks = originals.clone();
    let files: Vec<String> = chunks.keys().cloned().collect();
    if !files.is_empty() && rng.random_bool(0.5) {
        let file = &files[rng.random_range(0..files.len())];
        let other = &originals[&files[rng.random_range(0..files.len())]];
        let body = chunks.get_mut(file).expect("a listed chunk");
        mutate_bytes(body, other, rng);
        if rng.random_bool(0.5) {
            resign(&mut manifest, file, body);
        }
    }
    for _ in 0..rng.random_range(0..4) {
        mutate_value(&mut manifest, rng);
    }
    let mut text = manifest.to_string();
    if rng.random_bool(0.1) {
        let mut bytes = text.into_bytes();
        mutate_bytes(&mut bytes, &[], rng);
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    (text, chunks)
}

fn mutate_bytes<R: Rng + ?Sized>(body: &mut Vec<u8>, other: &[u8], rng: &mut R) {
    match rng.random_range(0..5) {
        0 => body.truncate(rng.random_range(0..=body.len())),
        1 if !body.is_empty() => {
            let at = rng.random_range(0..body.len());
            body[at] ^= 1 << rng.random_range(0..8);
        }
        2 => body.extend((0..rng.random_range(1..64)).map(|_| rng.random::<u8>())),
        3 => *body = other.to_vec(),
        _ => body.clear(),
    }
}

/// Makes the manifest's entry for `file` match `body`, so the checksum passes.
fn resign(manifest: &mut Value, file: &str, body: &[u8]) {
    let Some(entries) = manifest.get_mut("chunks").and_then(Value::as_array_mut) else {
        return;
    };
    for entry in entries {
        if entry.get("file").and_then(Value::as_str) == Some(file) {
            entry["sha256"] = Value::from(sha256_hex(body));
            entry["compressed_bytes"] = Value::from(body.len());
        }
    }
}

const NUMBERS: [i128; 14] = [
    0,
    1,
    2,
    8,
    255,
    256,
    65_536,
    1 << 31,
    1 << 32,
    (1 << 32) + 1,
    1 << 53,
    u64::MAX as i128,
    -1,
    i64::MIN as i128,
];

const STRINGS: [&str; 13] = [
    "",
    "..",
    "../manifest.json",
    "/etc/passwd",
    "a/b",
    "%2e%2e%2fx",
    "C:\\x",
    "lz4",
    "deflate",
    "zstd",
    "train",
    "test",
    "é",
];

/// Every path to a leaf or container of `value`, as JSON pointers.
fn pointers(value: &Value, at: String, found: &mut Vec<String>) {
    match value {
        Value::Object(map) => map.iter().for_each(|(k, v)| {
            pointers(
                v,
                format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                found,
            )
        }),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .for_each(|(i, v)| pointers(v, format!("{at}/{i}"), found)),
        _ => {}
    }
    found.push(at);
}

fn mutate_value<R: Rng + ?Sized>(manifest: &mut Value, rng: &mut R) {
    let mut found = Vec::new();
    pointers(manifest, String::new(), &mut found);
    let pointer = found[rng.random_range(0..found.len())].clone();
    let (parent, key) = pointer.rsplit_once('/').unwrap_or(("", ""));
    let replacement = match rng.random_range(0..7) {
        0 => {
            let n = NUMBERS[rng.random_range(0..NUMBERS.len())];
            serde_json::from_str::<Value>(&n.to_string()).unwrap_or(Value::Null)
        }
        1 => Value::from(STRINGS[rng.random_range(0..STRINGS.len())]),
        2 => Value::from("x".repeat(rng.random_range(1..5000))),
        3 => Value::Null,
        4 => Value::from(vec![Value::from(1u64 << 32), Value::from(1u64 << 32)]),
        5 => {
            // Drop the field or element.
            match manifest.pointer_mut(parent) {
                Some(Value::Object(map)) => {
                    map.remove(key);
                }
                Some(Value::Array(items)) => {
                    if let Ok(i) = key.parse::<usize>()
                        && i < items.len()
                    {
                        items.remove(i);
                    }
                }
                _ => {}
            }
            return;
        }
        _ => {
            // Duplicate an element of an array (a chunk listed twice, a repeated symbol).
            if let Some(Value::Array(items)) = manifest.pointer_mut(parent)
                && let Ok(i) = key.parse::<usize>()
                && let Some(item) = items.get(i).cloned()
            {
                items.insert(i, item);
            }
            return;
        }
    };
    if let Some(slot) = manifest.pointer_mut(&pointer) {
        *slot = replacement;
    }
}
