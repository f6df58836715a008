// The GPT ladder in the page (issue 44): each rung trains under its cap from the playground's
// cap field, precision, checkpointing, moments and micro-batch left on auto, on the page's
// WebGPU in headless Chromium; one line each: the levers the page picked, its calibrated
// figure, the measured peak (device reserved + data held, every sample), the loss.
// `headroom bench ladder` is the native counterpart.
//   node web/bench/ladder.mjs [--runs 64:4x128,256:8x512,1024:12x768] [--steps 20]
//                             [--batch 8] [--context 256] [--timeout-min 600] [--plan-only]
//                             [--fix checkpointing=on,moments=8bit,micro-batch=8] [--probes]
//                             [--progress-min 5]
// (after web/scripts/build-wasm and cargo build --bin headroom; HEADROOM_BIN names another).
// A run is CAP_MIB:LAYERSxWIDTH, with as many heads as layers (nanoGPT's shapes).
// --plan-only prints the page's plan line for each (the census, in seconds) and trains nothing.
// --fix sets form fields by id (a lever fixed by hand stays fixed); --probes prints each probe
// step's census against the reservation it measured, to check the census in the page.
// Every --progress-min minutes a line on stderr says how far the rung got.
import { parseArgs } from "node:util";
import { countedBytes, describeLevers, formatBytes, fromMiB } from "../page/format.js";
import { launchChromium, openPlayground, serve, setRun } from "./harness.mjs";

const { values: options } = parseArgs({
  options: {
    runs: { type: "string", default: "64:4x128,256:8x512,1024:12x768" },
    steps: { type: "string", default: "20" },
    batch: { type: "string", default: "8" },
    context: { type: "string", default: "256" },
    "timeout-min": { type: "string", default: "600" },
    "plan-only": { type: "boolean", default: false },
    fix: { type: "string", default: "" },
    probes: { type: "boolean", default: false },
    "progress-min": { type: "string", default: "5" },
  },
});

function parseRun(text) {
  const match = /^(\d+):(\d+)x(\d+)$/.exec(text.trim());
  if (!match) throw new Error(`a run is CAP_MIB:LAYERSxWIDTH, like 256:8x512; got ${JSON.stringify(text)}`);
  const [, cap, layers, width] = match.map(Number);
  return { cap, layers, width, name: `${layers}x${width} under ${cap} MiB` };
}

// A rung can take hours on SwiftShader: say on stderr, every few minutes, how far it got.
async function waitWithProgress(page, run, started) {
  const deadline = started + Number(options["timeout-min"]) * 60000;
  for (;;) {
    // A failed run ends, and its fresh worker makes the page ready again within a poll.
    const done = () => ["ended", "ready"].includes(playground.state);
    const wait = { timeout: Number(options["progress-min"]) * 60000, polling: 5000 };
    const ended = await page.waitForFunction(done, null, wait).then(() => true, () => false);
    if (ended) return;
    if (Date.now() > deadline) {
      // Its row says where it stopped.
      console.error(`${run.name}: not ended in ${options["timeout-min"]} min`);
      return;
    }
    const { probes, steps, loss, state, status } = await page.evaluate(() => {
      const entries = playground.log.entries();
      const steps = entries.filter((entry) => entry.event === "step");
      return {
        probes: entries.filter((entry) => entry.event === "probe" && entry.finished).length,
        steps: steps.length,
        loss: steps.at(-1)?.loss,
        state: playground.state,
        status: document.getElementById("status").textContent,
      };
    });
    const minutes = ((Date.now() - started) / 60000).toFixed(1);
    const last = loss === undefined ? "" : `, loss ${loss.toFixed(3)}`;
    console.error(`${run.name}: ${minutes} min, ${probes} probe(s), ${steps} of ${options.steps} steps${last}; ${state}: ${status}`);
  }
}

async function train(server, run) {
  const browser = await launchChromium();
  try {
    const { page, problems } = await openPlayground(browser, server.url);
    await setRun(page, { model: "gpt", backend: "webgpu", cap: run.cap, batch: options.batch, steps: options.steps });
    for (const [id, value] of [["gpt-layers", run.layers], ["gpt-heads", run.layers], ["gpt-width", run.width], ["gpt-context", options.context], ["micro-batch", "auto"]]) {
      await page.fill(`#${id}`, String(value));
    }
    for (const [id, value] of options.fix.split(",").filter(Boolean).map((pair) => pair.split("="))) {
      const select = await page.$eval(`#${id}`, (field) => field.tagName === "SELECT");
      await (select ? page.selectOption(`#${id}`, value) : page.fill(`#${id}`, value));
    }
    // The plan line names the cap once it is planned for this shape, fit or not.
    const capText = formatBytes(fromMiB(run.cap));
    const planned = await page
      .waitForFunction((text) => document.getElementById("plan").textContent.includes(text), capText, { timeout: 120000 })
      .then(() => true, () => false);
    const plan = await page.textContent("#plan");
    if (!planned) return { run, outcome: `no plan for this cap in 2 min: ${plan}` };
    if (!/^Plan: /.test(plan)) return { run, outcome: `refused: ${plan}` };
    if (options["plan-only"]) return { run, outcome: plan };
    const started = Date.now();
    await page.click("#start");
    await waitWithProgress(page, run, started);
    const log = await page.evaluate(() => playground.log.entries());
    const steps = log.filter((entry) => entry.event === "step");
    if (options.probes) {
      for (const probe of log.filter((entry) => entry.event === "probe" && entry.finished)) {
        const how = probe.accumulating ? "accumulating" : "one pass";
        console.log(`probe: micro-batch ${probe.micro_batch} ${how}: census ${formatBytes(probe.census_reserved)}, measured ${formatBytes(probe.peak_reserved)}`);
      }
    }
    const begun = log.find((entry) => entry.event === "started");
    const samples = await page.evaluate(() => playground.charts.samples);
    const counted = samples.map(countedBytes);
    const peak = counted.length ? Math.max(...counted) : null;
    const over = counted.filter((bytes) => bytes > fromMiB(run.cap)).length;
    return {
      run,
      outcome: steps.length === Number(options.steps) ? "trained" : `stopped: ${await page.textContent("#status")}`,
      levers: begun ? `${describeLevers(begun)}, micro-batch ${begun.micro_batch}` : "-",
      calibrated: begun?.calibrated_peak ?? null,
      peak,
      over,
      samples: counted.length,
      loss: steps.length ? `${steps[0].loss.toFixed(3)} -> ${steps.at(-1).loss.toFixed(3)}` : "-",
      minutes: (Date.now() - started) / 60000,
      problems: problems.length,
    };
  } finally {
    await browser.close();
  }
}

const server = await serve();
try {
  console.log(`| run | outcome | levers | calibrated | peak counted | samples over the cap | loss | minutes |`);
  console.log(`|---|---|---|---|---|---|---|---|`);
  for (const run of options.runs.split(",").map(parseRun)) {
    const r = await train(server, run);
    const error = r.problems ? ` (${r.problems} console problems)` : "";
    console.log(`| ${run.name} | ${r.outcome}${error} | ${r.levers ?? "-"} | ${formatBytes(r.calibrated)} | ${formatBytes(r.peak)} | ${r.over ?? "-"} of ${r.samples ?? "-"} | ${r.loss ?? "-"} | ${r.minutes?.toFixed(1) ?? "-"} |`);
  }
} finally {
  server.stop();
}
