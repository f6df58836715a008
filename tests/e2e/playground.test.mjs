// The playground in real headless Chromium against a real `headroom serve`.
// tests/run-all sets HEADROOM_BIN and builds static/pkg and static/data first.
import assert from "node:assert/strict";
import { mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { before, test } from "node:test";
import { openPlayground, repo, setRun, sharedServerAndBrowser } from "../../web/bench/harness.mjs";

const artifacts = join(repo, "tests", "artifacts");
const MIB = 1024 * 1024;
const TRAIN_STEPS = 40;

const shared = sharedServerAndBrowser();
before(() => mkdirSync(artifacts, { recursive: true }));

const openPage = () => openPlayground(shared.browser, shared.server.url);

async function downloaded(page, button) {
  const [download] = await Promise.all([page.waitForEvent("download"), page.click(button)]);
  return readFileSync(await download.path());
}

const mean = (values) => values.reduce((a, b) => a + b, 0) / values.length;

/// Every memory sample the page plotted counts (device reservation plus data) at most `cap` bytes.
function assertEverySampleUnder(samples, cap) {
  for (const sample of samples) {
    assert.ok(sample.gpu_bytes_reserved + sample.data_bytes_held <= cap, JSON.stringify(sample));
  }
}

test("the MLP trains on Fashion-MNIST chunks on WebGPU under a 256 MiB cap, and the page stays responsive", async () => {
  const { page, problems } = await openPage();
  assert.equal(await page.evaluate(() => crossOriginIsolated), true, "the page must be cross-origin isolated");
  await setRun(page, { dataset: "data/fashion-mnist", backend: "webgpu", cap: 256, steps: TRAIN_STEPS });
  await page.waitForFunction(() => /^Plan: /.test(document.getElementById("plan").textContent));
  assert.match(await page.textContent("#plan"), /of the 256\.0 MiB cap/);
  // Precision and checkpointing are auto by default: under a cap the plan says what it
  // picked and why.
  assert.match(await page.textContent("#plan"), /Why: the cap picked .+ at micro-batch \d+: the least expected time per sample/);
  await page.click("#start");
  await page.waitForFunction(() => playground.charts.steps.x.length >= 5, null, { timeout: 120000 });

  // The page answers a click while the worker trains: pause lands between two steps.
  const clicked = Date.now();
  await page.click("#pause");
  await page.waitForFunction(() => document.getElementById("status").textContent === "Paused.");
  const pauseMs = Date.now() - clicked;
  const frameMs = await page.evaluate(() => {
    const asked = performance.now();
    return new Promise((resolve) => requestAnimationFrame(() => resolve(performance.now() - asked)));
  });
  const stepsWhilePaused = await page.evaluate(() => playground.charts.steps.x.length);
  const modelFile = await downloaded(page, "#export-model");
  assert.ok(modelFile.length > 784 * 256 * 4, `the model file holds the weights: ${modelFile.length} bytes`);
  await page.click("#resume");
  await page.waitForFunction(() => playground.state === "ended", null, { timeout: 300000 });
  assert.match(await page.textContent("#status"), /^Finished: 40 steps/);

  const losses = await page.evaluate(() => playground.charts.steps.train.filter((loss) => loss !== null));
  assert.equal(losses.length, TRAIN_STEPS);
  assert.ok(mean(losses.slice(-5)) < 0.75 * mean(losses.slice(0, 5)), `the loss did not fall: ${losses}`);
  const samples = await page.evaluate(() => playground.charts.samples);
  assert.ok(samples.length > TRAIN_STEPS, `memory was sampled between steps too: ${samples.length}`);
  for (const sample of samples) {
    assert.ok(sample.gpu_bytes_reserved > 0, JSON.stringify(sample));
    assert.ok(sample.gpu_bytes_reserved + sample.data_bytes_held <= 256 * MIB, JSON.stringify(sample));
  }
  const accuracy = await page.evaluate(() => playground.charts.acc.y.at(-1));
  assert.ok(accuracy > 0.5, `test accuracy after ${TRAIN_STEPS} steps: ${accuracy}`);
  assert.ok(pauseMs < 10000, `pause took ${pauseMs} ms`);
  assert.ok(frameMs < 250, `a frame took ${frameMs} ms while training`);
  assert.ok(stepsWhilePaused < TRAIN_STEPS, "paused before the end");

  const metrics = String(await downloaded(page, "#export-metrics")).trim().split("\n").map((line) => JSON.parse(line));
  assert.equal(metrics.filter((entry) => entry.event === "step").length, TRAIN_STEPS);
  assert.ok(metrics.some((entry) => entry.event === "finished"));
  // The charts in words for screen readers, and charts that follow the window's width.
  assert.match(await page.textContent("#chart-summary"), /^Step \d+, training loss [\d.]+.*memory counted against the cap [\d.]+ MiB, peak/);
  await page.screenshot({ path: join(artifacts, "playground.png"), fullPage: true });
  const wide = await page.evaluate(() => playground.charts.memory.width);
  await page.setViewportSize({ width: 640, height: 900 });
  await page.waitForFunction((before) => playground.charts.memory.width < before, wide);
  const narrow = await page.evaluate(() => ({ chart: playground.charts.memory.width, page: document.documentElement.clientWidth }));
  assert.ok(narrow.chart <= narrow.page, JSON.stringify(narrow));
  assert.deepEqual(problems, []);
  await page.close();
});

test("a cap just above a step's measured peak makes the enforcer shrink the micro-batch: the chart marks it and every sample stays under the cap", async () => {
  const { page, problems } = await openPage();
  const finish = () => page.waitForFunction(() => playground.state === "ended", null, { timeout: 300000 });
  // A narrow MLP at 2048 samples a step, no prefetch: the batch and its activations are
  // most of the peak (and SwiftShader runs it in seconds), so half the micro-batch fits
  // where the whole does not.
  await setRun(page, { dataset: "data/fashion-mnist", backend: "webgpu", layers: "64", cap: "", batch: 2048, steps: 3 });
  await page.fill("#prefetch", "0");
  await page.fill("#micro-batch", "2048");
  await page.waitForFunction(() => /^Plan: micro-batch 2048 /.test(document.getElementById("plan").textContent));
  await page.click("#start");
  // Shown once the probe steps are done.
  await page.waitForFunction(() => /Calibrated on probe steps: peak /.test(document.getElementById("plan").textContent), null, { timeout: 120000 });
  // Each probe was reported as it ran: the warm-up first, then what the calibration holds.
  const probes = await page.evaluate(() => {
    const entries = playground.log.entries();
    const reports = entries.filter((e) => e.event === "probe");
    const pair = (p) => [p.micro_batch, p.peak_reserved];
    return {
      first: reports[0],
      measured: reports.filter((p) => p.finished && p.stage !== "warm_up" && p.peak_reserved != null).map(pair),
      calibrated: entries.find((e) => e.event === "started").calibration.probes.map(pair),
    };
  });
  assert.equal(probes.first.stage, "warm_up");
  assert.equal(probes.first.finished, false);
  assert.ok(probes.measured.length > 0, "no probe was reported");
  assert.deepEqual(probes.measured, probes.calibrated);
  // Settings edited during the run are previewed once it ends: till then the plan panel
  // keeps the run's calibration.
  await page.evaluate(() => {
    const plan = document.getElementById("plan");
    window.calibrationLost = null;
    new MutationObserver(() => {
      if (playground.state === "running" && !/Calibrated on probe steps/.test(plan.textContent)) window.calibrationLost ??= plan.textContent;
    }).observe(plan, { childList: true, characterData: true, subtree: true });
  });
  await page.fill("#micro-batch", "1024");
  await finish();
  assert.equal(await page.evaluate(() => window.calibrationLost), null);
  const uncapped = await page.evaluate(() => playground.summary);
  assert.equal(uncapped.micro_batch, 2048);
  await page.waitForFunction(() => /^Plan: micro-batch 1024 /.test(document.getElementById("plan").textContent));
  await page.fill("#micro-batch", "2048");

  // 1 MiB above what the cap counts of the measured peak: a step at 2048 passes the
  // enforcer's 90% of it.
  const measured = uncapped.peak_memory.gpu_bytes_reserved + uncapped.peak_memory.data_bytes_held;
  const capMiB = Math.ceil(measured / MIB) + 1;
  await setRun(page, { cap: capMiB });
  await page.waitForFunction((cap) => document.getElementById("plan").textContent.includes(`of the ${cap}.0 MiB cap`), capMiB);
  await page.click("#start");
  await finish();
  assert.match(await page.textContent("#status"), /^Finished: 3 steps/);
  const markers = await page.evaluate(() => playground.charts.markers.map((m) => m.label));
  assert.ok(markers.length >= 1, "the enforcer never acted");
  assert.match(markers[0], /^micro-batch 2048→\d+$/);
  const samples = await page.evaluate(() => playground.charts.samples);
  assert.ok(samples.length >= 3, `samples: ${samples.length}`);
  assertEverySampleUnder(samples, capMiB * MIB);
  const finalLoss = await page.evaluate(() => playground.summary.final_loss);
  assert.ok(Math.abs(finalLoss - uncapped.final_loss) <= 1e-3 * Math.max(1, Math.abs(finalLoss)), `final loss ${finalLoss} capped, ${uncapped.final_loss} uncapped`);
  await page.screenshot({ path: join(artifacts, "playground-cap-edge.png"), fullPage: true });
  assert.deepEqual(problems, []);
  await page.close();
});

test("the MLP 784-256-10 trains under a 16 MiB cap: the plan includes the data pipeline, every sample stays under the cap, and the chart's scale follows the run", async () => {
  const { page, problems } = await openPage();
  await setRun(page, { dataset: "data/fashion-mnist", backend: "webgpu", layers: "256", cap: 16, batch: 256, steps: 12 });
  await page.waitForFunction(() => /of the 16\.0 MiB cap/.test(document.getElementById("plan").textContent), null, { timeout: 60000 });
  // Two streams of prefetched 4096-sample chunks would not fit: the planner fetches fewer
  // ahead or releases the training chunks while evaluating.
  assert.match(await page.textContent("#plan"), /prefetch [01]\b|paused for evaluation/);
  await page.click("#start");
  await page.waitForFunction(() => playground.state === "ended", null, { timeout: 300000 });
  assert.match(await page.textContent("#status"), /^Finished: 12 steps/);
  const started = await page.evaluate(() => playground.log.entries().find((e) => e.event === "started"));
  const summary = await page.evaluate(() => playground.summary);
  const samples = await page.evaluate(() => playground.charts.samples);
  assert.ok(samples.length >= 12, `samples: ${samples.length}`);
  let largest = 0;
  for (const sample of samples) {
    const counted = sample.gpu_bytes_reserved + sample.data_bytes_held;
    assert.ok(counted <= 16 * MIB, JSON.stringify(sample));
    for (const bytes of [sample.gpu_bytes_in_use, counted, sample.host_bytes, sample.js_heap_bytes]) {
      if (bytes != null) largest = Math.max(largest, bytes / MIB);
    }
  }
  // What the data pipeline held at its peak, against the planner's figure for it.
  const predicted = started.predicted.data;
  assert.ok(Math.abs(summary.data_peak_bytes - predicted) <= 0.1 * summary.data_peak_bytes, `data: predicted ${predicted}, held ${summary.data_peak_bytes}`);
  // The wasm memory is the largest series here (tens of MiB): the cap is in view and the
  // axis stays within 2x of what is plotted.
  const axisMax = await page.evaluate(() => playground.charts.memory.scales.y.max);
  assert.ok(axisMax >= largest && axisMax <= 2 * largest, `axis ${axisMax} MiB, largest series ${largest} MiB`);
  const capRow = await page.textContent('#memory-table tr[data-figure="cap"]');
  assert.match(capRow, /16\.0 MiB/);
  await page.screenshot({ path: join(artifacts, "playground-16mib.png"), fullPage: true });
  assert.deepEqual(problems, []);
  await page.close();
});

test("under a cap far above the run the chart scales to the run, and the cap's value is listed", async () => {
  const { page, problems } = await openPage();
  await setRun(page, { dataset: "data/fashion-mnist", backend: "webgpu", layers: "64", cap: 4096, batch: 64, steps: 3 });
  await page.waitForFunction(() => /of the 4\.0 GiB cap/.test(document.getElementById("plan").textContent), null, { timeout: 60000 });
  await page.click("#start");
  await page.waitForFunction(() => playground.state === "ended", null, { timeout: 300000 });
  const largest = await page.evaluate(() => playground.charts.largestSeries());
  const axisMax = await page.evaluate(() => playground.charts.memory.scales.y.max);
  assert.ok(axisMax <= 2 * largest, `axis ${axisMax} MiB for a largest series of ${largest} MiB`);
  const capRow = await page.textContent('#memory-table tr[data-figure="cap"]');
  assert.match(capRow, /4\.0 GiB.*above the chart's scale/);
  assert.deepEqual(problems, []);
  await page.close();
});

test("a cap too small for any plan is refused before training, naming the cap that fits", async () => {
  const { page, problems } = await openPage();
  await page.selectOption("#dataset", "data/fashion-mnist");
  await page.fill("#cap", "1");
  await page.waitForSelector("#plan.refused");
  const refusal = await page.textContent("#plan");
  assert.match(refusal, /Nothing fits: .*cap of 1\.0 MiB/);
  // Computed, not a fixed sentence: the smallest cap that fits (a figure the page gets as
  // data, not parsed from the text), and what each lever needs.
  const neededBytes = Number(await page.getAttribute("#plan", "data-needed-bytes"));
  assert.equal(Number(await page.getAttribute("#plan", "data-cap-bytes")), 1024 * 1024);
  assert.ok(neededBytes > 1024 * 1024, refusal);
  // The cap entered in MiB, rounded up to the tenth as the page shows it.
  const needed = Math.ceil((neededBytes / (1024 * 1024)) * 10 - 1e-9) / 10;
  assert.match(refusal, new RegExp(`the smallest cap that fits is ${needed.toFixed(1)} MiB`));
  // Precision and checkpointing are the planner's to pick under a cap (auto), so they were
  // weighed already: what is left to suggest is smaller chunks.
  assert.match(refusal, /No lever left to this run fits 1\.0 MiB \(it would need [\d.]+ MiB with chunks of \d+ samples[^)]*\)/);
  assert.doesNotMatch(refusal, /with checkpointing/);
  // The cap it names really fits.
  await page.fill("#cap", String(needed));
  await page.waitForFunction((cap) => document.getElementById("plan").textContent.includes(`of the ${cap.toFixed(1)} MiB cap`), needed, { timeout: 60000 });
  await page.fill("#cap", "1");
  await page.waitForSelector("#plan.refused");
  await page.click("#start");
  await page.waitForSelector("#status.error");
  assert.match(await page.textContent("#status"), /1\.0 MiB/);
  assert.equal(await page.getAttribute("#status", "data-kind"), "cap-too-small");
  assert.equal(await page.isEnabled("#start"), true, "the page stays usable after an error");
  assert.deepEqual(problems, []);
  await page.close();
});

test("the data pipeline check streams real Fashion-MNIST chunks in the worker, within the bound", async () => {
  const { page, problems } = await openPage();
  await page.selectOption("#dataset", "data/fashion-mnist");
  await page.click("summary");
  await page.click("#stream");
  await page.waitForFunction(() => !document.getElementById("figures").hidden || document.getElementById("stream-status").classList.contains("error"));
  assert.match(await page.textContent("#stream-status"), /^Done/);
  const figures = JSON.parse(await page.getAttribute("#figures", "data-figures"));
  assert.equal(figures.samples, 60000);
  assert.equal(figures.transport.retries, 0);
  assert.ok(figures.memory.peak_bytes_held > 0);
  assert.ok(figures.memory.peak_bytes_held <= figures.memory.bound_bytes, JSON.stringify(figures.memory));
  assert.deepEqual(problems, []);
  await page.close();
});

test("a dataset that is not there is reported in plain words on the page", async () => {
  const { page } = await openPage();
  await page.evaluate(() => document.getElementById("dataset").append(new Option("missing", "data/no-such-dataset")));
  await page.selectOption("#dataset", "data/no-such-dataset");
  await page.fill("#prefetch", "1");
  await page.waitForSelector("#plan.refused", { timeout: 30000 });
  const message = await page.textContent("#plan");
  assert.match(message, /no-such-dataset\/manifest\.json/);
  assert.match(message, /HTTP status 404/);
  assert.match(message, /headroom prepare/);
  // The advice follows the error's kind, which crossed the worker boundary typed.
  assert.equal(await page.getAttribute("#plan", "data-kind"), "dataset-missing");
  assert.equal(await page.isEnabled("#start"), true, "the page stays usable after an error");
  await page.close();
});

test("the GPT trains on Shakespeare in the page under a cap below half its unlevered peak: the planner accumulates, every sample stays under the cap, and generated text is shown", async () => {
  const { page, problems } = await openPage();
  await setRun(page, { model: "gpt", backend: "webgpu", cap: "", steps: 4 });
  assert.equal(await page.inputValue("#dataset"), "data/shakespeare", "the GPT picks the text dataset");
  for (const [id, value] of [["gpt-layers", 2], ["gpt-heads", 4], ["gpt-width", 32], ["gpt-context", 64], ["effective-batch", 64], ["sample-every", 2], ["micro-batch", "64"]]) {
    await page.fill(`#${id}`, String(value));
  }
  // The unlevered f32 peak as the planner sees it: the whole batch in one pass. 64 windows:
  // with attention that keeps nothing T x T, 32 left the fixed costs above 45% of the peak.
  await page.waitForFunction(() => /^Plan: micro-batch 64 .*\(no cap\)/.test(document.getElementById("plan").textContent), null, { timeout: 60000 });
  const unlevered = Number(await page.getAttribute("#plan", "data-predicted-peak"));
  // Less than half of it: the acceptance asks for a peak at least twice the cap.
  const capMiB = Math.floor((0.45 * unlevered) / MIB);
  await page.fill("#micro-batch", "auto");
  await page.fill("#cap", String(capMiB));
  await page.waitForFunction((cap) => new RegExp(`of the ${cap}\\.0 MiB cap`).test(document.getElementById("plan").textContent), capMiB, { timeout: 60000 });
  await page.click("#start");
  await page.waitForFunction(() => playground.state === "ended", null, { timeout: 600000 });
  assert.match(await page.textContent("#status"), /^Finished: 4 steps, .*test perplexity \d+\.\d+.*tokens\/s/);
  const started = await page.evaluate(() => playground.log.entries().find((e) => e.event === "started"));
  assert.ok(started.micro_batch < 64, `micro-batch ${started.micro_batch} under a cap of 45% of the unlevered peak`);
  assert.equal(started.effective_batch, 64);
  const samples = await page.evaluate(() => playground.charts.samples);
  assert.ok(samples.length >= 4, `samples: ${samples.length}`);
  assertEverySampleUnder(samples, capMiB * MIB);
  const texts = await page.evaluate(() => playground.log.entries().filter((e) => e.event === "sample").map((e) => e.text));
  assert.ok(texts.length >= 2, `samples of text: ${texts.length}`);
  const shown = await page.textContent("#sample-text");
  assert.ok(shown.length > 100 && shown.endsWith(texts.at(-1)), `shown: ${JSON.stringify(shown)}`);
  assert.match(await page.textContent("#progress"), /tokens\/s/);
  await page.screenshot({ path: join(artifacts, "playground-gpt.png"), fullPage: true });
  assert.deepEqual(problems, []);
  await page.close();
});

test("a WebGPU shader that fails to compile is caught as a problem, though Chromium only warns", async () => {
  // The guard every test above relies on (web/bench/harness.mjs, watchProblems): the browser hides
  // a kernel that did not compile behind a console warning, and the launch looks successful.
  const { page, problems } = await openPage();
  await page.evaluate(async () => {
    const device = await (await navigator.gpu.requestAdapter()).requestDevice();
    const module = device.createShaderModule({ code: "@compute @workgroup_size(1) fn main() { let x: f32 = missing; }" });
    device.createComputePipeline({ layout: "auto", compute: { module, entryPoint: "main" } });
    await device.queue.onSubmittedWorkDone();
  });
  // Chromium delivers the warnings a moment after the calls return.
  await new Promise((resolve) => setTimeout(resolve, 500));
  assert.ok(problems.some((text) => /WGSL/.test(text)), JSON.stringify(problems));
  assert.ok(problems.some((text) => /Invalid ShaderModule/.test(text)), JSON.stringify(problems));
  await page.close();
});
