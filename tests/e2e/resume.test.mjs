// Nothing lost: a run the page saves in the browser's storage survives a reload and a
// killed renderer, and ends with the losses of a run that was never stopped.
// tests/run-all sets HEADROOM_BIN and builds static/pkg and static/data first.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { test } from "node:test";
import { openPlayground, setRun, sharedServerAndBrowser } from "../../web/bench/harness.mjs";

const STEPS = 120;
const shared = sharedServerAndBrowser();

/// The CPU backend: its losses repeat bit for bit, so a resumed run must give them exactly.
const RUN = { dataset: "data/fashion-mnist", backend: "cpu", layers: "128", cap: "", batch: 128, steps: STEPS };

async function startRun(page, saveEvery) {
  await setRun(page, RUN);
  await page.fill("#save-every", String(saveEvery));
  await page.waitForFunction(() => /^Plan: /.test(document.getElementById("plan").textContent));
  await page.click("#start");
}

const finished = (page) => page.waitForFunction(() => playground.state === "ended", null, { timeout: 300000 });

/// Every step's loss the page logged (those a resumed run replayed included), by step.
function losses(page) {
  return page.evaluate(() => {
    const steps = playground.log.entries().filter((e) => e.event === "step");
    return steps.map((e) => [e.step, e.loss]);
  });
}

/// Waits until the run saved itself at step `atLeast` or later; returns that step.
async function savedAt(page, atLeast) {
  const handle = await page.waitForFunction(
    (n) => {
      const match = /^Saved at step (\d+)/.exec(document.getElementById("saved-status").textContent);
      return match && Number(match[1]) >= n ? Number(match[1]) : null;
    },
    atLeast,
    { timeout: 120000 },
  );
  return handle.jsonValue();
}

/// Resumes the one saved run listed on `page`; returns the step it was saved at.
async function resumeListed(page) {
  await page.waitForSelector("#saved-list li");
  const items = await page.$$("#saved-list li");
  assert.equal(items.length, 1, "one saved run is offered");
  const text = await items[0].textContent();
  const step = Number(/step (\d+) of 120/.exec(text)?.[1]);
  assert.ok(step > 0, text);
  await page.click("#saved-list li button:text('Resume')");
  return step;
}

/// A browser profile of its own, in which a page can be opened again after another died.
async function profile() {
  const context = await shared.browser.newContext({ viewport: { width: 1200, height: 900 } });
  const open = () => openPlayground({ newPage: () => context.newPage() }, shared.server.url);
  return { context, open };
}

test("a saved run survives a reload and a killed renderer: it resumes from its last checkpoint with its curves and ends with the uninterrupted run's losses", async () => {
  const { context, open } = await profile();
  const { page, problems } = await open();
  await startRun(page, 0);
  await finished(page);
  const reference = await losses(page);
  assert.equal(reference.length, STEPS);
  const referenceEval = await page.evaluate(() => playground.summary.eval);
  const referenceAccuracy = referenceEval.accuracy;
  assert.equal(await page.isHidden("#saved-runs"), true, "a run that saves nothing leaves nothing");

  // The run the page exports evaluates natively to the accuracy the page reported.
  const [download] = await Promise.all([page.waitForEvent("download"), page.click("#export-run")]);
  const runFile = await download.path();
  const evaluated = JSON.parse(
    execFileSync(process.env.HEADROOM_BIN, ["eval", runFile, "--data", `${shared.server.url}data/fashion-mnist`, "--backend", "flex", "--json"], {
      encoding: "utf8",
    }),
  );
  assert.equal(evaluated.step, STEPS);
  assert.equal(evaluated.samples, referenceEval.samples);
  // The same weights; wasm's and the native build's SIMD sum in their own orders.
  assert.ok(Math.abs(evaluated.accuracy - referenceAccuracy) <= 2 / evaluated.samples, `${evaluated.accuracy} natively, ${referenceAccuracy} in the page`);
  assert.ok(Math.abs(evaluated.loss - referenceEval.loss) <= 1e-4 * referenceEval.loss, `${evaluated.loss} natively, ${referenceEval.loss} in the page`);

  // Reload mid-run: the run saved at step >= 8 is offered, with its losses so far.
  await startRun(page, 4);
  const saved = await savedAt(page, 8);
  await page.reload();
  await page.waitForFunction(() => document.getElementById("status").textContent === "Ready.");
  // Before Resume, the page shows the saved run's curves.
  await page.waitForFunction(() => /^Saved run: step \d+ of 120/.test(document.getElementById("progress").textContent));
  const previewed = await page.evaluate(() => playground.charts.steps.train.filter((loss) => loss !== null));
  const resumedFrom = await resumeListed(page);
  assert.deepEqual(previewed, reference.slice(0, resumedFrom).map(([, loss]) => loss), "the preview is the saved curve");
  assert.ok(resumedFrom >= saved, `offered step ${resumedFrom}, saved at ${saved}`);
  await page.waitForFunction(() => /^Resuming at step|^Training/.test(document.getElementById("status").textContent));
  await finished(page);
  assert.match(await page.textContent("#status"), /^Finished: 120 steps/);
  assert.deepEqual(await losses(page), reference, "the resumed run's losses (replayed and new) are the uninterrupted run's");
  assert.equal(await page.evaluate(() => playground.summary.eval.accuracy), referenceAccuracy);
  await page.waitForFunction(() => document.getElementById("saved-runs").hidden, null, { timeout: 10000 });

  // Kill the renderer mid-run: a new page in the same browser profile resumes it.
  await startRun(page, 4);
  await savedAt(page, 8);
  const crashed = new Promise((resolve) => page.once("crash", resolve));
  const cdp = await page.context().newCDPSession(page);
  cdp.send("Page.crash").catch(() => {}); // answers never: the renderer is gone
  await crashed;
  const { page: again, problems: againProblems } = await open();
  await resumeListed(again);
  await finished(again);
  assert.deepEqual(await losses(again), reference, "after the crash too");
  assert.deepEqual([...problems, ...againProblems], []);
  await context.close();
});

