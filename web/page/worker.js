// Runs the wasm module off the page's thread: the page stays responsive while it trains.
// A run advances one step per call, so pause, resume and stop act between steps.
import init, { DataStream, Training, describeDevice, planRun, prepareText as prepareChunks } from "../../pkg/headroom.js";
import { saveDataset, serveLocal } from "./local-data.js";
import { ErrorKind, MEMORY_SAMPLE_MS, Reply, Request } from "./protocol.js";
import { deleteRun, loadRun, saveRun } from "./saved-runs.js";

// The wasm module fetches through the global fetch: datasets kept in this browser are
// answered from its storage (local-data.js), everything else goes to the network.
const networkFetch = self.fetch.bind(self);
self.fetch = async (input, options) => (await serveLocal(input)) ?? networkFetch(input, options);

// The GPU devices this worker asked for, so that a test can lose them as a driver reset
// would (Request.LOSE_DEVICE): wgpu keeps its GPUDevice out of JavaScript's reach.
const devices = [];
if (self.GPUAdapter) {
  const requestDevice = GPUAdapter.prototype.requestDevice;
  GPUAdapter.prototype.requestDevice = async function (...args) {
    const device = await requestDevice.apply(this, args);
    devices.push(device);
    return device;
  };
}

const loaded = init();
loaded.then(
  () => self.postMessage({ type: Reply.READY }),
  (error) =>
    self.postMessage({ type: Reply.ERROR, kind: ErrorKind.CRASHED, message: `The wasm module did not load: ${describe(error)}` }),
);

function describe(error) {
  return error?.message ?? String(error);
}

/// The kind the error carries (Rust's ErrorKind from the wasm module, or `busy` from
/// `refuse`); a trap in the module is a crash; anything else has no kind.
function kindOf(error) {
  if (typeof error?.kind === "string") return error.kind;
  if (error instanceof WebAssembly.RuntimeError) return ErrorKind.CRASHED;
  return undefined;
}

/// A request the worker cannot take now.
function refuse(message) {
  return Object.assign(new Error(message), { kind: ErrorKind.BUSY });
}

// between: what waits for the run to rest between two steps (a Generate while it trains).
const run = { training: null, state: "idle", wake: null, meta: null, saveEvery: 0, between: [] };

/// Runs `task` once the run rests between two steps, or now where it is not training.
function betweenSteps(task) {
  if (run.state !== "running") return task();
  return new Promise((resolve, reject) => run.between.push(() => task().then(resolve, reject)));
}

async function drainBetween() {
  while (run.between.length > 0) await run.between.shift()();
}

function wake() {
  run.wake?.();
  run.wake = null;
}

/// A new run: its settings are kept with its checkpoints, which go under a fresh id.
async function train({ url, config, backend, saveEvery = 0, init = undefined }) {
  const meta = { id: `run-${Date.now()}`, url, config, backend, started_at: Date.now() };
  // Each probe step, as it starts and ends, while `create` plans the run before step 1.
  const onProbe = (report) => self.postMessage({ type: Reply.PROBE, report, at: Date.now() });
  return drive(() => Training.create(url, config, backend, init, onProbe), meta, saveEvery);
}

/// A saved run, going on from its checkpoint under the same id.
async function resumeSaved({ id, backend }) {
  const { meta, bytes } = await loadRun(id);
  return drive(() => Training.resume(meta.url, bytes, backend ?? meta.backend), meta, meta.save_every ?? 0);
}

/// Saves the run between two steps; a failure to save is reported and the run goes on.
async function save() {
  try {
    const { bytes, summary } = await run.training.checkpoint();
    const meta = { ...run.meta, save_every: run.saveEvery, saved_at: Date.now(), ...summary };
    await saveRun(meta, bytes);
    self.postMessage({ type: Reply.SAVED, id: meta.id, step: summary.step });
  } catch (error) {
    self.postMessage({ type: Reply.ERROR, request: "save", kind: kindOf(error) ?? ErrorKind.STORAGE, message: describe(error) });
  }
}

/// Whether `events` end a step after which the run is due to be saved.
function saveDue(events) {
  return run.saveEvery > 0 && events.some((e) => e.event === "step" && e.step % run.saveEvery === 0);
}

