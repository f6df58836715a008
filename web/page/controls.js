// @ts-check
// The run form: read into the Rust TrainConfig, with every bad value named. tsc checks the
// config built here against the type generated from Rust (web/types, tests/run-all).
import { fromMiB } from "./format.js";
import { LOCAL_PREFIX, listLocal } from "./local-data.js";

/** @typedef {import("./types/train-config").TrainConfig} TrainConfig */
/** @typedef {import("./types/train-config").ModelConfig} ModelConfig */
/** @typedef {import("./types/train-config").Precision} Precision */
/** @typedef {import("./types/train-config").Moments} Moments */

/** The form's fields: inputs and selects, read by value. */
const $ = (/** @type {string} */ id) => /** @type {HTMLInputElement} */ (document.getElementById(id));

const LAYER_DEFAULTS = { mlp: ["Hidden widths", "256"], cnn: ["Channels", "8,16"] };
/// The effective batch each kind of model starts with: images, or windows of text.
const BATCH_DEFAULTS = { images: "256", text: "16" };
const datasetKinds = new Map();
const TEXT_EVAL_WINDOWS = 256;

/// The GPT reads text, the others images: the fields and datasets follow the model.
export function onModelChange() {
  const model = $("model").value;
  const text = model === "gpt";
  const labels = (/** @type {string} */ selector) => /** @type {NodeListOf<HTMLElement>} */ (document.querySelectorAll(selector));
  for (const label of labels(".gpt-only")) label.hidden = !text;
  for (const label of labels(".image-only")) label.hidden = text;
  if (!text) {
    const [label, value] = LAYER_DEFAULTS[model];
    $("layers-label").textContent = label;
    $("layers").value = value;
  }
  const kind = text ? "text" : "images";
  $("effective-batch").value = BATCH_DEFAULTS[kind];
  $("accuracy-caption").textContent = text ? "Test next-character accuracy" : "Test accuracy";
  if (datasetKinds.get($("dataset").value) !== kind) {
    const match = [...datasetKinds].find(([, k]) => k === kind);
    if (match) $("dataset").value = match[0];
  }
}

function positiveInteger(id, name) {
  const value = Number($(id).value);
  if (!Number.isInteger(value) || value < 1) throw new Error(`${name} must be a whole number of at least 1`);
  return value;
}

function layers() {
  const text = $("layers").value.trim();
  const sizes = text.split(",").map((part) => Number(part.trim()));
  if (text === "" || sizes.some((size) => !Number.isInteger(size) || size < 1)) {
    throw new Error(`${$("layers-label").textContent} must be whole numbers separated by commas, like 256 or 8,16`);
  }
  return sizes;
}

