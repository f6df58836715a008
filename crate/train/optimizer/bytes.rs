//! The optimizer's state as bytes, for a checkpoint: read from the device asynchronously
//! (as a browser's GPU requires) and put back bit for bit, f32 moments and 8-bit ones.

use std::collections::HashMap;

use burn::module::ParamId;
use burn::prelude::*;

use super::{Optimizer, ParamState, Stored};
use crate::train::quantize::{self, Quantized};

/// One parameter's entry in the saved state; its tensors follow the header: f32 LE, or
/// for 8-bit moments each moment's code words (u32 LE) then its block scales (f32 LE).
#[derive(serde::Serialize, serde::Deserialize)]
struct SavedParam {
    id: u64,
    time: usize,
    elements: usize,
    tensors: usize,
    /// Runs saved before 8-bit moments read false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    eight_bit: bool,
}

/// A tensor's values read back from the device, as `E`.
fn values<E: burn::tensor::Element>(
    read: Result<TensorData, impl std::fmt::Debug>,
) -> Result<Vec<E>, String> {
    read.map_err(|e| format!("{e:?}"))?
        .convert::<E>()
        .try_into_vec::<E>()
        .map_err(|e| format!("{e:?}"))
}

async fn read_floats(tensor: &Tensor<1>, out: &mut Vec<u8>) -> Result<(), String> {
    let floats: Vec<f32> = values(tensor.clone().into_data_async().await)?;
    out.extend(floats.iter().flat_map(|v| v.to_le_bytes()));
    Ok(())
}

/// The words as u32: through i64, which holds both a backend's i32 words (negative where
/// the top byte is 128 or more) and an i64 backend's positive ones.
async fn read_words(tensor: &Tensor<1, Int>, out: &mut Vec<u8>) -> Result<(), String> {
    let words: Vec<i64> = values(tensor.clone().into_data_async().await)?;
    out.extend(words.iter().flat_map(|&v| (v as u32).to_le_bytes()));
    Ok(())
}

impl Optimizer {
    /// The per-parameter state as bytes: a little-endian u64 header length, a JSON header
    /// naming each parameter (its id, step count and sizes), then every tensor's values
    /// (see `SavedParam`). Reads the device asynchronously, as a browser's GPU requires.
    pub async fn to_bytes(&self) -> Result<Vec<u8>, String> {
        let mut ids: Vec<&ParamId> = self.states.keys().collect();
        ids.sort_by_key(|id| id.val());
        let mut header = Vec::with_capacity(ids.len());
        let mut values = Vec::new();
        for id in ids {
            let state = &self.states[id];
            match &state.stored {
                Stored::Full(tensors) => {
                    for tensor in tensors {
                        read_floats(tensor, &mut values).await?;
                    }
                }
                Stored::Eight(moments) => {
                    for moment in moments.iter() {
                        read_words(&moment.words, &mut values).await?;
                        read_floats(&moment.scales, &mut values).await?;
                    }
                }
            }
            header.push(SavedParam {
                id: id.val(),
                time: state.time,
                elements: state.stored.elements().unwrap_or(0),
                tensors: state.stored.count(),
                eight_bit: matches!(state.stored, Stored::Eight(_)),
            });
        }
        let header = serde_json::to_vec(&header).map_err(|e| e.to_string())?;
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend(header);
        bytes.extend(values);
        Ok(bytes)
    }

    /// Puts back the state [`to_bytes`](Self::to_bytes) wrote, on `device`; the reason where
    /// the bytes are not such a state.
    pub fn load_bytes(&mut self, bytes: &[u8], device: &Device) -> Result<(), String> {
        let too_short = || "the optimizer state is cut short".to_string();
        let (length, rest) = bytes.split_first_chunk::<8>().ok_or_else(too_short)?;
        let length = usize::try_from(u64::from_le_bytes(*length)).map_err(|_| too_short())?;
        let (header, rest) = (rest.get(..length).ok_or_else(too_short)?, &rest[length..]);
        let header: Vec<SavedParam> =
            serde_json::from_slice(header).map_err(|e| format!("the optimizer state's header: {e}"))?;
        let mut values = Values { rest, device };
        let mut states = HashMap::with_capacity(header.len());
        for saved in header {
            let stored = match saved.eight_bit {
                false => Stored::Full(
                    (0..saved.tensors)
                        .map(|_| values.floats(saved.elements))
                        .collect::<Result<_, _>>()?,
                ),
                true if saved.tensors == 2 => Stored::Eight(Box::new([
                    values.quantized(saved.elements)?,
                    values.quantized(saved.elements)?,
                ])),
                true => {
                    return Err(format!(
                        "8-bit state with {} moments; Adam keeps 2",
                        saved.tensors
                    ));
                }
            };
            states.insert(
                ParamId::from(saved.id),
                ParamState {
                    time: saved.time,
                    stored,
                },
            );
        }
        if !values.rest.is_empty() {
            return Err(format!(
                "the optimizer state has {} bytes past its end",
                values.rest.len()
            ));
        }
        self.states = states;
        Ok(())
    }
}

/// The values part of a saved state, read from the front.
struct Values<'a> {
    rest: &'a [u8],
    device: &'a Device,
}

impl Values<'_> {
    fn take(&mut self, count: usize) -> Result<Vec<[u8; 4]>, String> {
        let too_short = || "the optimizer state is cut short".to_string();
        let size = count.checked_mul(4).ok_or_else(too_short)?;
        let (these, rest) = self.rest.split_at_checked(size).ok_or_else(too_short)?;
        self.rest = rest;
        Ok(these.chunks_exact(4).map(|b| [b[0], b[1], b[2], b[3]]).collect())
    }

    fn floats(&mut self, count: usize) -> Result<Tensor<1>, String> {
        let floats: Vec<f32> = self.take(count)?.into_iter().map(f32::from_le_bytes).collect();
        Ok(Tensor::from_data(TensorData::new(floats, [count]), self.device))
    }

    fn quantized(&mut self, elements: usize) -> Result<Quantized, String> {
        let blocks = elements.div_ceil(quantize::BLOCK);
        let words = blocks * quantize::BLOCK / 4;
        let codes: Vec<i32> = self.take(words)?.into_iter().map(i32::from_le_bytes).collect();
        Ok(Quantized {
            words: Tensor::from_data(TensorData::new(codes, [words]), self.device),
            scales: self.floats(blocks)?,
            elements,
        })
    }
}
