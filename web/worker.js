// Runs the wasm module off the page's thread: the page stays responsive while it trains.
// A run advances one step per call, so pause, resume and stop act between steps.
import init, { DataStream, Training, describeDevice, planRun } from "../pkg/headroom.js";
import { ErrorKind, MEMORY_SAMPLE_MS, Reply, Request } from "./protocol.js";

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

const run = { training: null, state: "idle", wake: null };

function wake() {
  run.wake?.();
  run.wake = null;
}

async function train({ url, config, backend }) {
  if (run.state === "running" || run.state === "paused") throw refuse("a run is already going: stop it first");
  run.training?.free();
  run.training = null;
  run.state = "starting";
  const training = await Training.create(url, config, backend).finally(() => {
    if (run.state === "starting") run.state = "idle";
  });
  run.training = training;
  run.state = "running";
  self.postMessage({ type: Reply.STARTED, device: training.device() });
  const sampler = setInterval(() => {
    self.postMessage({ type: Reply.MEMORY, sample: training.memory(), at: Date.now() });
  }, MEMORY_SAMPLE_MS);
  let stopped = false;
  try {
    while (run.state !== "stopped") {
      if (run.state === "paused") {
        // Only now, between steps, is the run at rest (an export may read the model).
        self.postMessage({ type: Reply.PAUSED });
        await new Promise((resolve) => (run.wake = resolve));
        continue;
      }
      const events = await training.advance();
      if (events.length === 0) break;
      self.postMessage({ type: Reply.EVENTS, events, at: Date.now() });
    }
  } finally {
    clearInterval(sampler);
    stopped = run.state === "stopped";
    run.state = "ended";
  }
  return { type: Reply.ENDED, stopped };
}

async function exportModel() {
  if (!run.training) throw refuse("there is no trained model yet");
  if (run.state === "running") throw refuse("pause or stop the run before exporting");
  const bytes = await run.training.exportModel();
  return { type: Reply.MODEL, bytes };
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
  [Request.STREAM]: stream,
};

self.onmessage = async ({ data }) => {
  try {
    await loaded;
    const handler = handlers[data.type];
    if (!handler) throw new Error(`unknown request ${data.type}`);
    const reply = await handler(data);
    if (reply) self.postMessage(reply, reply.bytes ? [reply.bytes.buffer] : []);
  } catch (error) {
    self.postMessage({ type: Reply.ERROR, request: data.type, kind: kindOf(error), message: describe(error) });
  }
};
