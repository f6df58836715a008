// Headroom side by side with the tools people use instead, on the same work in one run:
// TensorFlow.js 4.22.0 (WebGPU, wasm) in the same headless Chromium, same adapter, same
// page server; PyTorch (CPU) natively. Prints a table of Headroom / peer and writes JSON.
//   web/compare/run [--runs 3] [--steps 12] [--warmup 3] [--eval-samples 1000] [--only browser|native]
//   web/compare/run --from tests/artifacts/compare.json     (the table of a saved run)
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { cpus, totalmem } from "node:os";
import { dirname, join } from "node:path";
import { parseArgs } from "node:util";
import { launchChromium, median, repo, runCompareCase, serve } from "../bench/harness.mjs";

const { values: options } = parseArgs({
  options: {
    runs: { type: "string", default: "3" },
    steps: { type: "string", default: "12" },
    warmup: { type: "string", default: "3" },
    "eval-samples": { type: "string", default: "1000" },
    only: { type: "string" },
    out: { type: "string", default: join(repo, "tests", "artifacts", "compare.json") },
    // Prints the table of a report this command wrote, without running anything.
    from: { type: "string" },
  },
});
const saved = options.from ? JSON.parse(readFileSync(options.from, "utf8")) : null;
if (saved) {
  options.runs = String(saved.settings.runs);
  options.steps = String(saved.settings.steps);
  options.warmup = String(saved.settings.warmup_steps);
  options["eval-samples"] = String(saved.settings.eval_samples);
}
const RUNS = Number(options.runs);
const STEPS = Number(options.steps);
const WARMUP = Number(options.warmup);
const EVAL_SAMPLES = Number(options["eval-samples"]);
if (!(RUNS >= 1 && STEPS > WARMUP && WARMUP >= 1 && EVAL_SAMPLES >= 1)) {
  throw new Error("need --runs >= 1, --steps > --warmup >= 1 and --eval-samples >= 1");
}
const LEARNING_RATE = 1e-3;
const EPSILON = 1e-8;
const CASES = [
  { name: "MLP 784-128-10", model: "mlp", layers: [128], batch: 256 },
  { name: "CNN 8,16 ch", model: "cnn", layers: [8, 16], batch: 64 },
];
// Each pair: Headroom's backend against the peer's closest one. A CPU step takes
// milliseconds, where one on SwiftShader takes seconds, so the browser's CPU pair and every
// native run (lavapipe is a CPU too) run CPU_STEPS_FACTOR times the steps. In the browser
// V8 first runs the wasm module as Liftoff's baseline code and swaps in TurboFan's per hot
// function: Headroom's first ~35 MLP steps took 22-24 ms, every later one ~7 ms, and with
// eager TurboFan (`node web/compare/wasm-tiering.mjs`) all of them ~6.5 ms. At 48 steps the
// median fell on either side of that switch (ratios 1.13x-1.52x between runs); at 192 it
// is the steady state, and the switch shows in the warm-up and first-step figures.
const CPU_STEPS_FACTOR = 16;
// A saved report from before CPU_STEPS_FACTOR ran its CPU pairs at STEPS.
const CPU_STEPS = saved ? (saved.settings.cpu_steps ?? STEPS) : STEPS * CPU_STEPS_FACTOR;
const BROWSER_PAIRS = [
  { headroom: "webgpu", peer: "webgpu", steps: STEPS },
  { headroom: "cpu", peer: "wasm", steps: CPU_STEPS },
];
// flex is the CPU backend; ndarray, which burn deprecates, stays beside it for comparison
// (web/compare/run builds with the `ndarray` feature).
const NATIVE_BACKENDS = ["flex", "ndarray", "wgpu"];

const max = (values) => {
  const known = values.filter((v) => v != null);
  return known.length ? Math.max(...known) : null;
};

async function inFreshBrowser(server, spec) {
  const browser = await launchChromium();
  try {
    return await runCompareCase(browser, server.url, spec);
  } finally {
    await browser.close();
  }
}

async function browserRuns() {
  const server = await serve();
  const runs = [];
  try {
    for (const testCase of CASES) {
      for (let run = 0; run < RUNS; run++) {
        // Interleaved, a fresh browser for each: a noisy minute burdens every side alike.
        for (const pair of BROWSER_PAIRS) {
          for (const [framework, backend] of [["headroom", pair.headroom], ["tfjs", pair.peer]]) {
            const spec = {
              framework, backend, model: testCase.model, layers: testCase.layers, batch: testCase.batch,
              steps: pair.steps, eval_samples: EVAL_SAMPLES, learning_rate: LEARNING_RATE, epsilon: EPSILON,
              data: "/data/fashion-mnist/",
            };
            const label = `${testCase.name}: ${framework} ${backend} run ${run + 1}`;
            try {
              const result = await inFreshBrowser(server, spec);
              runs.push({ case: testCase.name, run, where: "browser", requested: backend, ...result });
              console.error(`  ${label}: ${result.wall_seconds.toFixed(1)} s`);
            } catch (error) {
              // A peer that cannot do the work is a finding, not the end of the comparison.
              const message = error.message.replace(/^page\.evaluate: (Error: )?/, "").split("\n")[0];
              runs.push({ case: testCase.name, run, where: "browser", framework, requested: backend, error: message });
              console.error(`  ${label}: failed: ${message}`);
            }
          }
        }
      }
    }
  } finally {
    server.stop();
  }
  return runs;
}

