// The static site web/scripts/build-site makes, as users host it: on a plain static server that
// sends no special headers (Python's http.server), under a sub-path; with --isolate, where
// a service worker adds COOP/COEP and the chunks come from another origin (CORS); and
// behind headroom serve. Each trains to the end.
// tests/run-all sets HEADROOM_BIN and builds static/pkg and static/data first.
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { launchChromium, openPlayground, repo, serve, setRun } from "../../web/bench/harness.mjs";

const shared = { browser: null, servers: [], work: null, plain: null, isolated: null, data: null };

/// Python's http.server over `folder`; resolves to { url, stop, log } (log: the request lines).
function pythonServer(folder) {
  const child = spawn("python3", ["-u", "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory", folder]);
  const log = [];
  child.stderr.on("data", (text) => log.push(...String(text).split("\n").filter(Boolean)));
  return new Promise((resolve, reject) => {
    child.on("error", reject);
    child.on("exit", (code) => reject(new Error(`http.server exited with ${code}`)));
    child.stdout.on("data", (text) => {
      const match = /port (\d+)/.exec(String(text));
      if (match) resolve({ url: `http://127.0.0.1:${match[1]}/`, stop: () => child.kill(), log });
    });
  });
}

function buildSite(out, ...flags) {
  execFileSync(join(repo, "web/scripts/build-site"), [out, ...flags], { cwd: repo, stdio: ["ignore", "ignore", "inherit"] });
}

before(async () => {
  if (!process.env.HEADROOM_BIN) throw new Error("HEADROOM_BIN must name the headroom binary (tests/run-all sets it)");
  shared.work = mkdtempSync(join(tmpdir(), "headroom-site-"));
  // The chunks' own origin for the isolated site: headroom serve allows CORS.
  shared.data = await serve();
  shared.servers.push(shared.data);
  buildSite(join(shared.work, "plain/headroom"));
  buildSite(join(shared.work, "isolated"), "--isolate", "--data-url", `${shared.data.url}data`);
  shared.plain = await pythonServer(join(shared.work, "plain"));
  shared.isolated = await pythonServer(join(shared.work, "isolated"));
  shared.servers.push(shared.plain, shared.isolated);
  shared.browser = await launchChromium();
});

after(async () => {
  await shared.browser?.close();
  for (const server of shared.servers) server.stop();
  if (shared.work) rmSync(shared.work, { recursive: true, force: true });
});

/// Trains `steps` steps of a small MLP on `backend` and waits for the end.
async function trainToTheEnd(page, backend, steps) {
  await setRun(page, { backend, layers: "32", cap: "", batch: 64, steps });
  await page.click("#start");
  await page.waitForFunction(() => playground.state === "ended", null, { timeout: 180000 });
  assert.match(await page.textContent("#status"), new RegExp(`^Finished: ${steps} steps`));
}

test("a plain static host with no special headers, under a sub-path: trains on the CPU and on WebGPU; only the heap series is partial, and the page says why", async () => {
  const url = `${shared.plain.url}headroom/`;
  const response = await fetch(url);
  assert.equal(response.headers.get("cross-origin-opener-policy"), null, "the host sends no COOP");
  const { page, problems } = await openPlayground(shared.browser, url);
  assert.equal(await page.evaluate(() => self.crossOriginIsolated), false);
  assert.equal(await page.inputValue("#dataset"), "data/fashion-mnist");
  assert.equal(await page.isVisible("#heap-note"), true);
  assert.match(await page.textContent("#heap-note"), /not cross-origin isolated .*every other series is measured/);
  await trainToTheEnd(page, "cpu", 20);
  await trainToTheEnd(page, "webgpu", 5);
  const loads = shared.plain.log.filter((line) => /GET \/headroom\/data\/fashion-mnist\/train-\d+/.test(line));
  assert.ok(loads.length > 0, "the chunks came from the site's own folder");
  assert.deepEqual(problems, []);
  await page.close();
});

test("--isolate on the same host: a service worker makes the page cross-origin isolated, and chunks from another origin (CORS) train", async () => {
  const { page, problems } = await openPlayground(shared.browser, shared.isolated.url);
  // The service worker reloads the page once, the first time, to take control of it.
  await page.waitForFunction(() => self.crossOriginIsolated === true && document.getElementById("status").textContent === "Ready.");
  assert.equal(await page.isHidden("#heap-note"), true, "an isolated page measures its whole heap");
  assert.equal(await page.inputValue("#dataset"), `${shared.data.url}data/fashion-mnist`);
  await trainToTheEnd(page, "cpu", 10);
  assert.deepEqual(shared.isolated.log.filter((line) => / \/data\/fashion-mnist\//.test(line)), [], "no chunk came from the site's host");
  // The service worker's own console lines are not errors.
  assert.deepEqual(problems, []);
  await page.close();
});

test("behind headroom serve: the built folder is isolated, and the wasm goes out precompressed", async () => {
  const server = await serve(process.env.HEADROOM_BIN, join(shared.work, "plain"));
  shared.servers.push(server);
  const url = `${server.url}headroom/`;
  const wasm = await fetch(`${url}pkg/headroom_bg.wasm`, { headers: { "accept-encoding": "br" } });
  assert.equal(wasm.headers.get("content-encoding"), "br");
  const { page, problems } = await openPlayground(shared.browser, url);
  assert.equal(await page.evaluate(() => self.crossOriginIsolated), true);
  assert.equal(await page.isHidden("#heap-note"), true);
  await trainToTheEnd(page, "cpu", 10);
  assert.deepEqual(problems, []);
  await page.close();
});
