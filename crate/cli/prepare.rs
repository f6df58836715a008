//! `headroom prepare`: IDX files, text, a folder of images or generated images into compressed, checksummed
//! chunks and their manifest.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use clap::builder::TypedValueParser;

use crate::data::images::{self, ImageOptions};
use crate::data::import::{self, DEFAULT_IDX_SOURCE, Provenance};
use crate::data::text::DEFAULT_CHUNK_TOKENS;
use crate::data::writer::{DEFAULT_CHUNK_SAMPLES, WriterOptions};
use crate::data::{Codec, Manifest};

#[derive(Args)]
pub struct PrepareArgs {
    /// Folder holding {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz].
    #[arg(long, default_value = DEFAULT_IDX_SOURCE)]
    source: PathBuf,
    /// Dataset name; also picks class names (fashion-mnist, mnist).
    #[arg(long)]
    name: Option<String>,
    /// Datasets are written to <out-root>/<name>/.
    #[arg(long, default_value = "static/data")]
    out_root: PathBuf,
    /// Samples per chunk (tokens, for text) [default: 4096 images, 65536 tokens].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..).map(|v| v as usize))]
    chunk_samples: Option<usize>,
    #[arg(long, default_value = "deflate")]
    codec: Codec,
    /// Generate N training samples (and N/5 test samples) instead of importing.
    #[arg(long, value_name = "N")]
    synthetic: Option<usize>,
    /// Seed of the generated data.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// UTF-8 text files to prepare as one character-level corpus (needs --name); the last
    /// 10% of the text is the test split.
    #[arg(long, num_args = 1.., value_name = "FILE", conflicts_with_all = ["synthetic", "source"])]
    text: Vec<PathBuf>,
    /// A folder of PNG and JPEG images, one subfolder per class (named after it), to
    /// prepare for the MLP and the CNN: made grey, resized to --image-size, split by
    /// --test-fraction of each class (drawn by --seed). Files that do not decode are skipped
    /// and counted. The name defaults to the folder's.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["synthetic", "source", "text"])]
    images: Option<PathBuf>,
    /// With --images: WIDTHxHEIGHT, or one number for a square.
    #[arg(long, default_value = "28x28", value_parser = parse_size)]
    image_size: (u32, u32),
    /// With --images: the share of each class that goes to the test split.
    #[arg(long, default_value_t = 0.2)]
    test_fraction: f64,
}

fn parse_size(text: &str) -> Result<(u32, u32), String> {
    let number = |s: &str| {
        s.trim()
            .parse::<u32>()
            .map_err(|_| format!("`{text}` is not WIDTHxHEIGHT (28x28) or one number"))
    };
    match text.split_once(['x', 'X']) {
        Some((width, height)) => Ok((number(width)?, number(height)?)),
        None => number(text).map(|side| (side, side)),
    }
}

/// `--images`: the dataset, and what was skipped said on the way.
fn prepare_images(
    dir: &std::path::Path,
    args: &PrepareArgs,
    options: WriterOptions,
) -> anyhow::Result<Manifest> {
    let name = match &args.name {
        Some(name) => name.clone(),
        None => dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .context("--images names no folder: pass --name")?,
    };
    let (width, height) = args.image_size;
    let image_options = ImageOptions {
        width,
        height,
        test_fraction: args.test_fraction,
        seed: args.seed,
    };
    let (manifest, report) =
        images::import_images(dir, &name, &args.out_root.join(&name), image_options, options)
            .with_context(|| format!("preparing the images in {}", dir.display()))?;
    let classes: Vec<String> = report.classes.iter().map(|(c, n)| format!("{c} {n}")).collect();
    println!("{} classes: {}", report.classes.len(), classes.join(", "));
    for class in &report.empty_classes {
        println!("left out the class {class}: no readable image in its folder");
    }
    println!("skipped {} files", report.skipped.len());
    for skipped in report.skipped.iter().take(SKIPPED_SHOWN) {
        println!("  {}: {}", skipped.path.display(), skipped.why);
    }
    if report.skipped.len() > SKIPPED_SHOWN {
        println!("  and {} more", report.skipped.len() - SKIPPED_SHOWN);
    }
    Ok(manifest)
}

