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
  const late = (requestId) =>
    page.evaluate(
      (id) =>
        playground.receive({
          type: "planned",
          requestId: id,
          preview: { chosen: null, refusal: "the settings of a request since replaced", levers: [], plan: {}, device: { backend: "flex", adapter: null, fallback_reason: null } },
        }),
      requestId,
    );
  await late(1);
  assert.equal(await page.textContent("#plan"), shown, "a late reply changed the plan shown");
  const newest = await page.evaluate(() => playground.newestRequest("plan"));
  await late(newest);
  assert.equal(await page.textContent("#plan"), "Nothing fits: the settings of a request since replaced");
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
