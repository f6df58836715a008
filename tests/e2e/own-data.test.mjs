// Bring your own text, take the model out: a text file dropped on the page is prepared in the
// browser (the chunks `headroom prepare --text` writes from the same file, byte for byte),
// kept across a reload, trained on by the GPT under a cap, written from by Generate, and
// downloaded as safetensors that the round-trip check and `headroom train --init` accept.
// tests/run-all sets HEADROOM_BIN and HEADROOM_CHECK_PYTHON and builds static/pkg first.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { openPlayground, repo, sharedServerAndBrowser } from "../../web/bench/harness.mjs";

const shared = sharedServerAndBrowser();
// Enough that a Generate sent after the first step lands before the last one.
const STEPS = 300;
const CAP_MIB = 64;

/// Words drawn by a fixed generator: something a GPT learns from in a few steps.
function generatedText(characters) {
  const words = ["the", "king", "shall", "speak", "and", "queen", "to", "her", "lord", "now,", "hence!", "\n"];
  let state = 7n;
  let text = "";
  while (text.length < characters) {
    state = (state * 6364136223846793005n + 1442695040888963407n) % 2n ** 64n;
    text += `${words[Number(state >> 33n) % words.length]} `;
  }
  return text.slice(0, characters);
}

/// Drops `files` ({ name, bytes }) on the run form, as a user dragging them from a folder.
async function drop(page, files) {
  const dataTransfer = await page.evaluateHandle((list) => {
    const transfer = new DataTransfer();
    for (const { name, bytes } of list) transfer.items.add(new File([new Uint8Array(bytes)], name, { type: "text/plain" }));
    return transfer;
  }, files.map(({ name, bytes }) => ({ name, bytes: [...bytes] })));
  await page.dispatchEvent("#run-form", "drop", { dataTransfer });
}

const textStatus = (page, pattern) =>
  page.waitForFunction((source) => new RegExp(source).test(document.getElementById("text-status").textContent), pattern.source, { timeout: 60000 });

