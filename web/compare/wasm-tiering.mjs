// How V8's tiering shapes the browser CPU pair: the MLP of web/compare/run on Headroom's CPU
// fallback and TF.js's wasm backend, in Chromium as shipped and with eager TurboFan
// (`--no-liftoff --no-wasm-dynamic-tiering`, which no page can ask for). Prints each run's
// median step and the medians of each 16 steps, so the switch from Liftoff's baseline code
// shows where it happens.
//   HEADROOM_BIN=target/release/headroom node web/compare/wasm-tiering.mjs [--steps 200] [--runs 2]
import { parseArgs } from "node:util";
import { launchChromium, median, runCompareCase, serve } from "../bench/harness.mjs";

const { values: options } = parseArgs({
  options: { steps: { type: "string", default: "200" }, runs: { type: "string", default: "2" } },
});
const STEPS = Number(options.steps);
const RUNS = Number(options.runs);
const WARMUP = 3;
const BLOCK = 16;
const SETTINGS = [
  { name: "as shipped", flags: [] },
  { name: "eager TurboFan", flags: ["--js-flags=--no-liftoff --no-wasm-dynamic-tiering"] },
];
const PEERS = [
  { framework: "headroom", backend: "cpu" },
  { framework: "tfjs", backend: "wasm" },
];

async function stepMilliseconds(url, flags, peer) {
  const browser = await launchChromium(flags);
  try {
    const result = await runCompareCase(browser, url, {
      ...peer, model: "mlp", layers: [128], batch: 256, steps: STEPS, eval_samples: 100,
      learning_rate: 1e-3, epsilon: 1e-8, data: "/data/fashion-mnist/",
    });
    return result.steps.map((step) => step.seconds * 1000);
  } finally {
    await browser.close();
  }
}

const server = await serve();
try {
  // Interleaved, a fresh browser each time, so a noisy minute burdens every setting alike.
  for (let run = 1; run <= RUNS; run++) {
    for (const setting of SETTINGS) {
      for (const peer of PEERS) {
        const ms = await stepMilliseconds(server.url, setting.flags, peer);
        const blocks = [];
        for (let at = 0; at < ms.length; at += BLOCK) blocks.push(median(ms.slice(at, at + BLOCK)).toFixed(1));
        console.log(`run ${run}, ${setting.name}, ${peer.framework} ${peer.backend}: median step ${median(ms.slice(WARMUP)).toFixed(1)} ms; per ${BLOCK} steps: ${blocks.join(" ")}`);
      }
    }
  }
} finally {
  server.stop();
}
