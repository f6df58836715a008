//! Writes a dataset (chunks, then the manifest) into a hidden folder that is renamed into
//! place when it is whole.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::chunk::sha256_hex;
use super::codec::Codec;
use super::error::DataError;
use super::manifest::{
    ChunkEntry, FORMAT_NAME, FORMAT_VERSION, MANIFEST_FILE, Manifest, SampleDtype, SourceFile, Split,
};

pub const DEFAULT_CHUNK_SAMPLES: usize = 4096;

#[derive(Clone, Copy, Debug)]
pub struct WriterOptions {
    pub chunk_samples: usize,
    pub codec: Codec,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            chunk_samples: DEFAULT_CHUNK_SAMPLES,
            codec: Codec::default(),
        }
    }
}

/// What a dataset is, before any sample is written.
pub struct DatasetDescription {
    pub name: String,
    pub version: String,
    pub sample_shape: Vec<usize>,
    pub class_names: Vec<String>,
    pub sources: Vec<SourceFile>,
    /// A text dataset's symbols (see [`Manifest::vocabulary`]).
    pub vocabulary: Option<Vec<String>>,
}

#[derive(Default)]
struct PendingChunk {
    labels: Vec<u8>,
    features: Vec<u8>,
    written: usize,
}

/// Chunks kept in memory: each file's name and bytes.
pub type MemoryChunks = Vec<(String, Vec<u8>)>;

/// Where the chunks go.
enum Sink {
    /// A hidden folder beside `final_dir`, renamed into place when whole.
    Folder {
        final_dir: PathBuf,
        partial_dir: PathBuf,
    },
    /// Kept as (file name, bytes): the page writes them into the browser's storage.
    Memory(MemoryChunks),
}

/// Writes a dataset into a hidden sibling folder and renames it into place on `finish`,
/// so a failed import never leaves a partial dataset where a reader would find it; or, for
/// the page, into memory ([`DatasetWriter::in_memory`]).
pub struct DatasetWriter {
    sink: Sink,
    manifest: Manifest,
    options: WriterOptions,
    pending: BTreeMap<Split, PendingChunk>,
    finished: bool,
}

impl DatasetWriter {
    pub fn create(
        out_dir: &Path,
        description: DatasetDescription,
        options: WriterOptions,
    ) -> Result<Self, DataError> {
        if options.chunk_samples == 0 {
            return Err(DataError::InvalidOption(
                "chunk size must be at least 1 sample".into(),
            ));
        }
        let name = out_dir.file_name().and_then(|n| n.to_str()).unwrap_or("dataset");
        let parent = out_dir.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(parent).map_err(|e| DataError::io(parent, e))?;
        let partial_dir = parent.join(format!(".{name}.partial-{}", std::process::id()));
        if partial_dir.exists() {
            std::fs::remove_dir_all(&partial_dir).map_err(|e| DataError::io(&partial_dir, e))?;
        }
        std::fs::create_dir(&partial_dir).map_err(|e| DataError::io(&partial_dir, e))?;
        let sink = Sink::Folder {
            final_dir: out_dir.to_path_buf(),
            partial_dir,
        };
        DatasetWriter::with_sink(sink, description, options)
    }

    /// A writer that keeps the chunks in memory ([`finish_in_memory`](Self::finish_in_memory)).
    pub fn in_memory(description: DatasetDescription, options: WriterOptions) -> Result<Self, DataError> {
        if options.chunk_samples == 0 {
            return Err(DataError::InvalidOption(
                "chunk size must be at least 1 sample".into(),
            ));
        }
        DatasetWriter::with_sink(Sink::Memory(Vec::new()), description, options)
    }

    fn with_sink(
        sink: Sink,
        description: DatasetDescription,
        options: WriterOptions,
    ) -> Result<Self, DataError> {
        let manifest = Manifest {
            format: FORMAT_NAME.into(),
            format_version: FORMAT_VERSION,
            name: description.name,
            version: description.version,
            sample_shape: description.sample_shape,
            sample_dtype: SampleDtype::U8,
            class_names: description.class_names,
            counts: BTreeMap::new(),
            chunk_samples: options.chunk_samples,
            sources: description.sources,
            chunks: Vec::new(),
            vocabulary: description.vocabulary,
        };
        Ok(DatasetWriter {
            sink,
            manifest,
            options,
            pending: BTreeMap::new(),
            finished: false,
        })
    }