test("deleting a saved run removes it from the list and from the browser's storage", async () => {
  const { page, problems } = await openPlayground(shared.browser, shared.server.url);
  await startRun(page, 2);
  await savedAt(page, 2);
  await page.click("#stop");
  await finished(page);
  await page.waitForSelector("#saved-list li");
  await page.click("#saved-list li button:text('Delete')");
  await page.waitForFunction(() => document.getElementById("saved-runs").hidden);
  const left = await page.evaluate(async () => {
    const root = await navigator.storage.getDirectory();
    const runs = await root.getDirectoryHandle("runs");
    const names = [];
    for await (const name of runs.keys()) names.push(name);
    return names;
  });
  assert.deepEqual(left, []);
  assert.deepEqual(problems, []);
  await page.close();
});

test("a GPU device lost mid-run is said in plain words, and a fresh worker resumes the run from its checkpoint to the losses of a run never lost", async () => {
  const { page, problems } = await openPlayground(shared.browser, shared.server.url);
  const onGpu = { ...RUN, backend: "webgpu", layers: "64", steps: 40 };
  await setRun(page, onGpu);
  await page.fill("#save-every", "0");
  await page.click("#start");
  await finished(page);
  const reference = await losses(page);
  assert.equal(reference.length, 40);

  await page.fill("#save-every", "4");
  await page.click("#start");
  await savedAt(page, 8);
  await page.evaluate(() => playground.loseDevice());
  const lost = await page.waitForFunction(() => playground.incidents.find((i) => i.kind === "device-lost"), null, { timeout: 60000 });
  const incident = await lost.jsonValue();
  assert.match(incident.message, /WebGPU device was lost/);
  await page.waitForFunction(() => /^The GPU device was lost: resuming from the checkpoint at step \d+/.test(document.getElementById("status").textContent) || playground.state === "running", null, { timeout: 60000 });
  await finished(page);
  assert.match(await page.textContent("#status"), /^Finished: 40 steps/);
  const resumed = await losses(page);
  assert.equal(resumed.length, 40);
  for (const [i, [step, loss]] of resumed.entries()) {
    assert.equal(step, reference[i][0]);
    assert.ok(Math.abs(loss - reference[i][1]) <= 1e-5 * Math.abs(reference[i][1]), `step ${step}: ${loss} resumed, ${reference[i][1]} never lost`);
  }
  // The loss itself is reported; nothing else went wrong.
  assert.deepEqual(problems.filter((p) => !/device (was )?lost|destroyed/i.test(p)), []);
  await page.close();
});

test("a full storage quota is a plain error and the run goes on to the end", async () => {
  const { page, problems } = await openPlayground(shared.browser, shared.server.url);
  const cdp = await page.context().newCDPSession(page);
  // Room for far less than one checkpoint (the model alone is 400 KB).
  await cdp.send("Storage.overrideQuotaForOrigin", { origin: new URL(shared.server.url).origin, quotaSize: 64 * 1024 });
  await setRun(page, { ...RUN, steps: 12 });
  await page.fill("#save-every", "2");
  await page.waitForFunction(() => /^Plan: /.test(document.getElementById("plan").textContent));
  await page.click("#start");
  await page.waitForFunction(() => document.getElementById("saved-status").dataset.kind === "storage-full", null, { timeout: 120000 });
  // Refused by the estimate before writing, or by the write itself: in words either way.
  assert.match(await page.textContent("#saved-status"), /^Not saved: the browser's storage (for this page )?is full .*the previous checkpoint is kept/);
  await finished(page);
  assert.match(await page.textContent("#status"), /^Finished: 12 steps/);
  assert.equal((await losses(page)).length, 12);
  assert.deepEqual(problems, []);
  await page.close();
});

test("where runs are kept in IndexedDB (browsers without OPFS), a reloaded run resumes just the same", async () => {
  const { page, problems } = await openPlayground(shared.browser, `${shared.server.url}?store=indexeddb`);
  await startRun(page, 4);
  await savedAt(page, 8);
  await page.reload();
  await page.waitForFunction(() => document.getElementById("status").textContent === "Ready.");
  const kept = await page.evaluate(async () => {
    const database = await new Promise((resolve, reject) => {
      const opening = indexedDB.open("headroom");
      opening.onsuccess = () => resolve(opening.result);
      opening.onerror = () => reject(opening.error);
    });
    const records = await new Promise((resolve) => {
      const request = database.transaction("runs").objectStore("runs").getAll();
      request.onsuccess = () => resolve(request.result);
    });
    database.close();
    const root = await navigator.storage.getDirectory();
    const inOpfs = [];
    for await (const name of root.keys()) inOpfs.push(name);
    return { records: records.map((r) => ({ step: r.meta.step, bytes: r.bytes.byteLength })), inOpfs };
  });
  assert.equal(kept.records.length, 1, JSON.stringify(kept));
  assert.ok(kept.records[0].bytes > 400000, "the checkpoint holds the model");
  assert.deepEqual(kept.inOpfs, [], "nothing in OPFS");
  const resumedFrom = await resumeListed(page);
  assert.equal(resumedFrom, kept.records[0].step);
  await finished(page);
  assert.match(await page.textContent("#status"), /^Finished: 120 steps/);
  assert.deepEqual((await losses(page)).map(([step]) => step), Array.from({ length: STEPS }, (_, i) => i + 1));
  assert.deepEqual(problems, []);
  await page.close();
});
