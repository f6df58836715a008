// The playground's figures in headless Chromium: steady samples/s, peak device bytes,
// page load to first step, wasm size. Each case runs in a fresh browser, BENCH_ROUNDS
// times (cases take turns within a round); BENCH_CASES picks cases by a word of their name.
//   node web/bench/bench.mjs            (after web/scripts/build-wasm and cargo build --bin headroom)
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { countedBytes } from "../page/format.js";
import { launchChromium, median, openPlayground, repo, serve, setRun } from "./harness.mjs";

const WARMUP_STEPS = 3;
const allCases = [
  { name: "MLP 784-256-10, batch 256", model: "mlp", layers: "256", batch: 256, steps: 20 },
  // The same under a cap the data pipeline's default settings would break: the planner
  // fetches fewer chunks ahead and pauses the training stream for evaluation.
  { name: "MLP 784-256-10, batch 256, 16 MiB cap", model: "mlp", layers: "256", batch: 256, steps: 20, cap: 16, backends: ["webgpu"] },
  { name: "CNN 8,16 channels, batch 64", model: "cnn", layers: "8,16", batch: 64, steps: 12 },
];
const cases = allCases.filter((c) => !process.env.BENCH_CASES || process.env.BENCH_CASES.split(",").some((word) => c.name.includes(word)));
const backends = (process.env.BENCH_BACKENDS ?? "webgpu,cpu").split(",");
const rounds = Number(process.env.BENCH_ROUNDS ?? 1);

const mib = (bytes) => (bytes == null ? "—" : (bytes / 2 ** 20).toFixed(1));

async function measure(server, run, backend) {
  const browser = await launchChromium();
  try {
    const loadStarted = Date.now();
    const { page, problems } = await openPlayground(browser, server.url);
    await setRun(page, { dataset: "data/fashion-mnist", backend, cap: run.cap ?? "", model: run.model, layers: run.layers, batch: run.batch, steps: run.steps });
    await page.evaluate(() => (document.getElementById("micro-batch").value = "auto"));
    await page.click("#start");
    await page.waitForFunction(() => playground.state === "ended", null, { timeout: 600000 });
    const log = await page.evaluate(() => playground.log.entries());
    const steps = log.filter((entry) => entry.event === "step");
    if (steps.length !== run.steps) throw new Error(`${run.name} on ${backend}: ${await page.textContent("#status")}`);
    const memory = log.filter((entry) => entry.event === "step" || entry.event === "memory").map((e) => e.memory ?? e);
    const config = log.find((entry) => entry.event === "config");
    const started = log.find((entry) => entry.event === "started");
    const steady = steps.slice(WARMUP_STEPS);
    const counted = memory.map(countedBytes);
    return {
      case: run.name,
      backend: started.backend,
      samples_per_sec: median(steady.map((s) => s.samples_per_sec)),
      // Wall time over the steps after warm-up, chunk fetches included.
      run_samples_per_sec: ((steady.length - 1) * run.batch * 1000) / (steady.at(-1).at - steady[0].at),
      peak_counted: Math.max(...counted),
      data: started.data,
      load_to_first_step_s: (steps[0].at - loadStarted) / 1000,
      start_to_first_step_s: (steps[0].at - config.at) / 1000,
      peak_gpu_reserved: Math.max(...memory.map((m) => m.gpu_bytes_reserved ?? 0)) || null,
      peak_gpu_in_use: Math.max(...memory.map((m) => m.gpu_bytes_in_use ?? 0)) || null,
      peak_wasm_memory: Math.max(...memory.map((m) => m.host_bytes ?? 0)),
      predicted_peak: started.predicted_peak,
      final_loss: steps.at(-1).loss,
      console_errors: problems.length,
    };
  } finally {
    await browser.close();
  }
}

const server = await serve();
const results = [];
try {
  for (let round = 0; round < rounds; round += 1) {
    for (const run of cases) {
      for (const backend of run.backends ?? backends) results.push(await measure(server, run, backend));
    }
  }
} finally {
  server.stop();
}
const wasm = readFileSync(join(repo, "static", "pkg", "headroom_bg.wasm"));
console.log(`wasm: ${mib(wasm.length)} MiB raw, ${mib(gzipSync(wasm, { level: 9 }).length)} MiB gzip -9`);
console.log("| case | backend | samples/s | over the run | load → 1st step | Start → 1st step | peak reserved | peak in use | counted against a cap | predicted | data | wasm memory |");
console.log("|---|---|---|---|---|---|---|---|---|---|---|---|");
for (const r of results) {
  const data = `prefetch ${r.data.prefetch}${r.data.pause_training_for_eval ? ", paused for eval" : ""}`;
  console.log(
    `| ${r.case} | ${r.backend} | ${r.samples_per_sec.toFixed(0)} | ${r.run_samples_per_sec.toFixed(0)} | ${r.load_to_first_step_s.toFixed(1)} s | ${r.start_to_first_step_s.toFixed(1)} s | ${mib(r.peak_gpu_reserved)} MiB | ${mib(r.peak_gpu_in_use)} MiB | ${mib(r.peak_counted)} MiB | ${mib(r.predicted_peak)} MiB | ${data} | ${mib(r.peak_wasm_memory)} MiB |`,
  );
}
console.log(JSON.stringify({ wasm_bytes: wasm.length, wasm_gzip_bytes: gzipSync(wasm, { level: 9 }).length, results }));
