// A long run in the page at a tight cap, in headless Chromium on WebGPU: does the
// reservation stop growing after warm-up, does the enforcer stop acting after the first
// steps, do the worker's wasm memory and the page's heap stay flat, and does the run,
// reloaded halfway, resume from its checkpoint and finish with every step's loss?
//   node web/bench/soak.mjs    (after web/scripts/build-wasm and cargo build --bin headroom)
//   SOAK_STEPS=1000 SOAK_TIGHTNESS=1.05 SOAK_LAYERS=64 SOAK_BATCH=128
import { countedBytes as counted } from "../page/format.js";
import { launchChromium, openPlayground, serve, setRun } from "./harness.mjs";

const steps = Number(process.env.SOAK_STEPS ?? 1000);
const tightness = Number(process.env.SOAK_TIGHTNESS ?? 1.05);
const run = { dataset: "data/fashion-mnist", backend: "webgpu", layers: process.env.SOAK_LAYERS ?? "64", batch: Number(process.env.SOAK_BATCH ?? 128) };
const saveEvery = Math.max(1, Math.round(steps / 10));
const mib = (bytes) => (bytes == null ? "—" : `${(bytes / 2 ** 20).toFixed(1)} MiB`);
const ended = (page) => page.waitForFunction(() => playground.state === "ended", null, { timeout: 3600000 });

const server = await serve();
const browser = await launchChromium();
try {
  const { page, problems } = await openPlayground(browser, server.url);
  // The peak of a few uncapped steps sets the cap.
  await setRun(page, { ...run, cap: "", steps: 5 });
  await page.fill("#save-every", "0");
  await page.click("#start");
  await ended(page);
  const probe = await page.evaluate(() => playground.summary.peak_memory);
  const cap = Math.ceil((counted(probe) * tightness) / 2 ** 20);

  await setRun(page, { cap, steps });
  await page.fill("#save-every", String(saveEvery));
  await page.waitForFunction((c) => document.getElementById("plan").textContent.includes(`of the ${c}.0 MiB cap`), cap);
  await page.click("#start");
  const half = Math.floor(steps / 2);
  await page.waitForFunction((n) => playground.log.entries().some((e) => e.event === "step" && e.step >= n), half, { timeout: 3600000 });
  const before = await page.evaluate(() => playground.log.entries());
  await page.reload();
  await page.waitForFunction(() => document.getElementById("status").textContent === "Ready.");
  await page.waitForSelector("#saved-list li");
  const resumedAt = Number(/step (\d+) of/.exec(await page.textContent("#saved-list li"))[1]);
  await page.click("#saved-list li button:text('Resume')");
  await ended(page);
  const after = await page.evaluate(() => playground.log.entries());
  const heap = await page.evaluate(() => playground.charts.heapBytes);

  const stepsOf = (log) => log.filter((e) => e.event === "step" && !e.replayed);
  const first = stepsOf(before);
  const second = stepsOf(after);
  const all = [...first.filter((s) => s.step <= resumedAt), ...second];
  // Each worker has its own device pool: growth is judged within each, after its warm-up.
  const warm = 20;
  const growth = (run) => {
    const counts = run.map((s) => counted(s.memory));
    return { atWarm: counts[warm - 1], after: Math.max(...counts.slice(warm)), last: counts.at(-1) };
  };
  const firstWorker = growth(first);
  const secondWorker = growth(second);
  const memory = all.map((s) => s.memory);
  const wasm = (log) => log.filter((e) => e.event === "memory" || e.event === "step").map((e) => e.host_bytes ?? e.memory?.host_bytes).filter(Boolean);
  const enforcements = [...before, ...after].filter((e) => e.event === "enforced").map((e) => e.step);
  const losses = after.filter((e) => e.event === "step");
  const gaps = losses.filter((e, i) => e.step !== i + 1).length;
  console.log(`${steps} steps of MLP 784-${run.layers}-10, batch ${run.batch}, on WebGPU in headless Chromium under a cap of ${cap} MiB (${tightness}x the ${mib(counted(probe))} 5 uncapped steps reached), saved every ${saveEvery} steps`);
  console.log(`counted (device reservation + data): step 10 ${mib(counted(memory[9]))}, step 100 ${mib(counted(memory[99]))}, step ${steps} ${mib(counted(memory.at(-1)))}; cap ${cap} MiB`);
  console.log(`first worker: ${mib(firstWorker.atWarm)} at its step ${warm}, at most ${mib(firstWorker.after)} after it, ${mib(firstWorker.last)} at its last step; the resumed worker: ${mib(secondWorker.atWarm)}, ${mib(secondWorker.after)}, ${mib(secondWorker.last)}`);
  console.log(`worker wasm memory: first run ${mib(Math.min(...wasm(before)))}-${mib(Math.max(...wasm(before)))}, after the reload ${mib(Math.min(...wasm(after)))}-${mib(Math.max(...wasm(after)))}; page JS heap at the end ${mib(heap)}`);
  console.log(`enforcements: ${enforcements.length} (after steps ${JSON.stringify(enforcements)})`);
  console.log(`reloaded after step ${first.at(-1).step}, resumed from the checkpoint at step ${resumedAt}: ${losses.length} step losses in the page's log (${gaps} out of place), status "${await page.textContent("#status")}"`);
  console.log(`console problems: ${problems.length}`);
} finally {
  await browser.close();
  server.stop();
}
