//! Batches of bytes from the data pipeline, as tensors on the training device.

use burn::prelude::*;
use burn::tensor::TensorData;

use crate::model::InputShape;

/// Pixels scaled to [0, 1], shaped [samples, 1, height, width].
pub fn images(features: &[u8], input: &InputShape, device: &Device) -> Tensor<4> {
    let samples = features.len() / input.pixels();
    let scaled: Vec<f32> = features.iter().map(|&p| f32::from(p) / 255.0).collect();
    Tensor::<4>::from_data(
        TensorData::new(scaled, [samples, 1, input.height, input.width]),
        device,
    )
}

pub fn targets(labels: &[u8], device: &Device) -> Tensor<1, Int> {
    let labels: Vec<i64> = labels.iter().map(|&l| i64::from(l)).collect();
    let samples = labels.len();
    Tensor::<1, Int>::from_data(TensorData::new(labels, [samples]), device)
}
