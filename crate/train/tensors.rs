//! Batches of bytes from the data pipeline, as tensors on the training device.

use burn::prelude::*;
use burn::tensor::{DType, TensorData, f16};

use super::config::Precision;
use crate::model::InputShape;

/// Pixels scaled to [0, 1], shaped [samples, 1, height, width], uploaded in `precision`
/// (an f16 batch never exists as f32 on the device). The dtype is named at creation:
/// `from_data` alone converts to the device's default float type, f32.
pub fn images(features: &[u8], input: &InputShape, precision: Precision, device: &Device) -> Tensor<4> {
    let shape = [features.len() / input.pixels(), 1, input.height, input.width];
    let scaled = features.iter().map(|&p| f32::from(p) / 255.0);
    let data = match precision {
        Precision::F32 => TensorData::new(scaled.collect::<Vec<f32>>(), shape),
        Precision::F16 => TensorData::new(scaled.map(f16::from_f32).collect::<Vec<f16>>(), shape),
    };
    Tensor::<4>::from_data(data, (device, DType::from(precision.dtype())))
}

pub fn targets(labels: &[u8], device: &Device) -> Tensor<1, Int> {
    let labels: Vec<i64> = labels.iter().map(|&l| i64::from(l)).collect();
    let samples = labels.len();
    Tensor::<1, Int>::from_data(TensorData::new(labels, [samples]), device)
}
