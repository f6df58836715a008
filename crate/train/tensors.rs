//! Batches of bytes from the data pipeline, as tensors on the training device.

use burn::prelude::*;
use burn::tensor::{DType, TensorData, f16};

use super::config::Precision;
use crate::data::Batch;
use crate::model::{InputKind, InputShape, ModelInput};

/// Pixels scaled to [0, 1], shaped [samples, 1, height, width], uploaded in `precision`
/// (an f16 batch never exists as f32 on the device). The dtype is named at creation:
/// `from_data` alone converts to the device's default float type, f32.
pub fn images(features: &[u8], input: &InputShape, precision: Precision, device: &Device) -> Tensor<4> {
    let shape = [features.len() / input.pixels(), 1, input.height, input.width];
    let scaled = features.iter().map(|&p| f32::from(p) / 255.0);
    let data = match precision {
        Precision::F32 => TensorData::new(scaled.collect::<Vec<f32>>(), shape),
        Precision::F16 | Precision::F16Pure => {
            TensorData::new(scaled.map(f16::from_f32).collect::<Vec<f16>>(), shape)
        }
    };
    Tensor::<4>::from_data(data, (device, DType::from(precision.dtype())))
}

pub fn targets(labels: &[u8], device: &Device) -> Tensor<1, Int> {
    let labels: Vec<i64> = labels.iter().map(|&l| i64::from(l)).collect();
    let samples = labels.len();
    Tensor::<1, Int>::from_data(TensorData::new(labels, [samples]), device)
}

/// Samples `range` of `batch` as the model takes them, and their targets: images and
/// their labels, or windows of text, whose targets are their tokens one position on
/// (one per position, row-major: [samples * context]).
pub fn micro_batch(
    batch: &Batch,
    range: std::ops::Range<usize>,
    input: &InputShape,
    precision: Precision,
    device: &Device,
) -> (impl Fn() -> ModelInput, Tensor<1, Int>) {
    let features = &batch.features[range.start * batch.sample_bytes..range.end * batch.sample_bytes];
    let window = batch.sample_bytes;
    let (input, precision, device) = (*input, precision, device.clone());
    let targets = match input.kind {
        InputKind::Images => targets(&batch.labels[range.clone()], &device),
        InputKind::Tokens => {
            let next: Vec<u8> = features
                .chunks_exact(window)
                .flat_map(|w| w[1..].iter().copied())
                .collect();
            targets(&next, &device)
        }
    };
    let upload = move || match input.kind {
        InputKind::Images => ModelInput::Images(images(features, &input, precision, &device)),
        InputKind::Tokens => ModelInput::Tokens(tokens(features, window, &device)),
    };
    (upload, targets)
}

/// Each window's first `window - 1` tokens, shaped [windows, window - 1].
fn tokens(windows: &[u8], window: usize, device: &Device) -> Tensor<2, Int> {
    let ids: Vec<i64> = windows
        .chunks_exact(window)
        .flat_map(|w| w[..window - 1].iter().map(|&t| i64::from(t)))
        .collect();
    let rows = windows.len() / window;
    Tensor::<2, Int>::from_data(TensorData::new(ids, [rows, window - 1]), device)
}