    pub fn push(&mut self, split: Split, label: u8, features: &[u8]) -> Result<(), DataError> {
        let sample_bytes = self.manifest.sample_bytes();
        if features.len() != sample_bytes {
            return Err(DataError::Import(format!(
                "sample has {} bytes, expected {sample_bytes}",
                features.len()
            )));
        }
        if self.manifest.is_text() {
            return Err(DataError::Import(
                "a text dataset takes tokens, not labelled samples".into(),
            ));
        }
        if usize::from(label) >= self.manifest.class_names.len() {
            return Err(DataError::Import(format!(
                "label {label} is outside the {} classes",
                self.manifest.class_names.len()
            )));
        }
        let pending = self.pending.entry(split).or_default();
        pending.labels.push(label);
        pending.features.extend_from_slice(features);
        if pending.labels.len() == self.options.chunk_samples {
            self.flush(split)?;
        }
        Ok(())
    }

    /// Appends tokens to a text dataset's `split`, cutting chunks as they fill.
    pub fn push_tokens(&mut self, split: Split, tokens: &[u8]) -> Result<(), DataError> {
        let symbols = self.manifest.classes();
        if !self.manifest.is_text() {
            return Err(DataError::Import(
                "an image dataset takes labelled samples, not tokens".into(),
            ));
        }
        if let Some(token) = tokens.iter().find(|&&t| usize::from(t) >= symbols) {
            return Err(DataError::Import(format!(
                "token {token} is outside the vocabulary of {symbols} symbols"
            )));
        }
        for &token in tokens {
            let pending = self.pending.entry(split).or_default();
            pending.labels.push(token);
            if pending.labels.len() == self.options.chunk_samples {
                self.flush(split)?;
            }
        }
        Ok(())
    }

    fn flush(&mut self, split: Split) -> Result<(), DataError> {
        let pending = self.pending.entry(split).or_default();
        if pending.labels.is_empty() {
            return Ok(());
        }
        let mut raw = std::mem::take(&mut pending.labels);
        let samples = raw.len();
        raw.append(&mut pending.features);
        let compressed = self.options.codec.compress(&raw);
        let file = format!("{split}-{:05}.{}", pending.written, self.options.codec.name());
        pending.written += 1;
        match &mut self.sink {
            Sink::Folder { partial_dir, .. } => {
                let path = partial_dir.join(&file);
                std::fs::write(&path, &compressed).map_err(|e| DataError::io(&path, e))?;
            }
            Sink::Memory(chunks) => chunks.push((file.clone(), compressed.clone())),
        }
        *self.manifest.counts.entry(split).or_default() += samples;
        self.manifest.chunks.push(ChunkEntry {
            file,
            split,
            samples,
            compressed_bytes: compressed.len(),
            raw_bytes: raw.len(),
            sha256: sha256_hex(&compressed),
            codec: self.options.codec,
        });
        Ok(())
    }

    /// Writes the manifest and moves the dataset into place, replacing an older one.
    pub fn finish(mut self) -> Result<Manifest, DataError> {
        self.flush_all()?;
        let Sink::Folder {
            final_dir,
            partial_dir,
        } = &self.sink
        else {
            return Err(DataError::Import(
                "an in-memory dataset ends with finish_in_memory".into(),
            ));
        };
        let (final_dir, partial_dir) = (final_dir.clone(), partial_dir.clone());
        let manifest_path = partial_dir.join(MANIFEST_FILE);
        let text = serde_json::to_string_pretty(&self.manifest).expect("a manifest always serializes");
        std::fs::write(&manifest_path, text).map_err(|e| DataError::io(&manifest_path, e))?;
        let retired = final_dir.with_extension(format!("retired-{}", std::process::id()));
        let replacing = final_dir.exists();
        if replacing {
            std::fs::rename(&final_dir, &retired).map_err(|e| DataError::io(&final_dir, e))?;
        }
        std::fs::rename(&partial_dir, &final_dir).map_err(|e| DataError::io(&final_dir, e))?;
        self.finished = true;
        if replacing {
            std::fs::remove_dir_all(&retired).map_err(|e| DataError::io(&retired, e))?;
        }
        Ok(self.manifest.clone())
    }
}

impl DatasetWriter {
    fn flush_all(&mut self) -> Result<(), DataError> {
        for split in [Split::Train, Split::Test] {
            self.flush(split)?;
        }
        self.manifest.validate().map_err(DataError::Import)
    }

    /// The manifest and every chunk (file name, bytes) of an [`in_memory`](Self::in_memory)
    /// writer.
    pub fn finish_in_memory(mut self) -> Result<(Manifest, MemoryChunks), DataError> {
        self.flush_all()?;
        self.finished = true;
        match std::mem::replace(&mut self.sink, Sink::Memory(Vec::new())) {
            Sink::Memory(chunks) => Ok((self.manifest.clone(), chunks)),
            Sink::Folder { .. } => Err(DataError::Import("a dataset in a folder ends with finish".into())),
        }
    }
}

impl Drop for DatasetWriter {
    fn drop(&mut self) {
        if let (false, Sink::Folder { partial_dir, .. }) = (self.finished, &self.sink) {
            let _ = std::fs::remove_dir_all(partial_dir);
        }
    }
}