/// The dataset URL, the TrainConfig and the backend the form describes.
export function readRun() {
  const model = $("model").value;
  const microText = $("micro-batch").value.trim().toLowerCase();
  const micro = microText === "auto" ? null : Number(microText);
  if (micro !== null && !(Number.isInteger(micro) && micro >= 1)) throw new Error("Micro-batch must be auto or a whole number");
  const capText = $("cap").value.trim();
  const capMiB = capText === "" ? null : Number(capText);
  if (capMiB !== null && !(capMiB > 0)) throw new Error("Memory cap must be a positive number of MiB (or empty for none)");
  const learningRate = Number($("learning-rate").value);
  if (!(learningRate > 0)) throw new Error("Learning rate must be positive");
  const seed = Number($("seed").value);
  if (!Number.isInteger(seed) || seed < 0) throw new Error("Seed must be a whole number");
  const prefetch = Number($("prefetch").value);
  if (!Number.isInteger(prefetch) || prefetch < 0) throw new Error("Prefetch must be a whole number of chunks");
  /** @type {Record<string, () => ModelConfig>} */
  const models = {
    mlp: () => ({ kind: "mlp", hidden: layers() }),
    cnn: () => ({ kind: "cnn", channels: layers() }),
    gpt: () => ({
      kind: "gpt",
      layers: positiveInteger("gpt-layers", "Blocks"),
      heads: positiveInteger("gpt-heads", "Heads"),
      width: positiveInteger("gpt-width", "Width"),
      context: positiveInteger("gpt-context", "Context"),
    }),
  };
  const sampleEvery = Number($("sample-every").value);
  if (!Number.isInteger(sampleEvery) || sampleEvery < 0) throw new Error("Sample every must be a whole number of steps");
  /** @type {TrainConfig} */
  const config = {
    model: models[model](),
    sample_every: sampleEvery,
    optimizer: { learning_rate: learningRate },
    effective_batch: positiveInteger("effective-batch", "Effective batch"),
    micro_batch: micro,
    duration: { steps: positiveInteger("steps", "Steps") },
    // auto (null): the planner picks under a cap, off without one.
    checkpointing: $("checkpointing").value === "auto" ? null : $("checkpointing").value === "on",
    // The select offers auto (null) and Precision's values.
    precision: $("precision").value === "auto" ? null : /** @type {Precision} */ ($("precision").value),
    // The select offers auto (null) and Moments' values.
    moments: $("moments").value === "auto" ? null : /** @type {Moments} */ ($("moments").value),
    cap: capMiB === null ? null : fromMiB(capMiB),
    eval_every: 100,
    // Text: the first windows of the test split, a quick and repeatable perplexity (the
    // whole split is half a million characters).
    eval_samples: model === "gpt" ? TEXT_EVAL_WINDOWS : null,
    seed,
    stream: { prefetch, seed },
  };
  const saveEvery = Number($("save-every").value);
  if (!Number.isInteger(saveEvery) || saveEvery < 0) throw new Error("Save every must be a whole number of steps (0: never)");
  return { url: new URL($("dataset").value, document.baseURI).href, config, backend: $("backend").value, saveEvery };
}

/// f16 (with or without the master copy) is offered only where the adapter has shader-f16.
export function offerF16(available, reason) {
  for (const [value, name] of [["f16", "f16"], ["f16-pure", "f16 without master"]]) {
    const option = /** @type {HTMLOptionElement} */ ($("precision").querySelector(`option[value="${value}"]`));
    option.disabled = !available;
    option.title = available ? "" : reason;
    option.textContent = available ? name : `${name} (unavailable: ${reason})`;
    if (!available && $("precision").value === value) $("precision").value = "auto";
  }
}

const DATASET_INDEX = "data/index.json";

/// Where an index entry's chunks are: its `url` (absolute, or relative to the index: a
/// built site may point at chunks on another origin that allows CORS), else `data/PATH`.
function datasetLocation({ url, path }, indexUrl) {
  return url == null ? `data/${path}` : new URL(url, indexUrl).href.replace(/\/$/, "");
}

/// The server's datasets, then the text kept in this browser (local-data.js). Keeps the
/// choice where it is still offered; else Fashion-MNIST.
export async function listDatasets() {
  const chosen = $("dataset").value;
  const response = await fetch(DATASET_INDEX);
  if (!response.ok) throw new Error(`${DATASET_INDEX}: HTTP ${response.status} (run headroom prepare, or web/play)`);
  const { datasets } = await response.json();
  const local = await listLocal().catch(() => []);
  if (datasets.length === 0 && local.length === 0) throw new Error("no datasets prepared (run headroom prepare, or web/play)");
  const options = datasets.map((/** @type {any} */ entry) => {
    const location = datasetLocation(entry, response.url);
    datasetKinds.set(location, entry.kind ?? "images");
    const unit = entry.kind === "text" ? " characters" : "";
    return new Option(`${entry.name} (${entry.train} + ${entry.test}${unit})`, location);
  });
  for (const { name, train, test } of local) {
    const location = `${LOCAL_PREFIX}${name}`;
    datasetKinds.set(location, "text");
    options.push(new Option(`${name} (${train} + ${test} characters, in this browser)`, location));
  }
  $("dataset").replaceChildren(...options);
  const fashion = datasets.findIndex((/** @type {any} */ { name }) => name === "fashion-mnist");
  if (options.some((o) => o.value === chosen)) $("dataset").value = chosen;
  else if (fashion >= 0) $("dataset").value = options[fashion].value;
}

/// Tokens per window when the chosen dataset is text (the GPT's context + 1), else null.
export function textWindow() {
  if (datasetKinds.get($("dataset").value) !== "text") return null;
  return Number($("gpt-context").value) + 1;
}
