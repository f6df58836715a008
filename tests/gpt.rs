//! The GPT and its text: causal masking, the stream's windows, seeded sampling.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use burn::prelude::*;
use burn::tensor::TensorData;
use headroom::data::text::CharTokenizer;
use headroom::data::{BatchReader, DataSource, Split, StreamOptions};
use headroom::model::generate::{SampleSettings, generate};
use headroom::model::{Gpt, GptShape};
use headroom::train::BackendKind;

const SHAPE: GptShape = GptShape {
    layers: 2,
    heads: 2,
    width: 32,
    context: 16,
};

fn tokens(ids: &[i64], device: &Device) -> Tensor<2, Int> {
    Tensor::<2, Int>::from_data(TensorData::new(ids.to_vec(), [1, ids.len()]), device)
}

fn logits(model: &Gpt, ids: &[i64], device: &Device) -> Vec<f32> {
    model
        .logits(tokens(ids, device))
        .into_data()
        .try_to_vec::<f32>()
        .unwrap()
}

/// Changing the token at position k changes no logit before k, and does change those at
/// k: position t sees tokens up to t only.
fn no_position_sees_the_future(backend: BackendKind) {
    let device = backend.device();
    let vocabulary = 11;
    let model = Gpt::new(&SHAPE, vocabulary, &device);
    let original: Vec<i64> = (0..SHAPE.context as i64).map(|i| (i * 7 + 3) % 11).collect();
    let before = logits(&model, &original, &device);
    for k in [1, SHAPE.context / 2, SHAPE.context - 1] {
        let mut changed = original.clone();
        changed[k] = (changed[k] + 5) % 11;
        let after = logits(&model, &changed, &device);
        let earlier = k * vocabulary;
        assert_eq!(
            &before[..earlier],
            &after[..earlier],
            "{backend:?}: a logit before position {k} moved"
        );
        let at_k = earlier..earlier + vocabulary;
        assert_ne!(
            &before[at_k.clone()],
            &after[at_k],
            "{backend:?}: position {k} ignores its own token"
        );
    }
}

#[test]
fn no_position_sees_the_future_on_flex() {
    no_position_sees_the_future(BackendKind::Flex);
}

#[test]
fn no_position_sees_the_future_on_wgpu() {
    no_position_sees_the_future(BackendKind::Wgpu);
}

#[tokio::test]
async fn windows_are_slices_of_the_text_in_a_seeded_order() {
    let text = common::generated_text(5000);
    let dataset = common::text_dataset(&text, 1000);
    let tokenizer = CharTokenizer::from_vocabulary(dataset.manifest.vocabulary.as_ref().unwrap()).unwrap();
    let train_tokens = tokenizer.encode(&text[..4500]).unwrap();
    let location = dataset.dir.to_str().unwrap().to_string();
    let read = |seed: u64, epoch: u64| {
        let location = location.clone();
        async move {
            let options = StreamOptions {
                window: Some(33),
                seed,
                prefetch: 1,
                ..StreamOptions::default()
            };
            let source = DataSource::open(&location, options).await.unwrap();
            assert_eq!(source.sample_count(Split::Train), 4 * (1000 / 33) + 500 / 33);
            // Text chunks are runs of one text: training batches mix many by default.
            assert_eq!(source.mix(Split::Train), headroom::data::TEXT_MIX);
            assert_eq!(source.mix(Split::Test), 1);
            let mut reader =
                BatchReader::new(source.epoch(Split::Train, epoch).unwrap(), source.sample_bytes());
            let mut windows = Vec::new();
            while let Some(batch) = reader.next_batch(7).await.unwrap() {
                assert!(batch.labels.is_empty(), "text has no labels");
                windows.extend(batch.features.chunks_exact(33).map(<[u8]>::to_vec));
            }
            windows
        }
    };
    let windows = read(3, 0).await;
    assert_eq!(windows.len(), 4 * (1000 / 33) + 500 / 33);
    for window in &windows {
        assert!(
            train_tokens.windows(33).any(|w| w == &window[..]),
            "a window is not a slice of the training text"
        );
    }
    assert_eq!(
        windows,
        read(3, 0).await,
        "the same seed and epoch give the same windows"
    );
    assert_ne!(windows, read(3, 1).await, "another epoch draws other offsets");
}

#[tokio::test]
async fn a_text_dataset_needs_a_window_its_chunks_hold() {
    let dataset = common::text_dataset(&common::generated_text(2000), 100);
    let open = |window| {
        let options = StreamOptions {
            window,
            ..StreamOptions::default()
        };
        DataSource::open(dataset.dir.to_str().unwrap(), options)
    };
    let error = open(None).await.err().unwrap().to_string();
    assert!(error.contains("windows"), "{error}");
    let error = open(Some(101)).await.err().unwrap().to_string();
    assert!(error.contains("fewer than a window of 101"), "{error}");
    assert!(open(Some(100)).await.is_ok());
}

#[tokio::test]
async fn sampling_is_seeded_and_stays_in_the_vocabulary() {
    let device = BackendKind::Flex.device();
    let model = Gpt::new(&SHAPE, 11, &device);
    let settings = SampleSettings {
        tokens: 40,
        temperature: 1.0,
        seed: 9,
    };
    let first = generate(&model, &[1, 2, 3], &settings, &device).await.unwrap();
    assert_eq!(first.len(), 40, "more tokens than the context are generated");
    assert!(first.iter().all(|&t| t < 11));
    assert_eq!(
        first,
        generate(&model, &[1, 2, 3], &settings, &device).await.unwrap()
    );
    let other = SampleSettings { seed: 10, ..settings };
    assert_ne!(
        first,
        generate(&model, &[1, 2, 3], &other, &device).await.unwrap()
    );
}

/// The step losses of `headroom train` on flex for the GPT with `micro_batch`.
fn gpt_losses_on_flex(data: &str, micro_batch: &str) -> Vec<f64> {
    let events = common::headroom_events(&[
        "train",
        "--data",
        data,
        "--backend",
        "flex",
        "--no-eval",
        "--sample-chars",
        "0",
        "--model",
        "gpt",
        "--layers",
        "2",
        "--heads",
        "2",
        "--width",
        "32",
        "--context",
        "32",
        "--effective-batch",
        "16",
        "--micro-batch",
        micro_batch,
        "--steps",
        "4",
        "--seed",
        "3",
    ]);
    events
        .iter()
        .filter(|e| e["event"] == "step")
        .map(|e| e["loss"].as_f64().unwrap())
        .collect()
}

#[test]
fn accumulated_micro_batches_train_the_gpt_as_one_batch_does_on_flex() {
    let dataset = common::text_dataset(&common::generated_text(20_000), 2048);
    let data = dataset.dir.to_str().unwrap();
    let whole = gpt_losses_on_flex(data, "16");
    let accumulated = gpt_losses_on_flex(data, "4");
    assert_eq!(whole.len(), 4);
    assert!(whole[3] < whole[0], "the loss did not fall: {whole:?}");
    for (step, (a, b)) in whole.iter().zip(&accumulated).enumerate() {
        assert!(
            (a - b).abs() <= 1e-4 * a.abs(),
            "step {step}: {a} in one batch, {b} accumulated"
        );
    }
}
