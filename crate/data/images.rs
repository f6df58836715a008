//! A folder of images, one subfolder per class, into a dataset the MLP and the CNN train on:
//! PNG and JPEG decoded by the `image` crate, made grey and resized, split into train and
//! test by a seeded fraction of each class. A file that does not decode is skipped and
//! counted, never a crash: a folder of real photos always has a few.

use std::path::{Path, PathBuf};

use image::imageops::FilterType;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use super::chunk::sha256_hex;
use super::error::DataError;
use super::manifest::{Manifest, SourceFile, Split};
use super::writer::{DatasetDescription, DatasetWriter, WriterOptions};

/// Labels are one byte in a chunk.
const MAX_CLASSES: usize = 256;
/// A side the CNN's pools can halve a few times and a chunk still holds in one piece.
const MAX_SIDE: u32 = 1024;

/// How the images are made samples.
#[derive(Clone, Copy, Debug)]
pub struct ImageOptions {
    pub width: u32,
    pub height: u32,
    /// The share of each class that goes to the test split, in [0, 1).
    pub test_fraction: f64,
    pub seed: u64,
}

impl Default for ImageOptions {
    fn default() -> Self {
        ImageOptions {
            width: 28,
            height: 28,
            test_fraction: 0.2,
            seed: 0,
        }
    }
}

/// A file left out, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Skipped {
    pub path: PathBuf,
    pub why: String,
}

/// What an import found besides the dataset.
#[derive(Debug, Default)]
pub struct ImageReport {
    /// Each class kept and its images read (train + test).
    pub classes: Vec<(String, usize)>,
    /// Subfolders without one readable image: no class.
    pub empty_classes: Vec<String>,
    pub skipped: Vec<Skipped>,
}

fn is_image(path: &Path) -> bool {
    let extension = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    matches!(extension.to_ascii_lowercase().as_str(), "png" | "jpg" | "jpeg")
}

/// Every file under `dir`, in name order.
fn files_under(dir: &Path) -> Result<Vec<PathBuf>, DataError> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(folder) = pending.pop() {
        for entry in std::fs::read_dir(&folder).map_err(|e| DataError::io(&folder, e))? {
            let path = entry.map_err(|e| DataError::io(&folder, e))?.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// The class subfolders of `dir`, in name order.
fn class_folders(dir: &Path) -> Result<Vec<(String, PathBuf)>, DataError> {
    let mut classes = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| DataError::io(dir, e))? {
        let path = entry.map_err(|e| DataError::io(dir, e))?.path();
        if path.is_dir() {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            classes.push((name, path));
        }
    }
    classes.sort();
    if classes.is_empty() {
        return Err(DataError::Import(format!(
            "{} has no subfolders: put each class's images in a folder of its own, named after the class",
            dir.display()
        )));
    }
    Ok(classes)
}

/// One image as `width x height` grey bytes.
fn sample(bytes: &[u8], options: &ImageOptions) -> Result<Vec<u8>, String> {
    let image = image::ImageReader::new(std::io::Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| e.to_string())?
        .decode()
        .map_err(|e| e.to_string())?;
    let grey = image.to_luma8();
    let resized = image::imageops::resize(&grey, options.width, options.height, FilterType::Triangle);
    Ok(resized.into_raw())
}

/// One class's readable images, each with its path and sha256, in name order.
type Decoded = Vec<(PathBuf, String, Vec<u8>)>;

fn read_class(folder: &Path, options: &ImageOptions, report: &mut ImageReport) -> Result<Decoded, DataError> {
    let mut decoded = Vec::new();
    for path in files_under(folder)? {
        let skip = |why: String| Skipped {
            path: path.clone(),
            why,
        };
        if !is_image(&path) {
            report.skipped.push(skip("not a .png, .jpg or .jpeg file".into()));
            continue;
        }
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) => {
                report.skipped.push(skip(error.to_string()));
                continue;
            }
        };
        match sample(&bytes, options) {
            Ok(pixels) => decoded.push((path, sha256_hex(&bytes), pixels)),
            Err(why) => report.skipped.push(skip(why)),
        }
    }
    Ok(decoded)
}

fn validate(options: &ImageOptions) -> Result<(), DataError> {
    let sides = 1..=MAX_SIDE;
    if !sides.contains(&options.width) || !sides.contains(&options.height) {
        return Err(DataError::InvalidOption(format!(
            "the image size must be 1 to {MAX_SIDE} pixels a side, not {}x{}",
            options.width, options.height
        )));
    }
    if !(0.0..1.0).contains(&options.test_fraction) {
        return Err(DataError::InvalidOption(format!(
            "the test fraction must be at least 0 and below 1, not {}",
            options.test_fraction
        )));
    }
    Ok(())
}

/// Imports the images under `dir` (one subfolder per class) into `out_dir` as `name`.
/// Nothing is left behind on an error.
pub fn import_images(
    dir: &Path,
    name: &str,
    out_dir: &Path,
    options: ImageOptions,
    writer_options: WriterOptions,
) -> Result<(Manifest, ImageReport), DataError> {
    validate(&options)?;
    let mut report = ImageReport::default();
    let mut classes = Vec::new();
    for (class, folder) in class_folders(dir)? {
        let decoded = read_class(&folder, &options, &mut report)?;
        if decoded.is_empty() {
            report.empty_classes.push(class);
        } else {
            classes.push((class, decoded));
        }
    }
    if classes.is_empty() {
        return Err(DataError::Import(format!(
            "{} holds no readable PNG or JPEG image ({} files skipped)",
            dir.display(),
            report.skipped.len()
        )));
    }
    if classes.len() > MAX_CLASSES {
        return Err(DataError::Import(format!(
            "{} classes; a dataset holds at most {MAX_CLASSES}",
            classes.len()
        )));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(options.seed);
    let (mut train, mut test) = (Vec::new(), Vec::new());
    // What was read, in a digest: the sources of a folder of thousands of files.
    let mut listing = String::new();
    for (label, (class, mut decoded)) in classes.into_iter().enumerate() {
        report.classes.push((class, decoded.len()));
        for (path, sha, _) in &decoded {
            let relative = path.strip_prefix(dir).unwrap_or(path);
            listing.push_str(&format!("{}\t{sha}\n", relative.display()));
        }
        // Each class split by the same fraction, so that the test split has every class.
        decoded.shuffle(&mut rng);
        let test_count = (decoded.len() as f64 * options.test_fraction).round() as usize;
        for (index, (_, _, pixels)) in decoded.into_iter().enumerate() {
            let split = if index < test_count { &mut test } else { &mut train };
            split.push((label as u8, pixels));
        }
    }
    // Class by class, a chunk would hold one class: the samples are shuffled before writing.
    train.shuffle(&mut rng);
    test.shuffle(&mut rng);
    let description = DatasetDescription {
        name: name.to_string(),
        version: format!("seed-{}-test-{}", options.seed, options.test_fraction),
        sample_shape: vec![options.height as usize, options.width as usize],
        class_names: report.classes.iter().map(|(class, _)| class.clone()).collect(),
        sources: vec![SourceFile {
            file: format!(
                "{} (the sha256 of each image's path and sha256, one a line)",
                dir.display()
            ),
            sha256: sha256_hex(listing.as_bytes()),
        }],
        vocabulary: None,
    };
    let mut writer = DatasetWriter::create(out_dir, description, writer_options)?;
    for (split, samples) in [(Split::Train, &train), (Split::Test, &test)] {
        for (label, pixels) in samples {
            writer.push(split, *label, pixels)?;
        }
    }
    Ok((writer.finish()?, report))
}
