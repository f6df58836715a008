// A CPU profile of the comparison worker while Headroom trains the MLP in Chromium: where
// the browser's step goes beside the device's work. V8's sampling profiler runs in the
// worker through the DevTools protocol; the self time of each function is printed.
//   HEADROOM_BIN=target/release/headroom node --experimental-websocket \
//     web/compare/profile-worker.mjs [--root DIR] [--backend webgpu|cpu] [--seconds 5]
// --root: a folder with pkg/ (wasm-bindgen's JS and module) and data/, served as static/ is
// (default static). The wasm functions have names only in a module kept with them:
// `wasm-opt -O3 -g` on wasm-bindgen's output (web/scripts/build-wasm strips them).
import { writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { launchChromium, repo, serveFolders } from "../bench/harness.mjs";

const { values: options } = parseArgs({
  options: {
    root: { type: "string", default: join(repo, "static") },
    backend: { type: "string", default: "webgpu" },
    seconds: { type: "string", default: "5" },
    port: { type: "string", default: "9333" },
  },
});
const SECONDS = Number(options.seconds);

/// The browser's DevTools endpoint: flat sessions, so a worker's session is addressed by id.
async function devtools(port) {
  const { webSocketDebuggerUrl } = await (await fetch(`http://127.0.0.1:${port}/json/version`)).json();
  const socket = new WebSocket(webSocketDebuggerUrl);
  await new Promise((resolve, reject) => {
    socket.onopen = resolve;
    socket.onerror = reject;
  });
  let next = 0;
  const replies = new Map();
  const listeners = [];
  socket.onmessage = ({ data }) => {
    const message = JSON.parse(data);
    if (replies.has(message.id)) {
      replies.get(message.id)(message);
      replies.delete(message.id);
    } else listeners.forEach((listen) => listen(message));
  };
  const send = (method, params = {}, sessionId = undefined) =>
    new Promise((resolve, reject) => {
      const id = ++next;
      replies.set(id, (reply) => (reply.error ? reject(new Error(`${method}: ${reply.error.message}`)) : resolve(reply.result)));
      socket.send(JSON.stringify({ id, method, params, sessionId }));
    });
  return { send, listen: (listener) => listeners.push(listener), close: () => socket.close() };
}

/// Self time per function, as a share of the sampled time.
function selfTimes(profile) {
  const nodes = new Map(profile.nodes.map((node) => [node.id, node]));
  const total = profile.timeDeltas.reduce((sum, dt) => sum + dt, 0);
  const shares = new Map();
  profile.samples.forEach((id, i) => {
    const frame = nodes.get(id).callFrame;
    const name = `${frame.functionName || "(anonymous)"} ${frame.url.split("/").pop()}`;
    shares.set(name, (shares.get(name) ?? 0) + profile.timeDeltas[i] / total);
  });
  return [...shares].sort((a, b) => b[1] - a[1]);
}

const server = await serveFolders(process.env.HEADROOM_BIN ?? join(repo, "target", "debug", "headroom"), [
  "--root", options.root, "--web", join(repo, "web"),
]);
const browser = await launchChromium([`--remote-debugging-port=${options.port}`]);
try {
  const page = await browser.newPage();
  await page.goto(`${server.url}web/compare/index.html`);
  await page.waitForFunction(() => typeof window.runCase === "function");
  const tools = await devtools(options.port);
  const { targetInfos } = await tools.send("Target.getTargets");
  const target = targetInfos.find((info) => info.type === "page" && info.url.includes("/web/compare/"));
  const { sessionId: pageSession } = await tools.send("Target.attachToTarget", { targetId: target.targetId, flatten: true });
  const workerSession = new Promise((resolve) =>
    tools.listen((m) => m.method === "Target.attachedToTarget" && m.params.targetInfo.type === "worker" && resolve(m.params.sessionId)),
  );
  await tools.send("Target.setAutoAttach", { autoAttach: true, waitForDebuggerOnStart: false, flatten: true }, pageSession);
  // Long enough to outlast the warm-up and the profile on either backend.
  const steps = options.backend === "cpu" ? 4000 : 400;
  const run = page.evaluate((spec) => window.runCase(spec), {
    framework: "headroom", backend: options.backend, model: "mlp", layers: [128], batch: 256, steps,
    eval_samples: 100, learning_rate: 1e-3, epsilon: 1e-8, data: "/data/fashion-mnist/",
  }).catch(() => {}); // closing the page below ends the run; its result is not wanted
  const worker = await workerSession;
  await tools.send("Profiler.enable", {}, worker);
  await tools.send("Profiler.setSamplingInterval", { interval: 500 }, worker);
  await new Promise((resolve) => setTimeout(resolve, 5000)); // past the warm-up
  await tools.send("Profiler.start", {}, worker);
  await new Promise((resolve) => setTimeout(resolve, SECONDS * 1000));
  const { profile } = await tools.send("Profiler.stop", {}, worker);
  const saved = join(tmpdir(), "headroom-worker.cpuprofile");
  writeFileSync(saved, JSON.stringify(profile));
  console.log(`${options.backend}, MLP 784-128-10 at batch 256: the worker's self time over ${SECONDS} s (${saved})`);
  for (const [name, share] of selfTimes(profile).slice(0, 25)) console.log(`${(100 * share).toFixed(1).padStart(5)}%  ${name.slice(0, 140)}`);
  tools.close();
  await page.close();
  await run;
} finally {
  await browser.close();
  server.stop();
}
