// The page's long-run bounds (web/page/bounded.js), without a browser: what is kept stays
// bounded, and no peak is lost.
import assert from "node:assert/strict";
import { test } from "node:test";
import { MetricsLog, peakOf, pushBounded } from "../../web/page/bounded.js";

test("10,000 memory samples keep at most the limit, the spike and the latest time", () => {
  let samples = [];
  for (let i = 0; i < 10000; i++) {
    const sample = { seconds: i, gpu_bytes_in_use: i === 7777 ? 999 : 100 + (i % 7), host_bytes: null };
    samples = pushBounded(samples, sample, 1000, peakOf);
  }
  assert.ok(samples.length <= 1000, `${samples.length}`);
  assert.ok(samples.length >= 500, "halving keeps at least half the limit");
  assert.equal(Math.max(...samples.map((s) => s.gpu_bytes_in_use)), 999, "the spike survives");
  assert.equal(samples.at(-1).seconds, 9999);
  assert.equal(samples.at(-1).host_bytes, null, "a missing figure stays missing");
});

test("the metrics log thins steps and memory but keeps every evaluation, in time order", () => {
  const log = new MetricsLog(500);
  log.push({ event: "config", at: 0 });
  for (let step = 1; step <= 10000; step++) {
    log.push({ event: "step", at: step, step, loss: 1 / step });
    log.push({ event: "memory", at: step + 0.5, gpu_bytes_in_use: step === 4242 ? 1e9 : 1e6 });
    if (step % 500 === 0) log.push({ event: "eval", at: step + 0.25, step });
  }
  const entries = log.entries();
  assert.ok(log.length <= 2 * 500 + 21, `${log.length}`);
  assert.equal(entries.filter((e) => e.event === "eval").length, 20);
  assert.equal(entries[0].event, "config");
  assert.ok(entries.every((e, i) => i === 0 || entries[i - 1].at <= e.at), "time order");
  assert.equal(Math.max(...entries.filter((e) => e.event === "memory").map((e) => e.gpu_bytes_in_use)), 1e9);
  assert.equal(entries.filter((e) => e.event === "step").at(-1).step, 10000, "the last step is kept");
});
