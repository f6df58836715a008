//! A model's parameters in and out as safetensors, under the names and layouts of the
//! PyTorch definitions of the same networks: web/compare/pytorch_peer.py's MLP and CNN
//! (`nn.Sequential`, so the names are positions) and gpt_peer.py's GPT. So
//! `model.load_state_dict(safetensors.torch.load_file(path))` takes an exported file as it
//! is, and a file saved from those definitions starts a run (`headroom train --init`).
//!
//! burn-store walks the module and converts layouts both ways (a Linear's weight is
//! [in, out] in burn and [out, in] in PyTorch; a LayerNorm's gamma and beta are PyTorch's
//! weight and bias). What it cannot do is the one place the networks differ in shape: the
//! GPT keeps the attention's query, key and value projections apart, where gpt_peer.py has
//! one `qkv` Linear of three times the width. Their rows are stacked here on export and split
//! on import.

use std::collections::HashMap;

use burn::store::burn_pack::Tensor as PackTensor;
use burn::store::{BurnToPyTorchAdapter, ModuleSnapshot, PyTorchToBurnAdapter, bridge};
use burn::tensor::{DType, TensorData};
use safetensors::{Dtype, SafeTensors, tensor::TensorView};

use super::error::TrainError;
use super::tensors::cpu_copy;
use crate::model::{InputShape, Model, ModelConfig};

/// The metadata key holding the model's config as JSON (what `headroom train --model`
/// builds), beside `format: pt`, which Hugging Face's loaders look for.
pub const MODEL_KEY: &str = "headroom.model";
/// The metadata key holding the input shape as JSON (pixels and classes, or the vocabulary
/// size for text).
pub const INPUT_KEY: &str = "headroom.input";

/// One tensor of the PyTorch state dict and the burn tensors whose rows it stacks (one but
/// for the GPT's `qkv`), by the names burn-store collects them under.
struct Slot {
    name: String,
    shape: Vec<usize>,
    parts: Vec<(String, Vec<usize>)>,
}

fn unusable(why: impl std::fmt::Display) -> TrainError {
    TrainError::Weights(why.to_string())
}

/// The PyTorch name of the tensor burn-store collects as `collected` (a module path with
/// PyTorch's parameter names), for `config`'s network.
fn torch_name(config: &ModelConfig, collected: &str) -> String {
    let (path, param) = collected.rsplit_once('.').unwrap_or(("", collected));
    let parts: Vec<&str> = path.split('.').collect();
    let index = |i: usize| parts.get(i).and_then(|p| p.parse::<usize>().ok());
    match (config, parts.as_slice()) {
        // nn.Sequential(Flatten, Linear, ReLU, Linear, ReLU, ..., Linear).
        (ModelConfig::Mlp { .. }, ["layers", _]) => format!("{}.{param}", 1 + 2 * index(1).unwrap_or(0)),
        // nn.Sequential(Conv2d, ReLU, MaxPool2d, ..., Flatten, Linear).
        (ModelConfig::Cnn { .. }, ["blocks", _, "conv"]) => format!("{}.{param}", 3 * index(1).unwrap_or(0)),
        (ModelConfig::Cnn { channels }, ["head"]) => format!("{}.{param}", 3 * channels.len() + 1),
        (ModelConfig::Gpt(_), ["blocks", block, "attention", "query" | "key" | "value"]) => {
            format!("blocks.{block}.qkv.{param}")
        }
        (ModelConfig::Gpt(_), ["blocks", block, "attention", "output"]) => {
            format!("blocks.{block}.output.{param}")
        }
        _ => collected.to_string(),
    }
}

/// The state dict `collected` (a module's tensors, as burn-store collects them with PyTorch's
/// layouts) maps to, in the module's order, with PyTorch's shapes; and for each collected
/// tensor, the slot it fills.
fn slots(collected: &[PackTensor], config: &ModelConfig) -> (Vec<Slot>, Vec<usize>) {
    let mut slots: Vec<Slot> = Vec::new();
    let mut owners = Vec::with_capacity(collected.len());
    for tensor in collected {
        let name = torch_name(config, &tensor.name);
        let shape = tensor.shape.as_slice().to_vec();
        let index = match slots.iter().position(|slot| slot.name == name) {
            // The GPT's query, key and value, in that order: qkv's rows.
            Some(index) => {
                slots[index].shape[0] += shape[0];
                index
            }
            None => {
                slots.push(Slot {
                    name,
                    shape: shape.clone(),
                    parts: Vec::new(),
                });
                slots.len() - 1
            }
        };
        slots[index].parts.push((tensor.name.clone(), shape));
        owners.push(index);
    }
    (slots, owners)
}

