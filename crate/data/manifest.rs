//! The manifest: which chunks a dataset has, their sizes and checksums, and the limits a
//! reader holds it to before trusting it.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use super::codec::Codec;

pub const FORMAT_NAME: &str = "headroom-chunks";
pub const FORMAT_VERSION: u32 = 1;
pub const MANIFEST_FILE: &str = "manifest.json";

/// The largest manifest read: about 80,000 chunk entries. A body beyond it is refused as
/// it arrives, before it is held.
pub const MAX_MANIFEST_BYTES: usize = 16 << 20;
/// The largest chunk, compressed or decoded: memory is reserved for a chunk before it is
/// fetched and decoded, so a manifest may not promise more than a tab can hold.
pub const MAX_CHUNK_BYTES: usize = 512 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    Train,
    Test,
}

impl Split {
    pub fn as_str(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Test => "test",
        }
    }
}

impl std::fmt::Display for Split {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Split {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "train" => Ok(Split::Train),
            "test" => Ok(Split::Test),
            other => Err(format!("unknown split '{other}' (expected train or test)")),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SampleDtype {
    U8,
}

impl SampleDtype {
    pub fn size_bytes(self) -> usize {
        match self {
            SampleDtype::U8 => 1,
        }
    }
}

/// One chunk file. The decoded bytes are `samples` labels (one byte each) followed by
/// `samples` feature records of the manifest's sample shape, so a chunk is usable alone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChunkEntry {
    pub file: String,
    pub split: Split,
    pub samples: usize,
    pub compressed_bytes: usize,
    pub raw_bytes: usize,
    pub sha256: String,
    pub codec: Codec,
}

impl ChunkEntry {
    /// Bytes one chunk can hold at once in the pipeline: its compressed body and its
    /// decoded samples coexist while it is decoded.
    pub fn footprint_bytes(&self) -> usize {
        self.compressed_bytes + self.raw_bytes
    }
}

/// Where a dataset came from, so a user can tell real data from generated data.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SourceFile {
    pub file: String,
    pub sha256: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub format_version: u32,
    pub name: String,
    pub version: String,
    pub sample_shape: Vec<usize>,
    pub sample_dtype: SampleDtype,
    pub class_names: Vec<String>,
    pub counts: BTreeMap<Split, usize>,
    pub chunk_samples: usize,
    #[serde(default)]
    pub sources: Vec<SourceFile>,
    pub chunks: Vec<ChunkEntry>,
    /// Present for text: the corpus's symbols in token order. A chunk of text decodes to
    /// `samples` tokens, one byte each (an index into this list), with no labels; the
    /// stream cuts it into windows of the model's context (see `StreamOptions::window`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vocabulary: Option<Vec<String>>,
}

/// The product of `dims` and `unit`, or `None` where it overflows.
fn checked_bytes(dims: &[usize], unit: usize) -> Option<usize> {
    dims.iter().try_fold(unit, |bytes, &d| bytes.checked_mul(d))
}

impl Manifest {
    /// Bytes of one sample's features. A validated manifest's fit in a chunk; an
    /// unvalidated one's may saturate, never wrap.
    pub fn sample_bytes(&self) -> usize {
        checked_bytes(&self.sample_shape, self.sample_dtype.size_bytes()).unwrap_or(usize::MAX)
    }

    /// Bytes one sample takes in a decoded chunk: a label and its features, or a token.
    pub fn record_bytes(&self) -> usize {
        if self.is_text() {
            1
        } else {
            self.sample_bytes().saturating_add(1)
        }
    }

    pub fn is_text(&self) -> bool {
        self.vocabulary.is_some()
    }

    /// The values a decoded label (or token) may take.
    pub fn classes(&self) -> usize {
        self.vocabulary.as_ref().unwrap_or(&self.class_names).len()
    }

    pub fn chunks_of(&self, split: Split) -> Vec<&ChunkEntry> {
        self.chunks.iter().filter(|c| c.split == split).collect()
    }

    pub fn count(&self, split: Split) -> usize {
        self.counts.get(&split).copied().unwrap_or(0)
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let manifest: Manifest = serde_json::from_str(text).map_err(|e| e.to_string())?;
        manifest.validate()?;
        Ok(manifest)
    }

