// The playground in real headless Chromium against a real `headroom serve`.
// tests/run-all sets HEADROOM_BIN and builds static/pkg and static/data first.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
// The front end's npm packages live in web/ (web/package.json), not beside the tests.
const { chromium } = createRequire(join(repo, "web", "package.json"))("playwright-core");
const artifacts = join(repo, "tests", "artifacts");
const chromiumArgs = [
  "--enable-unsafe-webgpu",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--no-first-run",
  "--no-sandbox",
];

let server;
let baseUrl;
let browser;

before(async () => {
  const binary = process.env.HEADROOM_BIN;
  assert.ok(binary, "HEADROOM_BIN must name the headroom binary (tests/run-all sets it)");
  server = spawn(binary, ["serve", "--addr", "127.0.0.1:0", "--root", "static", "--web", "web"], { cwd: repo });
  baseUrl = await new Promise((resolve, reject) => {
    server.stdout.on("data", (text) => {
      const match = /http:\/\/127\.0\.0\.1:\d+\//.exec(String(text));
      if (match) resolve(match[0]);
    });
    server.on("exit", (code) => reject(new Error(`headroom serve exited with ${code}`)));
  });
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium", args: chromiumArgs });
  mkdirSync(artifacts, { recursive: true });
});

after(async () => {
  await browser?.close();
  server?.kill();
});

async function openPage() {
  const page = await browser.newPage({ viewport: { width: 1100, height: 760 } });
  const problems = [];
  page.on("console", (message) => message.type() === "error" && problems.push(message.text()));
  page.on("pageerror", (error) => problems.push(error.message));
  await page.goto(baseUrl);
  await page.waitForFunction(() => document.getElementById("status").textContent === "Ready.");
  return { page, problems };
}

test("the page streams real Fashion-MNIST chunks in a worker, checksummed and within the bound", async () => {
  const { page, problems } = await openPage();
  assert.equal(await page.evaluate(() => crossOriginIsolated), true, "the page must be cross-origin isolated");
  await page.selectOption("#dataset", "data/fashion-mnist");
  await page.click("#stream");
  await page.waitForFunction(() => !document.getElementById("figures").hidden || document.getElementById("status").classList.contains("error"));
  assert.match(await page.textContent("#status"), /^Done/);
  const figures = JSON.parse(await page.getAttribute("#figures", "data-figures"));
  assert.equal(figures.samples, 60000);
  assert.equal(figures.transport.retries, 0);
  assert.ok(figures.memory.peak_bytes_held > 0);
  assert.ok(figures.memory.peak_bytes_held <= figures.memory.bound_bytes, JSON.stringify(figures.memory));
  await page.screenshot({ path: join(artifacts, "playground.png"), fullPage: true });
  assert.deepEqual(problems, []);
  await page.close();
});

test("a dataset that is not there is reported in plain words on the page", async () => {
  const { page } = await openPage();
  await page.evaluate(() => document.getElementById("dataset").append(new Option("missing", "data/no-such-dataset")));
  await page.selectOption("#dataset", "data/no-such-dataset");
  await page.fill("#prefetch", "1");
  await page.click("#stream");
  await page.waitForSelector("#status.error", { timeout: 30000 });
  const message = await page.textContent("#status");
  assert.match(message, /no-such-dataset\/manifest\.json/);
  assert.match(message, /HTTP status 404/);
  assert.equal(await page.isEnabled("#stream"), true, "the page stays usable after an error");
  await page.close();
});