/// The module's tensors with PyTorch's layouts. Collecting reads no values: each tensor's
/// bytes are produced only when asked for.
fn collect(model: &Model) -> Vec<PackTensor> {
    model.collect(None, Some(Box::new(BurnToPyTorchAdapter)), true)
}

/// The model's parameters as a safetensors file in f32 (f16 parameters are widened, which is
/// exact), `config` and `input` in its metadata beside `extra` entries (a text dataset's
/// vocabulary, the step).
pub async fn export(
    model: &Model,
    config: &ModelConfig,
    input: &InputShape,
    extra: HashMap<String, String>,
) -> Result<Vec<u8>, TrainError> {
    // On the CPU: collecting reads each tensor back synchronously, which a browser's GPU
    // cannot do.
    let cpu = cpu_copy(model).await?;
    let collected = collect(&cpu);
    let (slots, owners) = slots(&collected, config);
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = slots
        .into_iter()
        .map(|slot| (slot.name, slot.shape, Vec::new()))
        .collect();
    // Parts arrive in the module's order, which is the order of a slot's rows.
    for (tensor, slot) in collected.into_iter().zip(owners) {
        let data = bridge::into_data(tensor).map_err(unusable)?.convert::<f32>();
        tensors[slot].2.extend_from_slice(data.as_bytes());
    }
    let mut metadata = extra;
    metadata.insert("format".into(), "pt".into());
    metadata.insert(
        MODEL_KEY.into(),
        serde_json::to_string(config).expect("a config serializes"),
    );
    metadata.insert(
        INPUT_KEY.into(),
        serde_json::to_string(input).expect("a shape serializes"),
    );
    let views = tensors
        .iter()
        .map(|(name, shape, bytes)| Ok((name.as_str(), TensorView::new(Dtype::F32, shape.clone(), bytes)?)))
        .collect::<Result<Vec<_>, safetensors::SafeTensorError>>()
        .map_err(unusable)?;
    safetensors::serialize(views, Some(metadata)).map_err(unusable)
}

/// A tensor of the file as f32 values, from the float types PyTorch saves.
fn values(view: &TensorView<'_>, name: &str) -> Result<Vec<f32>, TrainError> {
    let dtype = match view.dtype() {
        Dtype::F32 => DType::F32,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::F64 => DType::F64,
        other => {
            return Err(unusable(format!(
                "`{name}` holds {other:?} values; parameters are F32, F16, BF16 or F64"
            )));
        }
    };
    TensorData::from_bytes_vec(view.data().to_vec(), view.shape().to_vec(), dtype)
        .convert::<f32>()
        .try_into_vec::<f32>()
        .map_err(unusable)
}

fn describe(config: &ModelConfig) -> String {
    format!("this {}", config.name().to_uppercase())
}

/// `model` (as `config` builds it) with the parameters of a safetensors file in PyTorch's
/// names and layouts. Refuses, naming the first mismatch in the module's order, a file that
/// lacks a tensor, holds one of another shape, or holds one the model has no place for.
pub fn import(mut model: Model, config: &ModelConfig, bytes: &[u8]) -> Result<Model, TrainError> {
    let file = SafeTensors::deserialize(bytes)
        .map_err(|e| unusable(format!("this is not a safetensors file ({e})")))?;
    let (slots, _) = slots(&collect(&model), config);
    let mut tensors = Vec::new();
    for slot in &slots {
        let view = file.tensor(&slot.name).map_err(|_| {
            unusable(format!(
                "the file has no `{}`, which {} needs (shape {:?})",
                slot.name,
                describe(config),
                slot.shape
            ))
        })?;
        if view.shape() != slot.shape.as_slice() {
            return Err(unusable(format!(
                "`{}` is {:?} in the file; {} needs {:?}",
                slot.name,
                view.shape(),
                describe(config),
                slot.shape
            )));
        }
        let mut values = values(&view, &slot.name)?.into_iter();
        for (collected, shape) in &slot.parts {
            let part: Vec<f32> = values.by_ref().take(shape.iter().product()).collect();
            tensors.push(bridge::from_data(
                TensorData::new(part, shape.clone()),
                collected.clone(),
                None,
            ));
        }
    }
    let known: Vec<&str> = slots.iter().map(|s| s.name.as_str()).collect();
    let mut names = file.names();
    names.sort();
    if let Some(extra) = names.into_iter().find(|name| !known.contains(name)) {
        return Err(unusable(format!(
            "the file holds `{extra}`, for which {} has no place",
            describe(config)
        )));
    }
    apply(&mut model, tensors)?;
    Ok(model)
}

