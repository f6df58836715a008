// The comparison page (web/compare) in real headless Chromium: Headroom and TensorFlow.js
// train on the same Fashion-MNIST batches, so that web/compare/run's figures compare like
// with like. tests/run-all sets HEADROOM_BIN and builds static/pkg and static/data first.
import assert from "node:assert/strict";
import { test } from "node:test";
import { runCompareCase, sharedServerAndBrowser } from "../../web/bench/harness.mjs";

const shared = sharedServerAndBrowser();

const runCase = (spec) =>
  runCompareCase(shared.browser, shared.server.url, {
    model: "mlp", layers: [128], batch: 256, learning_rate: 1e-3, epsilon: 1e-8, data: "/data/fashion-mnist/", ...spec,
  });

const mean = (values) => values.reduce((a, b) => a + b, 0) / values.length;

test("Headroom's CPU fallback and TF.js's wasm backend learn the MLP from the same batches", async () => {
  const steps = 10;
  const runs = {
    headroom: await runCase({ framework: "headroom", backend: "cpu", steps, eval_samples: 500 }),
    tfjs: await runCase({ framework: "tfjs", backend: "wasm", steps, eval_samples: 500 }),
  };
  assert.equal(runs.headroom.backend, "flex", "the CPU fallback is burn's flex backend");
  assert.equal(runs.tfjs.backend, "wasm");
  for (const [name, run] of Object.entries(runs)) {
    const losses = run.steps.map((s) => s.loss);
    assert.equal(losses.length, steps, name);
    // Ten Glorot-initialised classes start near ln 10 = 2.30.
    assert.ok(losses[0] > 1.5 && losses[0] < 3.5, `${name}: first loss ${losses[0]}`);
    assert.ok(mean(losses.slice(-3)) < 0.8 * mean(losses.slice(0, 3)), `${name}: losses ${losses}`);
    assert.ok(run.steps.every((s) => s.seconds > 0), name);
    assert.equal(run.eval.samples, 500, `${name} evaluates the first 500 test samples`);
    assert.ok(run.eval.accuracy > 0.4, `${name}: accuracy ${run.eval.accuracy}`);
  }
  // Same batches, same model, same optimizer: the two runs end close (initial weights differ).
  assert.ok(Math.abs(runs.headroom.eval.accuracy - runs.tfjs.eval.accuracy) < 0.15, JSON.stringify([runs.headroom.eval, runs.tfjs.eval]));
});

test("TF.js trains on the browser's WebGPU adapter and reports its GPU bytes", async () => {
  const run = await runCase({ framework: "tfjs", backend: "webgpu", steps: 3, eval_samples: 256 });
  assert.equal(run.backend, "webgpu");
  assert.ok(run.steps.every((s) => Number.isFinite(s.loss)));
  assert.ok(run.steps.every((s) => s.memory.reserved > 0 && s.memory.in_use > 0), JSON.stringify(run.steps.map((s) => s.memory)));
});
