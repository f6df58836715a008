// Node side of the browser tests and benchmark: a real `headroom serve` and Debian's
// Chromium with real WebGPU (never a downloaded browser).
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { after, before } from "node:test";
import { fileURLToPath } from "node:url";

export const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const { chromium } = createRequire(join(repo, "web", "package.json"))("playwright-core");

export const CHROMIUM_ARGS = [
  "--enable-unsafe-webgpu",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--no-first-run",
  "--no-sandbox",
];

/// Serves static/ and web/ (or `root` alone: a site web/scripts/build-site built) on a free port;
/// resolves to { url, stop }.
export function serve(binary = process.env.HEADROOM_BIN ?? join(repo, "target", "debug", "headroom"), root = null) {
  return serveFolders(binary, root == null ? ["--root", "static", "--web", "web"] : ["--root", root]);
}

/// `headroom serve` with these folder flags (`--root DIR [--web DIR]`); resolves to { url, stop }.
export function serveFolders(binary, folders) {
  const server = spawn(binary, ["serve", "--addr", "127.0.0.1:0", ...folders], { cwd: repo });
  return new Promise((resolve, reject) => {
    server.on("error", reject);
    server.on("exit", (code) => reject(new Error(`headroom serve exited with ${code}`)));
    server.stdout.on("data", (text) => {
      const match = /http:\/\/127\.0\.0\.1:\d+\//.exec(String(text));
      if (match) resolve({ url: match[0], stop: () => server.kill() });
    });
  });
}

/// `extraArgs`: flags on top of CHROMIUM_ARGS (web/compare/wasm-tiering.mjs sets V8's).
export function launchChromium(extraArgs = []) {
  return chromium.launch({ executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium", args: [...CHROMIUM_ARGS, ...extraArgs] });
}

/// For a node:test file: one `headroom serve` and one Chromium for all its tests, started
/// before them and closed after; the returned object's fields are set once they run.
export function sharedServerAndBrowser() {
  const shared = { server: null, browser: null };
  before(async () => {
    if (!process.env.HEADROOM_BIN) throw new Error("HEADROOM_BIN must name the headroom binary (tests/run-all sets it)");
    shared.server = await serve();
    shared.browser = await launchChromium();
  });
  after(async () => {
    await shared.browser?.close();
    shared.server?.stop();
  });
  return shared;
}

/// What a WebGPU implementation says when a kernel did not compile or launch. Chromium
/// reports it as a console warning, and the launch looks successful (the loss is garbage),
/// so a warning that mentions one of these counts as a failure, like any console error.
const GPU_TROUBLE = /shader|subgroup|validation|WGSL|\[Invalid /i;

/// Collects the page's console errors (its workers' included: Playwright reports them on
/// the page), its WebGPU warnings and its uncaught exceptions into `problems`.
export function watchProblems(page, problems) {
  page.on("console", (message) => {
    const type = message.type();
    if (type === "error" || (type === "warning" && GPU_TROUBLE.test(message.text()))) problems.push(message.text());
  });
  page.on("pageerror", (error) => problems.push(error.message));
}

/// Opens the playground and waits until its worker is ready; collects problems
/// (`watchProblems`).
export async function openPlayground(browser, url) {
  const page = await browser.newPage({ viewport: { width: 1200, height: 900 }, acceptDownloads: true });
  const problems = [];
  watchProblems(page, problems);
  await page.goto(url);
  // Under --isolate the service worker reloads the page once: between the two documents
  // there is no #status yet (a failure seen once in tests/run-all, 2026-12-06).
  await page.waitForFunction(() => document.getElementById("status")?.textContent === "Ready.");
  return { page, problems };
}

/// Runs one case of the comparison page (web/compare) in a new page of `browser`; resolves
/// to the worker's result, rejects with the worker's error or any error the page raised.
export async function runCompareCase(browser, url, spec) {
  const page = await browser.newPage();
  const problems = [];
  page.on("pageerror", (error) => problems.push(error.message));
  try {
    await page.goto(`${url}web/compare/index.html`);
    await page.waitForFunction(() => typeof window.runCase === "function");
    const result = await page.evaluate((s) => window.runCase(s), spec);
    if (problems.length) throw new Error(problems.join("; "));
    return result;
  } finally {
    await page.close();
  }
}

/// The middle of the known values (the lower one of two); null when none is known.
export function median(values) {
  const known = values.filter((v) => v != null && Number.isFinite(v)).sort((a, b) => a - b);
  return known.length ? known[Math.floor((known.length - 1) / 2)] : null;
}

/// Fills the run form: { dataset, model, layers, backend, cap, batch, steps, precision }.
export async function setRun(page, run) {
  if (run.dataset) await page.selectOption("#dataset", run.dataset);
  if (run.model) await page.selectOption("#model", run.model);
  if (run.layers) await page.fill("#layers", run.layers);
  if (run.backend) await page.selectOption("#backend", run.backend);
  if (run.cap !== undefined) await page.fill("#cap", String(run.cap));
  if (run.batch) await page.fill("#effective-batch", String(run.batch));
  if (run.steps) await page.fill("#steps", String(run.steps));
  if (run.precision) await page.selectOption("#precision", run.precision);
}