/// Skipped files named one by one; the rest counted.
const SKIPPED_SHOWN: usize = 10;

pub fn run(args: PrepareArgs) -> anyhow::Result<()> {
    let text = !args.text.is_empty();
    let default_chunk = if text {
        DEFAULT_CHUNK_TOKENS
    } else {
        DEFAULT_CHUNK_SAMPLES
    };
    let options = WriterOptions {
        chunk_samples: args.chunk_samples.unwrap_or(default_chunk),
        codec: args.codec,
    };
    let manifest = match args.synthetic {
        None if args.images.is_some() => {
            let dir = args.images.clone().expect("matched above");
            prepare_images(&dir, &args, options)?
        }
        None if text => {
            let name = args
                .name
                .context("--text needs --name: the dataset's folder and title")?;
            import::import_text(&args.text, &name, &args.out_root.join(&name), options)
                .with_context(|| format!("preparing the text of {} file(s)", args.text.len()))?
        }
        Some(samples) => {
            let name = args.name.unwrap_or_else(|| "synthetic".into());
            import::generate_synthetic(samples, args.seed, &args.out_root.join(&name), options)?
        }
        None => {
            let name = args.name.unwrap_or_else(|| "fashion-mnist".into());
            import::import_idx(&args.source, &name, &args.out_root.join(&name), options).with_context(|| {
                format!(
                    "importing {} (on Debian: apt-get install dataset-fashion-mnist; elsewhere download the four \
                     Fashion-MNIST or MNIST IDX files and pass their folder with --source)",
                    args.source.display()
                )
            })?
        }
    };
    write_dataset_index(&args.out_root)?;
    for source in &manifest.sources {
        let verdict = match import::provenance(source) {
            Provenance::Known => "matches the published file",
            Provenance::Unknown if text || args.images.is_some() => "recorded in the manifest",
            Provenance::Unknown => "not a file this build knows; check it yourself",
        };
        println!("source {} sha256 {} ({verdict})", source.file, source.sha256);
    }
    let compressed: usize = manifest.chunks.iter().map(|c| c.compressed_bytes).sum();
    let raw: usize = manifest.chunks.iter().map(|c| c.raw_bytes).sum();
    let unit = if text { "tokens" } else { "samples" };
    println!(
        "wrote {} to {}: {} chunks, {} train + {} test {unit}, {} compressed from {} ({:.1}%, {})",
        manifest.name,
        args.out_root.join(&manifest.name).display(),
        manifest.chunks.len(),
        manifest.count(crate::data::Split::Train),
        manifest.count(crate::data::Split::Test),
        crate::units::format_bytes(compressed),
        crate::units::format_bytes(raw),
        100.0 * compressed as f64 / raw.max(1) as f64,
        args.codec.name(),
    );
    Ok(())
}

/// `<out-root>/index.json` lists the datasets there, so the page can offer them.
fn write_dataset_index(out_root: &std::path::Path) -> anyhow::Result<()> {
    let mut datasets = Vec::new();
    for entry in std::fs::read_dir(out_root)? {
        let dir = entry?.path();
        let Ok(text) = std::fs::read_to_string(dir.join(crate::data::manifest::MANIFEST_FILE)) else {
            continue;
        };
        let Ok(manifest) = crate::data::Manifest::parse(&text) else {
            continue;
        };
        let path = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        datasets.push(serde_json::json!({
            "path": path,
            "name": manifest.name,
            "train": manifest.count(crate::data::Split::Train),
            "test": manifest.count(crate::data::Split::Test),
            "kind": if manifest.is_text() { "text" } else { "images" },
        }));
    }
    datasets.sort_by_key(|d| d["path"].as_str().map(str::to_string));
    let index = serde_json::json!({ "datasets": datasets });
    std::fs::write(out_root.join("index.json"), serde_json::to_string_pretty(&index)?)?;
    Ok(())
}
