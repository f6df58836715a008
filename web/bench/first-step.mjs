// Page load to the first training step, and the bytes a first load sends, for the site
// web/scripts/build-site makes, behind headroom serve (which sends the .br copies). Per backend and
// round: a fresh browser context (empty HTTP cache: a first visit), then a second page in
// the same context (warm cache: a return visit). Start is pressed as soon as the page is
// ready; the run stops after its first step.
//   node web/bench/first-step.mjs SITE_DIR      (FIRST_STEP_ROUNDS, FIRST_STEP_BACKENDS)
import { launchChromium, median, serve } from "./harness.mjs";

const site = process.argv[2];
if (!site) throw new Error("usage: node web/bench/first-step.mjs SITE_DIR (web/scripts/build-site makes one)");
const rounds = Number(process.env.FIRST_STEP_ROUNDS ?? 3);
const backends = (process.env.FIRST_STEP_BACKENDS ?? "cpu,webgpu").split(",");
const mib = (bytes) => (bytes / 2 ** 20).toFixed(2);

/// One visit: seconds from navigation to Ready and to the first step; bytes received by kind.
async function visit(context, url, backend) {
  const page = await context.newPage();
  const bytes = { wasm: 0, page: 0, data: 0 };
  page.on("requestfinished", async (request) => {
    const { responseBodySize, responseHeadersSize } = await request.sizes();
    const path = new URL(request.url()).pathname;
    const kind = path.endsWith(".wasm") ? "wasm" : path.includes("/data/") ? "data" : "page";
    bytes[kind] += responseBodySize + responseHeadersSize;
  });
  const loadStarted = Date.now();
  await page.goto(url);
  await page.waitForFunction(() => document.getElementById("status").textContent === "Ready.");
  const ready = Date.now();
  await page.selectOption("#backend", backend);
  await page.fill("#steps", "3");
  await page.click("#start");
  await page.waitForFunction(() => playground.log.entries().some((entry) => entry.event === "step"), null, { timeout: 300000 });
  const firstStep = await page.evaluate(() => playground.log.entries().find((entry) => entry.event === "step").at);
  await page.click("#stop");
  await page.close();
  return { ready_s: (ready - loadStarted) / 1000, first_step_s: (firstStep - loadStarted) / 1000, bytes };
}

const server = await serve(undefined, site);
const browser = await launchChromium();
const results = [];
try {
  for (let round = 0; round < rounds; round += 1) {
    for (const backend of backends) {
      const context = await browser.newContext();
      results.push({ backend, cache: "cold", ...(await visit(context, server.url, backend)) });
      results.push({ backend, cache: "warm", ...(await visit(context, server.url, backend)) });
      await context.close();
      console.error(`round ${round + 1} of ${rounds}: ${backend}`);
    }
  }
} finally {
  await browser.close();
  server.stop();
}
const range = (values) => `${Math.min(...values).toFixed(1)}-${Math.max(...values).toFixed(1)}`;
console.log(`| backend | cache | load → Ready | load → 1st step (range) | wasm sent | page sent | data until then |`);
console.log("|---|---|---|---|---|---|---|");
for (const backend of backends) {
  for (const cache of ["cold", "warm"]) {
    const runs = results.filter((r) => r.backend === backend && r.cache === cache);
    const first = runs.map((r) => r.first_step_s);
    const sent = (kind) => `${mib(median(runs.map((r) => r.bytes[kind])))} MiB`;
    console.log(`| ${backend} | ${cache} | ${median(runs.map((r) => r.ready_s)).toFixed(1)} s | ${median(first).toFixed(1)} s (${range(first)}) | ${sent("wasm")} | ${sent("page")} | ${sent("data")} |`);
  }
}
console.log(JSON.stringify(results));
