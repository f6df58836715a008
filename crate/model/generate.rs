//! Text from a trained GPT: one token at a time, drawn from the softmax of the last
//! position's logits divided by a temperature, with a seeded generator (the same text
//! natively and in the browser).

use burn::prelude::*;
use burn::tensor::{FloatDType, TensorData};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::Gpt;

#[cfg_attr(all(test, not(target_arch = "wasm32")), derive(tsify::Tsify))]
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SampleSettings {
    /// Tokens to generate after the prompt.
    pub tokens: usize,
    /// Below 1 sharpens the distribution, above 1 flattens it; 0 is argmax.
    pub temperature: f32,
    pub seed: u64,
}

impl Default for SampleSettings {
    fn default() -> Self {
        SampleSettings {
            tokens: 200,
            temperature: 0.8,
            seed: 0,
        }
    }
}

/// `settings.tokens` tokens continuing `prompt` (at least one token), each predicted from
/// the last `context` tokens. `model` runs without autodiff.
pub async fn generate(
    model: &Gpt,
    prompt: &[u8],
    settings: &SampleSettings,
    device: &Device,
) -> Result<Vec<u8>, String> {
    if prompt.is_empty() {
        return Err("generation needs a prompt of at least one token".into());
    }
    let mut rng = ChaCha8Rng::seed_from_u64(settings.seed);
    let mut text = prompt.to_vec();
    for _ in 0..settings.tokens {
        let window = &text[text.len().saturating_sub(model.context())..];
        let ids: Vec<i64> = window.iter().map(|&t| i64::from(t)).collect();
        let tokens = Tensor::<2, Int>::from_data(TensorData::new(ids, [1, window.len()]), device);
        let logits = model.logits(tokens);
        let [_, count, vocabulary] = logits.dims();
        let last = logits
            .slice([0..1, count - 1..count, 0..vocabulary])
            .cast(FloatDType::F32)
            .into_data_async()
            .await
            .map_err(|e| e.to_string())?
            .try_to_vec::<f32>()
            .map_err(|e| format!("{e:?}"))?;
        text.push(draw(&last, settings.temperature, rng.random::<f64>()) as u8);
    }
    Ok(text.split_off(prompt.len()))
}

/// The index `uniform` (in [0, 1)) falls on in the tempered softmax of `logits`.
pub fn draw(logits: &[f32], temperature: f32, uniform: f64) -> usize {
    let best = logits
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |(i, _)| i);
    if temperature <= 0.0 {
        return best;
    }
    let top = f64::from(logits[best]);
    let weights: Vec<f64> = logits
        .iter()
        .map(|&l| ((f64::from(l) - top) / f64::from(temperature)).exp())
        .collect();
    let mut target = uniform * weights.iter().sum::<f64>();
    for (i, w) in weights.iter().enumerate() {
        if target < *w {
            return i;
        }
        target -= w;
    }
    best
}

#[cfg(test)]
mod tests {
    use super::draw;
    // In the browser (wasm-pack test, tests/run-all) these run as wasm-bindgen tests.
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn draws_follow_the_tempered_distribution() {
        let logits = [0.0, 2.0, 1.0];
        assert_eq!(draw(&logits, 0.0, 0.99), 1);
        // Weights e^0 : e^2 : e^1; the first sixth or so of [0, 1) is token 0.
        assert_eq!(draw(&logits, 1.0, 0.05), 0);
        assert_eq!(draw(&logits, 1.0, 0.5), 1);
        assert_eq!(draw(&logits, 1.0, 0.99), 2);
        // A low temperature leaves nearly all the mass on the best.
        assert_eq!(draw(&logits, 0.05, 0.05), 1);
    }
}