test("a dropped text file trains the GPT under a cap, survives a reload, writes text during and after the run, and leaves as safetensors PyTorch's definition takes", async (t) => {
  const context = await shared.browser.newContext({ viewport: { width: 1200, height: 900 }, acceptDownloads: true });
  const { page, problems } = await openPlayground({ newPage: () => context.newPage() }, shared.server.url);
  const corpus = Buffer.from(generatedText(30000));

  // Refused in words, and nothing kept: not UTF-8, too short.
  await drop(page, [{ name: "bad.txt", bytes: Buffer.from([0x54, 0x6f, 0xff, 0x20]) }]);
  await textStatus(page, /bad\.txt is not UTF-8 text \(invalid byte at offset 2\)/);
  await drop(page, [{ name: "short.md", bytes: Buffer.from("To be.") }]);
  await textStatus(page, /too short: 6 characters, at least 100/);

  await drop(page, [{ name: "Kings.txt", bytes: corpus }]);
  await textStatus(page, /^Prepared kings: 27000 \+ 3000 characters, kept in this browser\.$/);
  assert.equal(await page.inputValue("#dataset"), "local-data/kings");
  assert.equal(await page.inputValue("#model"), "gpt");

  // The same chunks `headroom prepare --text` writes from the same file.
  const work = mkdtempSync(join(tmpdir(), "headroom-own-data-"));
  // Each run left its folder behind (the corpus, its chunks and a safetensors file).
  t.after(() => rmSync(work, { recursive: true, force: true }));
  writeFileSync(join(work, "Kings.txt"), corpus);
  execFileSync(process.env.HEADROOM_BIN, ["prepare", "--text", join(work, "Kings.txt"), "--name", "kings", "--out-root", join(work, "data")]);
  const native = JSON.parse(readFileSync(join(work, "data/kings/manifest.json"), "utf8"));
  const kept = JSON.parse(
    await page.evaluate(async () => {
      const folder = await (await (await navigator.storage.getDirectory()).getDirectoryHandle("datasets")).getDirectoryHandle("kings");
      return (await (await folder.getFileHandle("manifest.json")).getFile()).text();
    }),
  );
  assert.deepEqual(kept.vocabulary, native.vocabulary);
  assert.deepEqual(
    kept.chunks.map((c) => c.sha256),
    native.chunks.map((c) => c.sha256),
  );

  for (const [id, value] of [["gpt-layers", 1], ["gpt-heads", 2], ["gpt-width", 32], ["gpt-context", 32], ["effective-batch", 16], ["sample-every", 0], ["steps", STEPS], ["cap", CAP_MIB], ["save-every", 0]]) {
    await page.fill(`#${id}`, String(value));
  }
  await page.selectOption("#backend", "cpu");
  await page.waitForFunction((cap) => new RegExp(`of the ${cap}\\.0 MiB cap`).test(document.getElementById("plan").textContent), CAP_MIB, { timeout: 60000 });
  await page.click("#start");
  // Generate while it trains: answered between two steps, not after the run.
  await page.waitForSelector("#generate:not([disabled])", { timeout: 120000 });
  await page.fill("#generate-length", "20");
  await page.click("#generate");
  await page.waitForFunction(() => playground.state === "ended", null, { timeout: 300000 });
  await page.waitForFunction(() => playground.log.entries().some((e) => e.event === "generated"));
  const during = await page.evaluate(() => playground.log.entries().find((e) => e.event === "generated"));
  assert.ok(during.step >= 1 && during.step < STEPS, `generated at step ${during.step} of ${STEPS}`);
  const steps = await page.evaluate(() => playground.log.entries().filter((e) => e.event === "step"));
  assert.equal(steps.length, STEPS);
  const mean = (list) => list.reduce((a, b) => a + b, 0) / list.length;
  const [first, last] = [mean(steps.slice(0, 5).map((s) => s.loss)), mean(steps.slice(-5).map((s) => s.loss))];
  assert.ok(last < first, `the loss went from ${first} to ${last}`);
  const started = await page.evaluate(() => playground.log.entries().find((e) => e.event === "started"));
  assert.equal(started.cap, CAP_MIB * 2 ** 20);

  // Generate, after the run: the prompt and what follows it, from the corpus's characters.
  await page.fill("#generate-prompt", "the ");
  await page.fill("#generate-length", "60");
  await page.click("#generate");
  await page.waitForFunction(() => /^the /.test(document.getElementById("generated-text").textContent));
  const written = await page.textContent("#generated-text");
  assert.equal(written.length, 64, JSON.stringify(written));
  assert.ok([...written].every((c) => kept.vocabulary.includes(c)), JSON.stringify(written));

  // Download model (safetensors): PyTorch's names and shapes, and a native run starts from it.
  const [download] = await Promise.all([page.waitForEvent("download"), page.click("#export-safetensors")]);
  const file = join(work, "page.safetensors");
  await download.saveAs(file);
  const checked = execFileSync(process.env.HEADROOM_CHECK_PYTHON, [join(repo, "tests/python/check_export.py"), "--file", file], { encoding: "utf8" });
  assert.match(checked, /gpt: all 18 tensors have PyTorch's names and shapes/);
  const init = execFileSync(
    process.env.HEADROOM_BIN,
    ["train", "--data", join(work, "data/kings"), "--backend", "flex", "--model", "gpt", "--layers", "1", "--heads", "2", "--width", "32", "--context", "32", "--steps", "1", "--effective-batch", "16", "--no-eval", "--sample-chars", "0", "--init", file],
    { encoding: "utf8" },
  );
  assert.match(init, /starting from the parameters in/);
  assert.match(init, /final loss (\d+\.\d+)/);
  // The page's run ended near this loss: the weights came with the file.
  const nativeLoss = Number(/final loss (\d+\.\d+)/.exec(init)[1]);
  assert.ok(Math.abs(nativeLoss - last) < 0.15, `the exported model starts at ${nativeLoss}; the page's run ended near ${last}, began at ${first}`);
  console.log(`page loss ${first.toFixed(4)} -> ${last.toFixed(4)}; native --init ${nativeLoss}; generated at step ${during.step} and after: ${JSON.stringify(written)}`);

  // A reload keeps the dataset.
  await page.reload();
  await page.waitForFunction(() => document.getElementById("status").textContent === "Ready.");
  const offered = await page.$$eval("#dataset option", (options) => options.map((o) => [o.value, o.textContent]));
  assert.ok(
    offered.some(([value, label]) => value === "local-data/kings" && /in this browser/.test(label)),
    JSON.stringify(offered),
  );
  // Forget removes it from the list and from storage; the server's datasets stay.
  assert.equal(await page.isHidden("#forget-dataset"), true, "nothing to forget on a server dataset");
  await page.selectOption("#dataset", "local-data/kings");
  await page.click("#forget-dataset");
  await textStatus(page, /^Forgot kings/);
  const left = await page.$$eval("#dataset option", (options) => options.map((o) => o.value));
  assert.ok(!left.includes("local-data/kings") && left.includes("data/shakespeare"), JSON.stringify(left));
  const stored = await page.evaluate(async () => {
    const names = [];
    for await (const name of (await (await navigator.storage.getDirectory()).getDirectoryHandle("datasets")).keys()) names.push(name);
    return names;
  });
  assert.deepEqual(stored, []);
  assert.deepEqual(problems, []);
  await context.close();
});