function nativeRuns() {
  const cases = CASES.map((c) => ({ ...c, layers: c.layers.join(",") }));
  const out = execFileSync(
    "python3",
    [
      join(repo, "web", "compare", "native.py"),
      "--headroom", process.env.HEADROOM_BIN,
      "--torch-python", process.env.HEADROOM_TORCH_PYTHON ?? "python3",
      "--data", join(repo, "static", "data", "fashion-mnist"),
      "--cases", JSON.stringify(cases),
      "--runs", String(RUNS), "--steps", String(CPU_STEPS), "--eval-samples", String(EVAL_SAMPLES),
      "--lr", String(LEARNING_RATE), "--backends", NATIVE_BACKENDS.join(","),
    ],
    { stdio: ["ignore", "pipe", "inherit"], maxBuffer: 1 << 26 },
  );
  return JSON.parse(out).map((run) => ({ where: "native", requested: run.framework === "pytorch" ? "pytorch" : run.backend, ...run }));
}

/// One run's figures: steady speed from the median step after warm-up, and what it held.
function figures(run, batch) {
  const seconds = run.steps.map((s) => s.seconds);
  const atWarmupEnd = run.steps[WARMUP - 1].memory ?? {};
  const atEnd = run.steps.at(-1).memory ?? {};
  return {
    samples_per_sec: batch / median(seconds.slice(WARMUP)),
    warmup_seconds: seconds.slice(0, WARMUP).reduce((a, b) => a + b, 0),
    first_step_at: run.steps[0].at ?? null,
    peak_gpu_reserved: max(run.steps.map((s) => s.memory?.peak_reserved ?? s.memory?.reserved ?? null)),
    // What tensors hold between steps (TF.js's numBytesInGPU), at its highest.
    peak_gpu_in_use: max(run.steps.map((s) => s.memory?.in_use ?? null)),
    reserved_growth: atEnd.reserved != null && atWarmupEnd.reserved != null ? atEnd.reserved - atWarmupEnd.reserved : null,
    tensor_growth: atEnd.tensors != null ? atEnd.tensors - atWarmupEnd.tensors : null,
    peak_wasm: max(run.steps.map((s) => s.memory?.wasm_bytes ?? null)),
    peak_rss: run.peak_rss ?? null,
    final_loss: run.steps.at(-1).loss,
    test_loss: run.eval?.loss ?? null,
    test_accuracy: run.eval?.accuracy ?? null,
  };
}

/// Medians over the runs of one case on one framework and backend.
function summarise(runs) {
  const groups = new Map();
  for (const run of runs) {
    const key = `${run.where}|${run.case}|${run.framework}|${run.requested}`;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(run);
  }
  return [...groups.values()].map((group) => {
    const { where, case: name, framework, requested } = group[0];
    const failed = group.find((run) => run.error);
    if (failed) return { where, case: name, framework, requested, backend: requested, runs: group.length, error: failed.error };
    const { backend, threads } = group[0];
    const batch = CASES.find((c) => c.name === name).batch;
    const each = group.map((run) => figures(run, batch));
    const summary = { where, case: name, framework, requested, backend, threads, runs: group.length };
    for (const field of Object.keys(each[0])) summary[field] = median(each.map((f) => f[field]));
    summary.samples_per_sec_each_run = each.map((f) => Math.round(f.samples_per_sec));
    return summary;
  });
}

const fmt = {
  int: (v) => (v == null ? "—" : Math.round(v).toLocaleString("en-US")),
  s: (v) => (v == null ? "—" : `${v.toFixed(1)} s`),
  mib: (v) => (v == null ? "—" : `${(v / 2 ** 20).toFixed(1)} MiB`),
  loss: (v) => (v == null ? "—" : v.toFixed(3)),
  pct: (v) => (v == null ? "—" : `${(v * 100).toFixed(1)}%`),
  ratio: (a, b) => (a == null || b == null || b === 0 ? "—" : `${(a / b).toFixed(2)}x`),
  growth: (v, unit) => (v == null ? "—" : unit === "tensors" ? `${v} tensors` : `${(v / 2 ** 20).toFixed(1)} MiB`),
};