fn apply(model: &mut Model, tensors: Vec<PackTensor>) -> Result<(), TrainError> {
    let result = model.apply(tensors, None, Some(Box::new(PyTorchToBurnAdapter)), true);
    // Every name was checked against the file above: what is left is burn-store's own
    // complaint, which would be a bug here, said in its words rather than trained past.
    match (
        result.errors.first(),
        result.missing.first(),
        result.unused.first(),
    ) {
        (Some(error), _, _) => Err(unusable(error)),
        (None, Some((path, _)), _) => Err(unusable(format!("nothing was loaded into `{path}`"))),
        (None, None, Some(path)) => Err(unusable(format!("`{path}` found no parameter"))),
        (None, None, None) => Ok(()),
    }
}

// Natively only: the wasm tests cover the page's use of export through its own suite.
#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use burn::module::{Module, ModuleVisitor, Param};
    use burn::prelude::*;

    use super::*;
    use crate::model::GptShape;

    fn images() -> InputShape {
        InputShape::images(8, 8, 3)
    }

    fn gpt() -> (ModelConfig, InputShape) {
        let shape = GptShape {
            layers: 2,
            heads: 2,
            width: 8,
            context: 5,
        };
        let input = InputShape::tokens(7);
        (ModelConfig::Gpt(shape), input)
    }

    fn configs() -> Vec<(ModelConfig, InputShape)> {
        vec![
            (ModelConfig::Mlp { hidden: vec![6, 4] }, images()),
            (ModelConfig::Cnn { channels: vec![2, 3] }, images()),
            gpt(),
        ]
    }

    struct Values(Vec<Vec<f32>>);

    impl ModuleVisitor for Values {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            self.0
                .push(param.val().into_data().convert::<f32>().try_to_vec().unwrap());
        }
    }

    fn values(model: &Model) -> Vec<Vec<f32>> {
        let mut visitor = Values(Vec::new());
        model.visit(&mut visitor);
        visitor.0
    }

    /// `model` exported with no extra metadata.
    async fn exported(model: &Model, config: &ModelConfig, input: &InputShape) -> Vec<u8> {
        export(model, config, input, HashMap::new()).await.unwrap()
    }

    fn names(bytes: &[u8]) -> Vec<(String, Vec<usize>)> {
        let file = SafeTensors::deserialize(bytes).unwrap();
        let mut names: Vec<_> = file
            .iter()
            .map(|(n, v)| (n.to_string(), v.shape().to_vec()))
            .collect();
        names.sort();
        names
    }

    #[tokio::test]
    async fn names_and_shapes_are_the_pytorch_definitions() {
        let device = Device::flex();
        let (config, input) = (ModelConfig::Mlp { hidden: vec![6, 4] }, images());
        let bytes = exported(&config.init(&input, &device), &config, &input).await;
        let expected = [
            ("1.bias", vec![6]),
            ("1.weight", vec![6, 64]),
            ("3.bias", vec![4]),
        ];
        assert_eq!(names(&bytes)[..3], expected.map(|(n, s)| (n.to_string(), s)));
        let (config, input) = (ModelConfig::Cnn { channels: vec![2, 3] }, images());
        let bytes = exported(&config.init(&input, &device), &config, &input).await;
        // Conv, ReLU, pool twice, then Flatten (6) and the head (7) over 3 x 2 x 2 features.
        assert!(names(&bytes).contains(&("3.weight".into(), vec![3, 2, 3, 3])));
        assert!(names(&bytes).contains(&("7.weight".into(), vec![3, 12])));
        let (config, input) = gpt();
        let bytes = exported(&config.init(&input, &device), &config, &input).await;
        let gpt = names(&bytes);
        assert!(gpt.contains(&("blocks.1.qkv.weight".into(), vec![24, 8])));
        assert!(gpt.contains(&("blocks.1.qkv.bias".into(), vec![24])));
        assert!(gpt.contains(&("blocks.0.output.weight".into(), vec![8, 8])));
        assert!(gpt.contains(&("blocks.0.attention_norm.weight".into(), vec![8])));
        assert!(gpt.contains(&("token.weight".into(), vec![7, 8])));
        assert!(gpt.contains(&("head.weight".into(), vec![7, 8])));
        assert_eq!(gpt.len(), 4 + 2 * 12 + 2);
        let metadata = SafeTensors::read_metadata(&bytes).unwrap().1;
        let metadata = metadata.metadata().as_ref().unwrap();
        assert_eq!(metadata["format"], "pt");
        let back: ModelConfig = serde_json::from_str(&metadata[MODEL_KEY]).unwrap();
        assert_eq!(back, config);
    }

    #[tokio::test]
    async fn every_model_comes_back_as_it_left() {
        let device = Device::flex();
        for (config, input) in configs() {
            let model = config.init(&input, &device);
            let bytes = exported(&model, &config, &input).await;
            // A fresh model of the same config draws other values: the file's replace them.
            let fresh = config.init(&input, &device);
            assert_ne!(values(&fresh), values(&model), "{config:?}");
            let loaded = import(fresh, &config, &bytes).unwrap();
            assert_eq!(values(&loaded), values(&model), "{config:?}");
        }
    }

    #[tokio::test]
    async fn the_gpt_stacks_query_key_value_rows_in_that_order() {
        let device = Device::flex();
        let (config, input) = gpt();
        let model = config.init(&input, &device);
        let bytes = exported(&model, &config, &input).await;
        let file = SafeTensors::deserialize(&bytes).unwrap();
        let qkv = values_of(&file, "blocks.0.qkv.weight");
        // The module's visiting order: token, position, then block 0's attention norm
        // (gamma, beta), then query (weight, bias), key, value.
        let all = values(&model);
        let (query, key) = (&all[4], &all[6]);
        // burn's [in, out] weight is PyTorch's [out, in] transposed: row r of qkv is column
        // r of query's, and row 8 + r column r of key's.
        for r in 0..8 {
            for c in 0..8 {
                assert_eq!(qkv[r * 8 + c], query[c * 8 + r]);
                assert_eq!(qkv[(8 + r) * 8 + c], key[c * 8 + r]);
            }
        }
    }

    fn values_of(file: &SafeTensors<'_>, name: &str) -> Vec<f32> {
        super::values(&file.tensor(name).unwrap(), name).unwrap()
    }

    #[tokio::test]
    async fn a_file_that_does_not_fit_is_refused_by_its_first_mismatch() {
        let device = Device::flex();
        let (config, input) = (ModelConfig::Mlp { hidden: vec![6, 4] }, images());
        let bytes = exported(&config.init(&input, &device), &config, &input).await;
        let narrower = ModelConfig::Mlp { hidden: vec![6, 5] };
        let error = import(narrower.init(&input, &device), &narrower, &bytes).unwrap_err();
        assert_eq!(
            error.to_string(),
            "the weights file cannot be used: `3.weight` is [4, 6] in the file; this MLP needs [5, 6]"
        );
        let deeper = ModelConfig::Mlp {
            hidden: vec![6, 4, 4],
        };
        let error = import(deeper.init(&input, &device), &deeper, &bytes).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("`5.weight` is [3, 4] in the file; this MLP needs [4, 4]"),
            "{error}"
        );
        let shallower = ModelConfig::Mlp { hidden: vec![6] };
        let error = import(shallower.init(&input, &device), &shallower, &bytes).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("`3.weight` is [4, 6] in the file; this MLP needs [3, 6]"),
            "{error}"
        );
        // One tensor more than the model has.
        let file = SafeTensors::deserialize(&bytes).unwrap();
        let extra = [1.0f32; 2]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<_>>();
        let mut views: Vec<(String, TensorView<'_>)> = file.tensors();
        views.push((
            "9.bias".into(),
            TensorView::new(Dtype::F32, vec![2], &extra).unwrap(),
        ));
        let more = safetensors::serialize(views, None).unwrap();
        let error = import(config.init(&input, &device), &config, &more).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("the file holds `9.bias`, for which this MLP has no place"),
            "{error}"
        );
        let error = import(config.init(&input, &device), &config, &bytes[..bytes.len() / 2]).unwrap_err();
        assert!(error.to_string().contains("not a safetensors file"), "{error}");
    }

    #[tokio::test]
    async fn half_precision_files_load_as_their_f32_values() {
        let device = Device::flex();
        let (config, input) = (ModelConfig::Mlp { hidden: vec![6, 4] }, images());
        let model = config.init(&input, &device);
        let bytes = exported(&model, &config, &input).await;
        let file = SafeTensors::deserialize(&bytes).unwrap();
        // The file as PyTorch saves a .half() model: every tensor F16.
        let halves: Vec<(String, Vec<usize>, Vec<u8>)> = file
            .iter()
            .map(|(name, view)| {
                let data =
                    TensorData::from_bytes_vec(view.data().to_vec(), view.shape().to_vec(), DType::F32);
                let half = data.convert_dtype(DType::F16);
                (name.to_string(), view.shape().to_vec(), half.as_bytes().to_vec())
            })
            .collect();
        let views = halves
            .iter()
            .map(|(n, s, b)| (n.clone(), TensorView::new(Dtype::F16, s.clone(), b).unwrap()));
        let half_file = safetensors::serialize(views, None).unwrap();
        let loaded = import(config.init(&input, &device), &config, &half_file).unwrap();
        for (got, want) in values(&loaded).iter().zip(values(&model)) {
            for (g, w) in got.iter().zip(want) {
                assert!((g - w).abs() <= w.abs() / 1024.0 + 1e-7, "{g} against {w}");
            }
        }
    }
}