    /// Rejects manifests whose figures disagree with each other, so a bad manifest fails
    /// at open time rather than as a confusing error halfway through an epoch.
    pub fn validate(&self) -> Result<(), String> {
        if self.format != FORMAT_NAME {
            return Err(format!("format is '{}', expected '{FORMAT_NAME}'", self.format));
        }
        if self.format_version != FORMAT_VERSION {
            return Err(format!(
                "format_version {} is not supported (this build reads {FORMAT_VERSION})",
                self.format_version
            ));
        }
        if self.sample_shape.is_empty() || self.sample_shape.contains(&0) {
            return Err(format!(
                "sample_shape {:?} must be non-empty with no zero dimension",
                self.sample_shape
            ));
        }
        let what = if self.is_text() {
            "vocabulary symbols"
        } else {
            "class names"
        };
        if self.classes() == 0 || self.classes() > 256 {
            return Err(format!("{} {what}: expected 1 to 256", self.classes()));
        }
        if checked_bytes(&self.sample_shape, self.sample_dtype.size_bytes())
            .is_none_or(|b| b >= MAX_CHUNK_BYTES)
        {
            return Err(format!(
                "sample_shape {:?} gives samples of more than {MAX_CHUNK_BYTES} bytes, the largest chunk",
                self.sample_shape
            ));
        }
        if self.is_text() && self.sample_shape != [1] {
            return Err(format!(
                "a text dataset's sample_shape is [1] (one token), not {:?}",
                self.sample_shape
            ));
        }
        let record = self.record_bytes();
        let mut per_split: BTreeMap<Split, usize> = BTreeMap::new();
        let mut files = std::collections::HashSet::new();
        for chunk in &self.chunks {
            if chunk.file.is_empty() || chunk.file.contains('/') || chunk.file.contains("..") {
                return Err(format!(
                    "chunk file name '{}' must be a plain file name",
                    chunk.file
                ));
            }
            if !files.insert(chunk.file.as_str()) {
                return Err(format!("chunk file {} is listed twice", chunk.file));
            }
            if chunk.samples == 0 {
                return Err(format!("chunk {} holds no samples", chunk.file));
            }
            if chunk.raw_bytes > MAX_CHUNK_BYTES || chunk.compressed_bytes > MAX_CHUNK_BYTES {
                return Err(format!(
                    "chunk {}: {} bytes decoded, {} compressed; at most {MAX_CHUNK_BYTES} each",
                    chunk.file, chunk.raw_bytes, chunk.compressed_bytes
                ));
            }
            if chunk.samples.checked_mul(record) != Some(chunk.raw_bytes) {
                return Err(format!(
                    "chunk {}: raw_bytes {} != {} samples x {record} bytes",
                    chunk.file, chunk.raw_bytes, chunk.samples
                ));
            }
            if chunk.sha256.len() != 64 || !chunk.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!(
                    "chunk {}: sha256 '{}' is not 64 hex digits",
                    chunk.file, chunk.sha256
                ));
            }
            // Each chunk's samples are below MAX_CHUNK_BYTES, so only their sum can
            // overflow.
            let sum = per_split.entry(chunk.split).or_default();
            *sum = sum
                .checked_add(chunk.samples)
                .ok_or_else(|| format!("split {}: more samples than a count holds", chunk.split))?;
        }
        for (split, &count) in &self.counts {
            let in_chunks = per_split.get(split).copied().unwrap_or(0);
            if in_chunks != count {
                return Err(format!(
                    "split {split}: counts says {count} samples, chunks hold {in_chunks}"
                ));
            }
        }
        if let Some(split) = per_split.keys().find(|s| !self.counts.contains_key(s)) {
            return Err(format!("chunks of split {split} are not listed in counts"));
        }
        Ok(())
    }
}

/// Joins a dataset location (URL or path, with or without a trailing `manifest.json`) and
/// a file name inside it.
pub fn join_location(base: &str, file: &str) -> String {
    let base = base.strip_suffix(MANIFEST_FILE).unwrap_or(base);
    let base = base.trim_end_matches('/');
    if base.is_empty() {
        file.to_string()
    } else {
        format!("{base}/{file}")
    }
}
