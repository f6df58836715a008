// @ts-check
// Headroom on the work the TF.js worker does: the same trainer the playground runs, told to
// read in file order, keep the learning rate constant and evaluate the first test samples.
import init, { Training } from "../../pkg/headroom.js";

/** @typedef {import("../page/types/train-config").TrainConfig} TrainConfig */

/**
 * @param {{ model: "mlp" | "cnn", layers: number[], learning_rate: number, epsilon: number,
 *   batch: number, steps: number, eval_samples: number }} spec
 * @returns {TrainConfig} checked by tsc against the type generated from Rust (web/types)
 */
function trainConfig(spec) {
  /** @type {TrainConfig["model"]} */
  const model = spec.model === "mlp" ? { kind: "mlp", hidden: spec.layers } : { kind: "cnn", channels: spec.layers };
  return {
    model,
    optimizer: { kind: "adam", learning_rate: spec.learning_rate, epsilon: spec.epsilon, warmup_steps: 0, final_lr_fraction: 1 },
    effective_batch: spec.batch,
    micro_batch: spec.batch,
    duration: { steps: spec.steps },
    evaluate: true,
    eval_every: 0,
    eval_samples: spec.eval_samples,
    stream: { shuffle: false, prefetch: 2 },
  };
}

function memory(sample) {
  return { in_use: sample.gpu_bytes_in_use ?? null, reserved: sample.gpu_bytes_reserved ?? null, wasm_bytes: sample.host_bytes ?? null };
}

async function run(spec) {
  const began = performance.now();
  await init();
  const training = await Training.create(spec.data, trainConfig(spec), spec.backend);
  const steps = [];
  let evaluation = null;
  for (;;) {
    const started = performance.now();
    const events = await training.advance();
    if (events.length === 0) break;
    const seconds = (performance.now() - started) / 1000;
    for (const event of events) {
      if (event.event === "step") {
        // The step's own peak, and what is held after it (growth over steps is a leak).
        const after = memory(training.memory());
        steps.push({ loss: event.loss, seconds, memory: { ...after, peak_reserved: event.memory.gpu_bytes_reserved ?? null }, at: (performance.now() - began) / 1000 });
      }
      if (event.event === "eval") evaluation = { loss: event.loss, accuracy: event.accuracy, samples: event.samples };
    }
  }
  const device = training.device();
  training.free();
  return { framework: "headroom", backend: device.backend, threads: spec.backend === "cpu" ? 1 : null, steps, eval: evaluation };
}

self.onmessage = ({ data }) =>
  run(data).then(
    (result) => self.postMessage({ result }),
    (error) => self.postMessage({ error: error?.message ?? String(error) }),
  );
