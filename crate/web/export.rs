//! The trained model as a burnpack file. burn's `into_record` reads parameters back
//! synchronously, which a browser's GPU forbids: the parameters are read asynchronously
//! here, placed into a CPU copy of the model, and that copy is recorded.

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::prelude::*;

use crate::model::{InputShape, Model, ModelConfig};

/// Every float parameter, flattened, in the module's visiting order.
struct Collect(Vec<Tensor<1>>);

impl ModuleVisitor for Collect {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let value = param.val();
        let elements = value.shape().num_elements();
        self.0.push(value.reshape([elements]));
    }
}

/// Replaces every float parameter with the next of `values`, in the same order.
struct Fill(std::vec::IntoIter<Vec<f32>>);

impl ModuleMapper for Fill {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let values = self
            .0
            .next()
            .expect("the same architecture has the same parameters");
        param.map(|tensor| {
            let data = TensorData::new(values, tensor.shape());
            Tensor::from_data(data, &tensor.device())
        })
    }
}

pub async fn burnpack(model: &Model, config: &ModelConfig, input: &InputShape) -> Result<Vec<u8>, String> {
    let mut collect = Collect(Vec::new());
    model.visit(&mut collect);
    let mut values = Vec::with_capacity(collect.0.len());
    for tensor in collect.0 {
        let data = tensor
            .into_data_async()
            .await
            .map_err(|e| format!("reading the parameters back: {e:?}"))?;
        values.push(
            data.convert::<f32>()
                .try_into_vec::<f32>()
                .map_err(|e| format!("{e:?}"))?,
        );
    }
    let copy = config
        .init(input, &super::device::cpu())
        .map(&mut Fill(values.into_iter()));
    let bytes = copy
        .into_record()
        .into_bytes()
        .map_err(|e| format!("writing the model: {e}"))?;
    Ok(bytes.to_vec())
}
