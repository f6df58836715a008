//! Batches of bytes from the data pipeline, as tensors on the training device.

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::prelude::*;
use burn::tensor::{DType, TensorData, f16};

use super::config::Precision;
use super::error::TrainError;
use crate::data::Batch;
use crate::model::{InputKind, InputShape, Model, ModelInput};

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

/// Every float parameter, flattened, in the module's visiting order.
struct Collect(Vec<Tensor<1>>);

impl ModuleVisitor for Collect {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let value = param.val();
        let elements = value.shape().num_elements();
        self.0.push(value.reshape([elements]));
    }
}

/// Replaces every float parameter with the next of `values` on the CPU, in the same order,
/// keeping its id.
struct Fill(std::vec::IntoIter<TensorData>, Device);

impl ModuleMapper for Fill {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let values = self.0.next().expect("the same model has the same parameters");
        param.map(|tensor| Tensor::<1>::from_data(values, &self.1).reshape(tensor.shape()))
    }
}

/// A copy of the model on burn's CPU backend (the only one on every target, the browser's
/// included), read back asynchronously, as a browser's GPU requires. Parameters keep their
/// ids and dtypes.
pub async fn cpu_copy(model: &Model) -> Result<Model, TrainError> {
    let mut collect = Collect(Vec::new());
    model.visit(&mut collect);
    let mut values = Vec::with_capacity(collect.0.len());
    for tensor in collect.0 {
        let data = tensor
            .into_data_async()
            .await
            .map_err(|e| TrainError::Readback(format!("{e:?}")))?;
        values.push(data);
    }
    Ok(model.clone().map(&mut Fill(values.into_iter(), Device::flex())))
}
