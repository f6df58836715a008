//! `headroom prepare --images` on a generated folder of PNG and JPEG files of three shapes,
//! with corrupt files, a file that is no image and an empty class: the readable ones become a
//! dataset the CNN learns from, the rest are counted.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::path::Path;

use common::{headroom, headroom_events};
use image::{ImageFormat, Rgb, RgbImage};

const CLASSES: [&str; 3] = ["circle", "square", "stripes"];
const PER_CLASS: u32 = 40;

/// A bright shape on a dark ground, of a size and tint that vary by `index`: a disc, a
/// square or horizontal stripes.
fn drawing(class: usize, index: u32) -> RgbImage {
    let (width, height) = (32 + index % 3 * 8, 32 + index % 4 * 6);
    let tint = [200 + (index % 5 * 10) as u8, 180, 255 - (index % 7 * 20) as u8];
    RgbImage::from_fn(width, height, |x, y| {
        let (u, v) = (x as f32 / width as f32 - 0.5, y as f32 / height as f32 - 0.5);
        let inside = match class {
            0 => u * u + v * v < 0.1,
            1 => u.abs() < 0.3 && v.abs() < 0.3,
            _ => (y * 6 / height) % 2 == 0,
        };
        if inside { Rgb(tint) } else { Rgb([20, 20, 30]) }
    })
}

fn write_folder(root: &Path) {
    for (class, name) in CLASSES.iter().enumerate() {
        let folder = root.join(name);
        std::fs::create_dir_all(&folder).unwrap();
        for index in 0..PER_CLASS {
            let (format, extension) = match index % 2 {
                0 => (ImageFormat::Png, "png"),
                _ => (ImageFormat::Jpeg, "JPG"),
            };
            drawing(class, index)
                .save_with_format(folder.join(format!("{index:03}.{extension}")), format)
                .unwrap();
        }
    }
    // Three files that must be skipped, and a class with nothing in it.
    let png = std::fs::read(root.join("circle/000.png")).unwrap();
    std::fs::write(root.join("circle/cut.png"), &png[..png.len() / 3]).unwrap();
    std::fs::write(root.join("square/noise.jpg"), [0x42u8; 500]).unwrap();
    std::fs::write(root.join("stripes/notes.txt"), "not an image").unwrap();
    std::fs::create_dir_all(root.join("empty")).unwrap();
}

/// `headroom prepare --images IMAGES --out-root OUT` with `flags`, as it ended.
fn prepare(images: &Path, out: &Path, flags: &[&str]) -> std::process::Output {
    let mut args = vec![
        "prepare",
        "--images",
        images.to_str().unwrap(),
        "--out-root",
        out.to_str().unwrap(),
    ];
    args.extend(flags);
    headroom(&args)
}

#[test]
fn a_folder_of_images_trains_the_cnn_and_its_bad_files_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let (images, out) = (dir.path().join("shapes"), dir.path().join("data"));
    write_folder(&images);
    let output = prepare(&images, &out, &["--image-size", "16", "--seed", "3"]);
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        said.contains("3 classes: circle 40, square 40, stripes 40"),
        "{said}"
    );
    assert!(said.contains("left out the class empty"), "{said}");
    assert!(said.contains("skipped 3 files"), "{said}");
    assert!(
        said.contains("cut.png") && said.contains("noise.jpg") && said.contains("notes.txt"),
        "{said}"
    );
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("shapes/manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["sample_shape"], serde_json::json!([16, 16]));
    assert_eq!(manifest["class_names"], serde_json::json!(CLASSES));
    // A fifth of each class: 8 of 40.
    assert_eq!(manifest["counts"], serde_json::json!({"train": 96, "test": 24}));

    let data = out.join("shapes");
    let events = headroom_events(&[
        "train",
        "--data",
        data.to_str().unwrap(),
        "--backend",
        "flex",
        "--model",
        "cnn",
        "--channels",
        "4,8",
        "--effective-batch",
        "16",
        "--steps",
        "60",
        "--lr",
        "0.01",
    ]);
    let losses: Vec<f64> = events
        .iter()
        .filter(|e| e["event"] == "step")
        .map(|e| e["loss"].as_f64().unwrap())
        .collect();
    let mean = |l: &[f64]| l.iter().sum::<f64>() / l.len() as f64;
    let (first, last) = (mean(&losses[..10]), mean(&losses[losses.len() - 10..]));
    // Three classes start at ln 3 = 1.10; the shapes are easy to tell apart.
    println!("{said}loss {first:.3} -> {last:.3}");
    assert!(last < 0.5 * first, "the loss went from {first:.3} to {last:.3}");
    let accuracy = events
        .iter()
        .rev()
        .find(|e| e["event"] == "eval")
        .and_then(|e| e["accuracy"].as_f64())
        .expect("an evaluation at the end");
    assert!(accuracy >= 0.9, "test accuracy {accuracy}");
}

#[test]
fn the_same_seed_prepares_the_same_dataset_and_bad_options_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("shapes");
    write_folder(&images);
    let manifest = |seed: &str, out: &str| {
        let out = dir.path().join(out);
        let output = prepare(&images, &out, &["--seed", seed, "--image-size", "12x10"]);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        std::fs::read_to_string(out.join("shapes/manifest.json")).unwrap()
    };
    let (a, b, c) = (manifest("1", "a"), manifest("1", "b"), manifest("2", "c"));
    assert_eq!(a, b);
    assert_ne!(a, c, "another seed draws another split");
    assert!(
        a.contains("\"sample_shape\": [\n    10,\n    12\n  ]") || a.contains("[10,12]"),
        "{a}"
    );
    for (flags, why) in [
        (vec!["--image-size", "0"], "1 to 1024 pixels a side"),
        (vec!["--image-size", "28y28"], "is not WIDTHxHEIGHT"),
        (vec!["--test-fraction", "1"], "below 1"),
    ] {
        let out = dir.path().join("refused");
        let output = prepare(&images, &out, &flags);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success() && stderr.contains(why), "{stderr}");
        assert!(!out.join("shapes").exists(), "nothing is left behind");
    }
    let output = headroom(&["prepare", "--images", images.join("empty").to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("has no subfolders"), "{stderr}");
}