function table(summaries) {
  const find = (where, name, framework, requested) =>
    summaries.find((s) => s.where === where && s.case === name && s.framework === framework && s.requested === requested);
  const lines = [
    `| model | Headroom | peer | samples/s Headroom / peer | speed ratio | warm-up (${WARMUP} steps) | peak memory | final train loss | test accuracy | growth after warm-up |`,
    "|---|---|---|---|---|---|---|---|---|---|",
  ];
  const pairs = [
    ...BROWSER_PAIRS.map((p) => ({ where: "browser", headroom: p.headroom, framework: "tfjs", peer: p.peer, peerName: `TF.js ${p.peer}` })),
    ...NATIVE_BACKENDS.map((b) => ({ where: "native", headroom: b, framework: "pytorch", peer: "pytorch", peerName: "PyTorch CPU" })),
  ];
  for (const { name } of CASES) {
    for (const pair of pairs) {
      const ours = find(pair.where, name, "headroom", pair.headroom);
      const theirs = find(pair.where, name, pair.framework, pair.peer);
      if (!ours || !theirs) continue;
      const ourLabel = { webgpu: "browser WebGPU", cpu: "browser CPU fallback (flex, wasm, 1 thread)" }[pair.headroom] ?? `native ${pair.headroom}`;
      const peerLabel = theirs.threads ? `${pair.peerName} (${theirs.threads} thread${theirs.threads > 1 ? "s" : ""})` : pair.peerName;
      const failure = [ours, theirs].find((s) => s.error);
      if (failure) {
        const who = failure === ours ? "Headroom" : pair.peerName;
        // Where only the peer failed, Headroom's own figure still stands.
        const ourFigure = failure === theirs && !ours.error ? ` (Headroom: ${fmt.int(ours.samples_per_sec)} samples/s)` : "";
        lines.push(`| ${name} | ${ourLabel} | ${peerLabel} | ${who} fails: ${failure.error}${ourFigure} | | | | | | |`);
        continue;
      }
      const gpu = ours.peak_gpu_reserved != null || theirs.peak_gpu_reserved != null;
      const memory = pair.where === "native"
        ? `RSS ${fmt.mib(ours.peak_rss)} / ${fmt.mib(theirs.peak_rss)}`
        : gpu ? `GPU reserved ${fmt.mib(ours.peak_gpu_reserved)} / ${fmt.mib(theirs.peak_gpu_reserved)}, in use ${fmt.mib(ours.peak_gpu_in_use)} / ${fmt.mib(theirs.peak_gpu_in_use)}`
        : `wasm heap ${fmt.mib(ours.peak_wasm)} / ${fmt.mib(theirs.peak_wasm)}`;
      const growth = pair.where === "native" ? "—"
        : `${fmt.growth(ours.reserved_growth)} / ${theirs.tensor_growth == null ? "—" : fmt.growth(theirs.tensor_growth, "tensors")}`;
      lines.push(
        `| ${name} | ${ourLabel} | ${peerLabel} | ${fmt.int(ours.samples_per_sec)} / ${fmt.int(theirs.samples_per_sec)} | ${fmt.ratio(ours.samples_per_sec, theirs.samples_per_sec)} | ${fmt.s(ours.warmup_seconds)} / ${fmt.s(theirs.warmup_seconds)} | ${memory} | ${fmt.loss(ours.final_loss)} / ${fmt.loss(theirs.final_loss)} | ${fmt.pct(ours.test_accuracy)} / ${fmt.pct(theirs.test_accuracy)} | ${growth} |`,
      );
    }
  }
  return lines.join("\n");
}

const runs = saved?.runs ?? [];
if (!saved && options.only !== "native") runs.push(...(await browserRuns()));
if (!saved && options.only !== "browser") runs.push(...nativeRuns());
const summaries = summarise(runs);
const machine = saved?.machine ?? `${cpus().length} cores (${cpus()[0]?.model ?? "unknown CPU"}), ${(totalmem() / 2 ** 30).toFixed(0)} GiB`;
const report = {
  date: saved?.date ?? new Date().toISOString(),
  machine,
  settings: { runs: RUNS, steps: STEPS, cpu_steps: CPU_STEPS, warmup_steps: WARMUP, eval_samples: EVAL_SAMPLES, learning_rate: LEARNING_RATE, epsilon: EPSILON, cases: CASES },
  summaries,
  runs,
};
if (!saved) {
  mkdirSync(dirname(options.out), { recursive: true });
  writeFileSync(options.out, JSON.stringify(report, null, 1));
}
console.log(`${report.date.slice(0, 10)}, ${machine}; ${RUNS} runs of ${STEPS} steps each on WebGPU, ${CPU_STEPS} on the CPU, medians; speed ratio = Headroom / peer`);
console.log(table(summaries));
console.log(`JSON: ${saved ? options.from : options.out}`);
