// Two or more builds of the wasm module side by side in Chromium, on one case of the
// comparison (web/compare): how a change to the module (wasm-opt's level, a commit) moves
// Headroom's step. Each module is served from its own root with static/data, interleaved
// (every module once per round, a fresh browser each time) so a noisy minute burdens all.
//   HEADROOM_BIN=target/release/headroom node web/compare/modules.mjs \
//     --modules oz=/tmp/oz.wasm,o3=static/pkg/headroom_bg.wasm [--backend cpu|webgpu] \
//     [--rounds 3] [--steps 200] [--skip 50] [--model mlp|cnn]
// A module is a .wasm file (served with static/pkg's JS glue, so it must come from the same
// crate surface) or a folder holding wasm-bindgen's headroom.js and headroom_bg.wasm.
// --skip: the steps left out of the median; on the CPU V8 runs the first ~35 on Liftoff's
// baseline code (web/compare/wasm-tiering.mjs), on WebGPU the first compiles the shaders.
import { copyFileSync, mkdtempSync, rmSync, statSync, symlinkSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { launchChromium, median, repo, runCompareCase, serveFolders } from "../bench/harness.mjs";

const { values: options } = parseArgs({
  options: {
    modules: { type: "string" },
    backend: { type: "string", default: "cpu" },
    rounds: { type: "string", default: "3" },
    steps: { type: "string", default: "200" },
    skip: { type: "string" },
    model: { type: "string", default: "mlp" },
  },
});
// The comparison's two cases (web/compare/run.mjs): the MLP at batch 256, the CNN at 64.
const CASES = {
  mlp: { model: "mlp", layers: [128], batch: 256, title: "MLP 784-128-10" },
  cnn: { model: "cnn", layers: [8, 16], batch: 64, title: "CNN 8,16 ch" },
};
const CASE = CASES[options.model];
if (!CASE) throw new Error(`--model takes mlp or cnn, got "${options.model}"`);
const BATCH = CASE.batch;
const ROUNDS = Number(options.rounds);
const STEPS = Number(options.steps);
const SKIP = Number(options.skip ?? (options.backend === "cpu" ? 50 : 3));
const modules = (options.modules ?? "").split(",").filter(Boolean).map((entry) => {
  const [name, path] = entry.split("=");
  if (!name || !path) throw new Error(`--modules takes name=path pairs, got "${entry}"`);
  return { name, path: resolve(path) };
});
if (modules.length < 1 || !["cpu", "webgpu"].includes(options.backend) || !(STEPS > SKIP) || !(ROUNDS >= 1)) {
  throw new Error("need --modules name=path[,...], --backend cpu|webgpu, --steps > --skip and --rounds >= 1");
}

/// A served root per module: pkg/ with the glue and the module, data/ linked to static/data.
function rootFor(module, parent) {
  const root = join(parent, module.name);
  const pkg = join(root, "pkg");
  mkdirSync(pkg, { recursive: true });
  const folder = statSync(module.path).isDirectory();
  const glue = folder ? module.path : join(repo, "static", "pkg");
  copyFileSync(join(glue, "headroom.js"), join(pkg, "headroom.js"));
  copyFileSync(folder ? join(module.path, "headroom_bg.wasm") : module.path, join(pkg, "headroom_bg.wasm"));
  symlinkSync(join(repo, "static", "data"), join(root, "data"));
  return root;
}

const parent = mkdtempSync(join(tmpdir(), "headroom-modules-"));
const results = new Map(modules.map((m) => [m.name, []]));
try {
  const binary = process.env.HEADROOM_BIN ?? join(repo, "target", "debug", "headroom");
  const servers = new Map();
  for (const m of modules) servers.set(m.name, await serveFolders(binary, ["--root", rootFor(m, parent), "--web", join(repo, "web")]));
  try {
    for (let round = 1; round <= ROUNDS; round++) {
      for (const m of modules) {
        const browser = await launchChromium();
        try {
          const run = await runCompareCase(browser, servers.get(m.name).url, {
            framework: "headroom", backend: options.backend, model: CASE.model, layers: CASE.layers, batch: BATCH,
            steps: STEPS, eval_samples: 100, learning_rate: 1e-3, epsilon: 1e-8, data: "/data/fashion-mnist/",
          });
          const kept = run.steps.slice(SKIP).map((s) => s.seconds * 1000);
          const ms = median(kept);
          // Over the kept steps as a whole: a build that lets steps overlap shows it here.
          const throughput = (BATCH * kept.length * 1000) / kept.reduce((sum, s) => sum + s, 0);
          results.get(m.name).push({ ms, throughput });
          console.log(`round ${round}, ${m.name}: median step ${ms.toFixed(2)} ms after ${SKIP}, ${Math.round(throughput)} samples/s over them; first step at ${run.steps[0].at.toFixed(2)} s`);
        } finally {
          await browser.close();
        }
      }
    }
  } finally {
    for (const server of servers.values()) server.stop();
  }
} finally {
  rmSync(parent, { recursive: true, force: true });
}
console.log(`\n${CASE.title}, batch ${BATCH}, ${options.backend}, ${ROUNDS} rounds of ${STEPS} steps: medians over the rounds (range)`);
for (const [name, rounds] of results) {
  const ms = rounds.map((r) => r.ms).sort((a, b) => a - b);
  const throughput = rounds.map((r) => r.throughput).sort((a, b) => a - b);
  console.log(`${name}: median step ${median(ms).toFixed(2)} ms (${ms[0].toFixed(2)}-${ms.at(-1).toFixed(2)}), ` +
    `${Math.round((BATCH * 1000) / median(ms))} samples/s; over the kept steps ${Math.round(median(throughput))} samples/s ` +
    `(${Math.round(throughput[0])}-${Math.round(throughput.at(-1))})`);
}
