// The worker protocol: requests carry ids and replies answer them, so a late reply to a
// request the page has since sent again never overwrites the newer answer.
// tests/run-all sets HEADROOM_BIN and builds static/pkg and static/data first.
import assert from "node:assert/strict";
import { test } from "node:test";
import { openPlayground, setRun, sharedServerAndBrowser } from "../../web/bench/harness.mjs";

const shared = sharedServerAndBrowser();

test("a plan reply to older settings is dropped; the reply to the newest request is shown", async () => {
  const { page, problems } = await openPlayground(shared.browser, shared.server.url);
  await setRun(page, { dataset: "data/fashion-mnist", backend: "cpu", layers: "64", cap: 256 });
  await page.waitForFunction(() => /^Plan: /.test(document.getElementById("plan").textContent));
  // A second plan request: the first one's id is now old.
  await page.fill("#layers", "32");
  await page.waitForFunction(() => playground.newestRequest("plan") > 1 && /^Plan: /.test(document.getElementById("plan").textContent));
  const shown = await page.textContent("#plan");
  // A refusal as the worker sends it (Rust's Refusal): figures the page formats.
  const lateRefusal = {
    cap_bytes: 1 << 20,
    needed_bytes: 3 << 20,
    setting: { micro_batch: 1, data: { prefetch: 1, pause_training_for_eval: false }, peak_bytes: 2 << 20, device_bytes: 1 << 20, data_bytes: 1 << 20, smaller_micro_batches_need_more: false },
    levers: [{ lever: { kind: "checkpointing" }, needed_bytes: 5 << 19 }],
  };
  const late = (requestId) =>
    page.evaluate(
      ({ id, lateRefusal }) =>
        playground.receive({
          type: "planned",
          requestId: id,
          preview: { chosen: null, refusal: lateRefusal, levers: [], plan: {}, device: { backend: "flex", adapter: null, fallback_reason: null } },
        }),
      { id: requestId, lateRefusal },
    );
  await late(1);
  assert.equal(await page.textContent("#plan"), shown, "a late reply changed the plan shown");
  const newest = await page.evaluate(() => playground.newestRequest("plan"));
  await late(newest);
  assert.equal(
    await page.textContent("#plan"),
    "Nothing fits: a cap of 1.0 MiB fits no setting of this run: the smallest cap that fits is 3.0 MiB (micro-batch 1, prefetch 1: " +
      "a peak of 2.0 MiB (device 1.0 MiB, data 1.0 MiB) and the enforcer's 10% headroom). " +
      "No lever left to this run fits 1.0 MiB (it would need 2.5 MiB with checkpointing): raise the cap or choose a smaller model.",
  );
  assert.equal(await page.getAttribute("#plan", "data-needed-bytes"), String(3 << 20));
  assert.deepEqual(problems, []);
  await page.close();
});

test("a worker that fails is replaced, the page says so, and the next run trains", async () => {
  const { page, problems } = await openPlayground(shared.browser, shared.server.url);
  await page.evaluate(() => playground.crashWorker());
  await page.waitForFunction(() => /^The worker failed: .*a crash a test asked for.*; a fresh worker was started/.test(document.getElementById("status").textContent));
  await page.waitForFunction(() => playground.state === "ready");
  await setRun(page, { dataset: "data/fashion-mnist", backend: "cpu", layers: "32", cap: "", batch: 64, steps: 3 });
  await page.click("#start");
  await page.waitForFunction(() => playground.state === "ended", null, { timeout: 120000 });
  assert.match(await page.textContent("#status"), /^Finished: 3 steps/);
  // The crash itself is the one problem reported.
  assert.ok(problems.every((p) => /a crash a test asked for/.test(p)), JSON.stringify(problems));
  await page.close();
});