async function drive(open, meta, saveEvery) {
  if (run.state === "running" || run.state === "paused") throw refuse("a run is already going: stop it first");
  run.training?.free();
  run.training = null;
  run.state = "starting";
  const training = await open().finally(() => {
    if (run.state === "starting") run.state = "idle";
  });
  Object.assign(run, { training, meta, saveEvery, state: "running" });
  self.postMessage({ type: Reply.STARTED, device: training.device(), id: meta.id });
  const sampler = setInterval(() => {
    self.postMessage({ type: Reply.MEMORY, sample: training.memory(), at: Date.now() });
  }, MEMORY_SAMPLE_MS);
  let stopped = false;
  let finished = false;
  try {
    while (run.state !== "stopped") {
      if (run.state === "paused") {
        // Only now, between steps, is the run at rest (an export may read the model).
        if (run.saveEvery > 0) await save();
        self.postMessage({ type: Reply.PAUSED });
        await new Promise((resolve) => (run.wake = resolve));
        continue;
      }
      const events = await training.advance();
      await drainBetween();
      if (events.length === 0) break;
      self.postMessage({ type: Reply.EVENTS, events, at: Date.now() });
      finished = events.some((e) => e.event === "finished");
      if (!finished && saveDue(events)) await save();
    }
  } finally {
    clearInterval(sampler);
    stopped = run.state === "stopped";
    run.state = "ended";
    await drainBetween();
  }
  // A finished run has nothing left to resume; a stopped one may be taken up again.
  if (finished) await deleteRun(meta.id).catch(() => {});
  else if (stopped && run.saveEvery > 0) await save();
  return { type: Reply.ENDED, stopped };
}

async function exportRun() {
  if (!run.training) throw refuse("there is no run yet");
  if (run.state === "running") throw refuse("pause or stop the run before downloading it");
  const { bytes } = await run.training.checkpoint();
  return { type: Reply.RUN, bytes };
}

async function exportModel() {
  if (!run.training) throw refuse("there is no trained model yet");
  if (run.state === "running") throw refuse("pause or stop the run before exporting");
  const bytes = await run.training.exportModel();
  return { type: Reply.MODEL, bytes };
}

async function exportSafetensors() {
  if (!run.training) throw refuse("there is no trained model yet");
  if (run.state === "running") throw refuse("pause or stop the run before exporting");
  const bytes = await run.training.exportSafetensors();
  return { type: Reply.SAFETENSORS, bytes };
}

/// Text from the GPT as it stands: now where the run rests, else after the step under way.
async function generate({ prompt, tokens, temperature, seed }) {
  if (!run.training) throw refuse("there is no model yet: start a GPT run on a text dataset");
  const sample = await betweenSteps(() => run.training.generate(prompt, tokens, temperature, seed));
  return { type: Reply.GENERATED, sample };
}

/// Files dropped or picked in the page, prepared as a text dataset and kept in storage.
async function prepareText({ name, files }) {
  const prepared = prepareChunks(name, files.map((f) => f.name), files.map((f) => f.bytes));
  await saveDataset(name, prepared.manifest, prepared.chunks);
  const { counts } = JSON.parse(prepared.manifest);
  return { type: Reply.PREPARED, name, train: counts.train ?? 0, test: counts.test ?? 0 };
}

async function stream({ url, split, batch, options }) {
  const source = await DataStream.open(url, options);
  const figures = await source.scanEpoch(split, 0, batch);
  return { type: Reply.STREAMED, manifest: source.manifest(), figures };
}

const handlers = {
  [Request.DESCRIBE]: async ({ backend }) => ({ type: Reply.DEVICE, report: await describeDevice(backend) }),
  [Request.PLAN]: async ({ url, config, backend }) => ({ type: Reply.PLANNED, preview: await planRun(url, config, backend) }),
  [Request.START]: train,
  [Request.RESUME_SAVED]: resumeSaved,
  [Request.PAUSE]: () => {
    if (run.state === "running") run.state = "paused";
    return null; // the run's loop answers "paused" once the current step is done
  },
  [Request.RESUME]: () => {
    if (run.state === "paused") run.state = "running";
    wake();
    return { type: Reply.RESUMED };
  },
  [Request.STOP]: () => {
    if (run.state === "running" || run.state === "paused") run.state = "stopped";
    wake();
    return null; // the run's loop answers with "ended"
  },
  [Request.EXPORT]: exportModel,
  [Request.EXPORT_RUN]: exportRun,
  [Request.EXPORT_SAFETENSORS]: exportSafetensors,
  [Request.PREPARE_TEXT]: prepareText,
  [Request.GENERATE]: generate,
  [Request.CRASH]: () => {
    // Outside any handler: an uncaught error, as a bug in the worker would raise.
    setTimeout(() => {
      throw new Error("a crash a test asked for");
    });
    return null;
  },
  [Request.LOSE_DEVICE]: () => {
    for (const device of devices) device.destroy();
    return null;
  },
  [Request.STREAM]: stream,
};

self.onmessage = async ({ data }) => {
  try {
    await loaded;
    const handler = handlers[data.type];
    if (!handler) throw new Error(`unknown request ${data.type}`);
    const reply = await handler(data);
    if (reply) self.postMessage({ ...reply, requestId: data.requestId }, reply.bytes ? [reply.bytes.buffer] : []);
  } catch (error) {
    // A refused cap carries its figures (Rust's `Refusal`) for the page to format.
    const refusal = error?.refusal;
    self.postMessage({ type: Reply.ERROR, request: data.type, requestId: data.requestId, kind: kindOf(error), message: describe(error), ...(refusal ? { refusal } : {}) });
  }
};
