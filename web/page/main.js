// The page: reads the controls, drives the worker, plots what comes back.
import { MetricsLog } from "./bounded.js";
import { Charts } from "./charts.js";
import { listDatasets, offerF16, onModelChange, readRun } from "./controls.js";
import { countedBytes, describeLevers, describeProbe, fillTable, formatBytes, formatBytesUp } from "./format.js";
import { heapNote, sampleHeap } from "./heap.js";
import { initWeights, offerForget, onGenerated, onPrepared, onTextError, wireOwnData } from "./own-data.js";
import { ErrorKind, Reply, Request } from "./protocol.js";
import { deleteRun, listRuns } from "./saved-runs.js";
import { showStreamError, showStreamed, wireStreamPanel } from "./stream-panel.js";

const $ = (id) => document.getElementById(id);
const PLAN_DELAY_MS = 300;

const charts = new Charts({
  loss: $("loss-chart"),
  accuracy: $("accuracy-chart"),
  memory: $("memory-chart"),
  memoryTable: $("memory-table"),
  summary: $("chart-summary"),
});
// Everything a run reported, for the metrics file and what tests read; steps and memory
// samples thinned beyond 5,000 each (bounded.js), everything else whole.
const log = new MetricsLog();
// incidents: the failures runs met (kind, message), kept across runs. receive: a reply as
// if from the worker (tests send late ones).
const page = {
  state: "loading",
  charts,
  log,
  incidents: [],
  loseDevice: () => post({ type: Request.LOSE_DEVICE }),
  crashWorker: () => post({ type: Request.CRASH }),
  receive: (data) => onMessage({ data }),
  newestRequest: (type) => newest[type],
};
window.playground = page;

let worker;
let planTimer;
/// Settings were edited during a run: preview them once it ends.
let planAfterRun = false;
let lastRequestId = 0;
/// The newest request of each type: a reply to an older one is stale.
const newest = {};

/// Sends `message` with a fresh request id, which the worker's reply carries back.
function post(message) {
  const requestId = ++lastRequestId;
  newest[message.type] = requestId;
  worker.postMessage({ ...message, requestId });
  return requestId;
}

/// Whether `reply` answers an older request of `type` than the newest sent (a plan for
/// settings already changed again must not overwrite the newer one).
function stale(reply, type) {
  return reply.requestId !== undefined && reply.requestId !== newest[type];
}

/// A GPT that has trained writes text during the run (between steps) and after it.
function offerGenerate() {
  $("generate").disabled = !(page.trained && page.tokensPerSample != null && page.state !== "starting");
}

function setState(state) {
  page.state = state;
  const idle = state === "ready" || state === "ended";
  $("start").disabled = !idle;
  $("pause").disabled = state !== "running";
  $("resume").disabled = state !== "paused";
  $("stop").disabled = state !== "running" && state !== "paused";
  $("export-model").disabled = !(state === "paused" || (state === "ended" && page.trained));
  $("export-run").disabled = $("export-model").disabled;
  $("export-safetensors").disabled = $("export-model").disabled;
  offerGenerate();
  offerForget(idle);
  $("export-metrics").disabled = log.length === 0;
  $("stream").disabled = state === "loading";
  for (const button of document.querySelectorAll("#saved-list button")) button.disabled = !idle;
}

function showStatus(text) {
  $("status").textContent = text;
  $("status").classList.remove("error");
}

/// What to do about each kind of error (protocol.js's ErrorKind).
const ADVICE = {
  [ErrorKind.NO_DEVICE]: "Choose the CPU backend, or open the page in a browser with WebGPU.",
  [ErrorKind.DATASET_MISSING]: "The dataset is not on the server: run headroom prepare (web/play does it).",
  [ErrorKind.NETWORK]: "Is headroom serve still running?",
  [ErrorKind.DEVICE_LOST]: "A fresh worker is ready: press Start to train again.",
  [ErrorKind.CRASHED]: "The training module crashed; a fresh worker is ready: press Start to try again.",
  [ErrorKind.DIVERGED]: "Lower the learning rate, or clip gradients.",
  [ErrorKind.BAD_CHECKPOINT]: "Delete this saved run and start a new one.",
  [ErrorKind.STORAGE_FULL]: "Training goes on; delete saved runs to make room.",
};

/// The message, and what to do about it.
function explain(message, kind) {
  const advice = ADVICE[kind];
  return advice ? `${message}. ${advice}` : message;
}

function showError(message, kind) {
  $("status").textContent = explain(message, kind);
  $("status").dataset.kind = kind ?? "";
  $("status").classList.add("error");
}

function showDevice(report) {
  const a = report.adapter;
  const rows = [["Backend", report.backend === "webgpu" ? "WebGPU" : "CPU (burn flex, wasm SIMD)"]];
  if (report.fallback_reason) rows.push(["Why not WebGPU", report.fallback_reason]);
  if (a) {
    rows.push(
      ["Adapter", a.name || "(not disclosed)"],
      ["Type", `${a.device_type} via ${a.backend}`],
      ["Driver", a.driver || "—"],
      ["shader-f16", a.shader_f16 ? "yes" : "no: f16 storage falls back to f32"],
      ["Max buffer", formatBytes(a.max_buffer_size)],
      ["Max storage binding", formatBytes(a.max_storage_buffer_binding_size)],
      ["Storage buffers per stage", a.max_storage_buffers_per_shader_stage],
      ["Invocations per workgroup", a.max_compute_invocations_per_workgroup],
      ["Workgroup storage", formatBytes(a.max_compute_workgroup_storage_size)],
      ["Limits requested", "all the adapter offers (cubecl asks for them)"],
    );
  }
  fillTable($("adapter"), rows);
  const onGpu = report.backend === "webgpu";
  const reason = onGpu ? "this adapter lacks shader-f16" : "the CPU backend has no f16 kernels";
  offerF16(onGpu && Boolean(a?.shader_f16), reason);
}

function showPlan(preview) {
  const chosen = preview.chosen;
  const plan = $("plan");
  plan.classList.toggle("refused", !chosen);
  if (!chosen) {
    showRefusal(plan, preview.refusal);
    return;
  }
  delete plan.dataset.neededBytes;
  delete plan.dataset.capBytes;
  const cap = preview.plan.cap;
  const data = describeData(chosen.data);
  const setting = `micro-batch ${chosen.micro_batch} × ${chosen.accumulation_steps} accumulation step(s), ${describeLevers(chosen)}, ${data}`;
  const peak = `predicted peak ${formatBytes(chosen.predicted_peak)} (device ${formatBytes(chosen.predicted_peak - chosen.breakdown.data)}, data ${formatBytes(chosen.breakdown.data)})`;
  const against = cap ? ` of the ${formatBytes(cap)} cap` : " (no cap)";
  const note = preview.precision_note ? ` Note: ${preview.precision_note}.` : "";
  const why = preview.levers_reason ? ` Why: ${preview.levers_reason}.` : "";
  plan.textContent = `Plan: ${setting}; ${peak}${against}.${why}${note}`;
  plan.dataset.predictedPeak = chosen.predicted_peak;
  showLevers(preview.levers);
}

/// How the data pipeline runs (Rust's `DataSettings`), in the words of its `Display`.
function describeData(settings) {
  return `prefetch ${settings.prefetch}${settings.pause_training_for_eval ? ", training stream paused for evaluation" : ""}`;
}

/// Why no setting fits the cap, from the planner's figures (Rust's `Refusal`); the figures
/// themselves go on the element as data attributes.
function showRefusal(element, refusal) {
  element.textContent = `Nothing fits: ${describeRefusal(refusal)}`;
  element.dataset.capBytes = refusal.cap_bytes;
  element.dataset.neededBytes = refusal.needed_bytes;
}

function leverName(lever) {
  switch (lever.kind) {
    case "smaller-chunks":
      return `chunks of ${lever.chunk_samples} samples, made by headroom prepare --chunk-samples ${lever.chunk_samples}`;
    case "f16-storage":
      return "f16 storage";
    case "eight-bit-moments":
      return "8-bit moments";
    case "f16-without-master":
      return "f16 storage without the f32 master copy";
    case "all-of-these":
      return "all of these";
    default:
      return lever.kind;
  }
}

function describeRefusal(refusal) {
  const cap = formatBytes(refusal.cap_bytes);
  const s = refusal.setting;
  const data = describeData(s.data);
  const pages = s.smaller_micro_batches_need_more
    ? "; smaller micro-batches need more here: they accumulate, which keeps a sum of every gradient, or the device allocator rounds their tensors into pages"
    : "";
  const setting = `micro-batch ${s.micro_batch}, ${data}: a peak of ${formatBytes(s.peak_bytes)} (device ${formatBytes(s.device_bytes)}, data ${formatBytes(s.data_bytes)}) and the enforcer's 10% headroom${pages}`;
  const fitting = refusal.levers.filter((l) => l.needed_bytes <= refusal.cap_bytes);
  const advice = fitting.length
    ? `Under ${cap} it fits with ${fitting.map((l) => `${leverName(l.lever)} (fits under ${formatBytesUp(l.needed_bytes)})`).join(", or ")}; or raise the cap.`
    : `No lever left to this run fits ${cap}${refusal.levers.length ? ` (it would need ${refusal.levers.map((l) => `${formatBytesUp(l.needed_bytes)} with ${leverName(l.lever)}`).join(", ")})` : ""}: raise the cap or choose a smaller model.`;
  return `a cap of ${cap} fits no setting of this run: the smallest cap that fits is ${formatBytesUp(refusal.needed_bytes)} (${setting}). ${advice}`;
}

/// What each lever would hold for this run, by the census, against none.
function showLevers(levers) {
  const none = levers.find((l) => l.lever === "none")?.device_bytes;
  fillTable($("levers"), levers.map((l) => [
    `${l.lever} (micro-batch ${l.micro_batch}, ${describeLevers(l)})`,
    `${formatBytes(l.device_bytes)}${none ? ` · ${(l.device_bytes / none).toFixed(2)}×` : ""}`,
  ]));
  $("levers").hidden = levers.length === 0;
}

/// The run's figure after the probe steps, beside the census's preview.
function showCalibration(started) {
  if (started.calibrated_peak == null) return;
  const probes = started.calibration.probes.map((p) => `${p.micro_batch}: ${formatBytes(p.peak_reserved)}`).join(", ");
  const line = `Calibrated on probe steps: peak ${formatBytes(started.calibrated_peak)} at micro-batch ${started.micro_batch} (census ${formatBytes(started.predicted_peak)}; device measured at micro-batch ${probes}).`;
  const plan = $("plan");
  plan.textContent = `${plan.textContent} ${line}`;
  plan.dataset.calibratedPeak = started.calibrated_peak;
}

/// Whether a run holds the plan panel: its calibration line must not be replaced by a
/// preview of settings edited meanwhile (those are previewed once the run ends).
function runInProgress() {
  return page.state === "starting" || page.state === "running" || page.state === "paused";
}

function schedulePlan() {
  clearTimeout(planTimer);
  planTimer = setTimeout(() => {
    if (page.state === "loading") return;
    if (runInProgress()) {
      planAfterRun = true;
      return;
    }
    try {
      post({ type: Request.PLAN, ...readRun() });
    } catch (error) {
      $("plan").textContent = error.message;
      $("plan").classList.add("refused");
    }
  }, PLAN_DELAY_MS);
}

/// The curves a resumed run had drawn before it was saved, into the charts and the log.
function replayHistory(history, at) {
  history.losses.forEach((loss, i) => {
    log.push({ event: "step", step: i + 1, loss, replayed: true, at });
    charts.addStep(i + 1, loss);
  });
  for (const e of history.evals) {
    log.push({ at, ...e, event: "eval", replayed: true });
    charts.addEval(e.step, e.loss, e.accuracy);
  }
}

function onEvents(events, at) {
  for (const event of events) {
    log.push({ at, ...event });
    switch (event.event) {
      case "started":
        page.total = event.total_steps;
        page.tokensPerSample = event.tokens_per_sample;
        $("sample-panel").hidden = event.tokens_per_sample == null;
        charts.startRun(at, event.cap, event.calibrated_peak ?? event.predicted_peak);
        if (event.resumed_at != null && page.resuming) replayHistory(page.resuming.history, at);
        page.resuming = null;
        showCalibration(event);
        if (event.updates_in_backward) $("plan").textContent += " Each segment's update runs inside backward: one segment's gradients at a time.";
        if (event.precision_note) showStatus(`Training (${event.precision_note}).`);
        break;
      case "step":
        page.trained = true;
        offerGenerate();
        charts.addStep(event.step, event.loss);
        charts.addMemory(at, event.memory);
        $("progress").textContent = `Step ${event.step} of ${page.total} · loss ${event.loss.toFixed(4)} · ${speed(event.samples_per_sec)} · micro-batch ${event.micro_batch}${event.loss_scale ? ` · loss scale ${event.loss_scale}` : ""}${page.perplexity ?? ""}`;
        break;
      case "eval":
        charts.addEval(event.step, event.loss, event.accuracy);
        page.perplexity = page.tokensPerSample == null ? null : ` · test perplexity ${event.perplexity.toFixed(2)}`;
        break;
      case "sample":
        $("sample-step").textContent = `(step ${event.step})`;
        $("sample-text").textContent = event.prompt + event.text;
        break;
      case "enforced":
        charts.addMarker(at, `micro-batch ${event.from_micro_batch}→${event.to_micro_batch}`);
        break;
      case "finished":
        page.summary = event;
        break;
    }
  }
  $("export-metrics").disabled = false;
}

/// Samples/s, or tokens/s for text.
function speed(samplesPerSec) {
  if (page.tokensPerSample == null) return `${Math.round(samplesPerSec)} samples/s`;
  return `${Math.round(samplesPerSec * page.tokensPerSample)} tokens/s`;
}

function describeEnd(stopped) {
  const s = page.summary;
  if (stopped || !s) return "Stopped.";
  const perplexity = s.eval && page.tokensPerSample != null ? `, test perplexity ${s.eval.perplexity.toFixed(2)}` : "";
  const accuracy = s.eval ? `, test accuracy ${(s.eval.accuracy * 100).toFixed(2)}%${perplexity}` : "";
  return `Finished: ${s.steps} steps, final loss ${s.final_loss.toFixed(4)}${accuracy}, ${speed(s.samples_per_sec)}, peak ${formatBytes(countedBytes(s.peak_memory))} counted against the cap.`;
}

function download(name, parts, type) {
  const url = URL.createObjectURL(new Blob(parts, { type }));
  const link = Object.assign(document.createElement("a"), { href: url, download: name });
  link.click();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

function onMessage({ data }) {
  switch (data.type) {
    case Reply.READY:
      page.workerReady = true;
      if (page.autoResume) {
        resumeAfterLoss(page.autoResume);
        page.autoResume = null;
      } else {
        // A fresh worker after a failed run: the failure stays on screen.
        if (!$("status").classList.contains("error")) showStatus("Ready.");
        setState("ready");
      }
      refreshSavedRuns();
      post({ type: Request.DESCRIBE, backend: $("backend").value });
      schedulePlan();
      break;
    case Reply.DEVICE:
      if (stale(data, Request.DESCRIBE)) break;
      showDevice(data.report);
      break;
    case Reply.PLANNED:
      if (stale(data, Request.PLAN)) break;
      showPlan(data.preview);
      showDevice(data.preview.device);
      break;
    case Reply.PROBE:
      log.push({ event: "probe", at: data.at, ...data.report });
      if (page.state === "starting") showStatus(describeProbe(data.report));
      break;
    case Reply.STARTED:
      page.runId = data.id;
      showDevice(data.device);
      showStatus("Training…");
      setState("running");
      break;
    case Reply.EVENTS:
      onEvents(data.events, data.at);
      break;
    case Reply.MEMORY:
      log.push({ event: "memory", at: data.at, ...data.sample });
      charts.addMemory(data.at, data.sample);
      break;
    case Reply.PAUSED:
      showStatus("Paused.");
      setState("paused");
      break;
    case Reply.RESUMED:
      showStatus("Training…");
      setState("running");
      break;
    case Reply.ENDED:
      showStatus(describeEnd(data.stopped));
      setState("ended");
      refreshSavedRuns();
      if (planAfterRun) {
        planAfterRun = false;
        schedulePlan();
      }
      break;
    case Reply.SAVED:
      page.saved = { id: data.id, step: data.step };
      $("saved-status").textContent = `Saved at step ${data.step}: after a reload or a crash, resume it from Saved runs.`;
      refreshSavedRuns();
      break;
    case Reply.MODEL:
      download("headroom-model.bpk", [data.bytes], "application/octet-stream");
      break;
    case Reply.RUN:
      download("headroom-run.bin", [data.bytes], "application/octet-stream");
      break;
    case Reply.SAFETENSORS:
      download("headroom-model.safetensors", [data.bytes], "application/octet-stream");
      break;
    case Reply.PREPARED:
      onPrepared(data, listDatasets).then(schedulePlan, (error) => showError(error.message));
      break;
    case Reply.GENERATED:
      log.push({ event: "generated", at: Date.now(), ...data.sample });
      onGenerated(data);
      break;
    case Reply.STREAMED:
      showStreamed(data.manifest, data.figures);
      break;
    case Reply.ERROR:
      onError(data);
      break;
  }
}

function onError(reply) {
  const { request, kind, refusal } = reply;
  // A refused cap is formatted here, from its figures.
  const message = refusal ? describeRefusal(refusal) : reply.message;
  page.incidents.push({ request, kind, message, at: Date.now() });
  if (request === Request.PLAN) {
    if (stale(reply, Request.PLAN)) return;
    $("plan").textContent = explain(message, kind);
    $("plan").dataset.kind = kind ?? "";
    $("plan").classList.add("refused");
  } else if (request === Request.PREPARE_TEXT) {
    onTextError(explain(message, kind), kind ?? "");
  } else if (request === Request.GENERATE) {
    $("generated-text").textContent = explain(message, kind);
  } else if (request === Request.STREAM) {
    showStreamError(explain(message, kind));
  } else if (request === "save") {
    // The run goes on; only this save failed.
    $("saved-status").textContent = explain(message, kind);
    $("saved-status").dataset.kind = kind ?? "";
  } else if (request === Request.START || request === Request.RESUME_SAVED) {
    // A failed run may leave the wasm instance unusable (a panic, a lost device): start over.
    startWorker();
    if (kind === ErrorKind.DEVICE_LOST && page.saved?.id === page.runId) {
      // The fresh worker takes the run up from its last checkpoint once it is ready.
      page.autoResume = page.saved.id;
      showError(`${message}. A fresh worker resumes the run from its checkpoint at step ${page.saved.step}`, kind);
      $("status").dataset.kind = "device-lost-resuming";
    } else {
      showError(message, kind);
    }
    setState("ended");
  } else {
    showError(message, kind);
  }
}

function startWorker() {
  worker?.terminate();
  setState("loading");
  const script = new URL("./worker.js", import.meta.url);
  // The worker keeps the page's choices (`?store=indexeddb`, see saved-runs.js).
  script.search = location.search;
  worker = new Worker(script, { type: "module" });
  worker.onmessage = onMessage;
  page.workerReady = false;
  worker.onerror = (event) => {
    const failure = `The worker failed: ${event.message ?? "unknown error"}`;
    page.incidents.push({ request: null, kind: ErrorKind.CRASHED, message: failure, at: Date.now() });
    // A worker that ran is replaced; one that never got ready (its module failed to load)
    // would only fail again.
    if (page.workerReady) {
      startWorker();
      showError(`${failure}; a fresh worker was started`, ErrorKind.CRASHED);
    } else {
      showError(failure);
      setState("ended");
    }
  };
}

/// A clean slate for a run about to start.
function beginRun(status) {
  // A preview still pending or in flight, or owed for edits during an earlier run that
  // failed, answers settings this run has taken over.
  clearTimeout(planTimer);
  delete newest[Request.PLAN];
  planAfterRun = false;
  charts.reset();
  log.clear();
  page.summary = null;
  page.trained = false;
  page.perplexity = null;
  $("progress").textContent = "";
  $("saved-status").textContent = "";
  showStatus(status);
  setState("starting");
}

$("start").addEventListener("click", async () => {
  let run;
  try {
    run = readRun();
  } catch (error) {
    showError(error.message);
    return;
  }
  beginRun("Starting…");
  log.push({ event: "config", at: Date.now(), ...run });
  post({ type: Request.START, ...run, init: await initWeights() });
});

function resumeRun(run, status = `Resuming at step ${run.step}…`) {
  beginRun(status);
  page.resuming = run;
  post({ type: Request.RESUME_SAVED, id: run.id });
}

/// After a lost device: the run `id` goes on from its last checkpoint in the fresh worker.
async function resumeAfterLoss(id) {
  const run = (await listRuns().catch(() => [])).find((r) => r.id === id);
  if (!run) {
    showError("The GPU device was lost and the run's checkpoint cannot be read; press Start to train again");
    setState("ready");
    return;
  }
  resumeRun(run, `The GPU device was lost: resuming from the checkpoint at step ${run.step}…`);
}

function describeSaved(run) {
  const model = run.config.model.kind.toUpperCase();
  const dataset = new URL(run.url).pathname.split("/").filter(Boolean).at(-1);
  const loss = run.history.losses.at(-1);
  const lossText = loss == null ? "" : `, loss ${loss.toFixed(4)}`;
  return `${model} on ${dataset} (${run.backend}): step ${run.step} of ${run.total_steps}${lossText}, saved ${new Date(run.saved_at).toLocaleString()}`;
}

/// The curves of a saved run, before it is resumed.
function previewSaved(run) {
  charts.reset();
  run.history.losses.forEach((loss, i) => charts.addStep(i + 1, loss));
  for (const e of run.history.evals) charts.addEval(e.step, e.loss, e.accuracy);
  $("progress").textContent = `Saved run: step ${run.step} of ${run.total_steps}. Resume it below, or start a new run.`;
}

/// The saved runs, each with Resume (its curves come back with it) and Delete.
async function refreshSavedRuns() {
  let runs;
  try {
    runs = await listRuns();
  } catch (error) {
    $("saved-status").textContent = error.message;
    return;
  }
  $("saved-runs").hidden = runs.length === 0;
  // A page that has run nothing yet shows the newest saved run's curves.
  if (runs.length > 0 && page.state === "ready" && log.length === 0) previewSaved(runs[0]);
  $("saved-list").replaceChildren(
    ...runs.map((run) => {
      const item = document.createElement("li");
      item.dataset.id = run.id;
      const resume = Object.assign(document.createElement("button"), { type: "button", textContent: "Resume" });
      const remove = Object.assign(document.createElement("button"), { type: "button", textContent: "Delete", className: "secondary" });
      resume.addEventListener("click", () => resumeRun(run));
      remove.addEventListener("click", () => deleteRun(run.id).then(refreshSavedRuns, (error) => showError(error.message)));
      item.append(`${describeSaved(run)} `, resume, " ", remove);
      return item;
    }),
  );
  setState(page.state);
}
$("pause").addEventListener("click", () => post({ type: Request.PAUSE }));
$("resume").addEventListener("click", () => post({ type: Request.RESUME }));
$("stop").addEventListener("click", () => post({ type: Request.STOP }));
$("export-model").addEventListener("click", () => post({ type: Request.EXPORT }));
$("export-run").addEventListener("click", () => post({ type: Request.EXPORT_RUN }));
$("export-safetensors").addEventListener("click", () => post({ type: Request.EXPORT_SAFETENSORS }));
$("export-metrics").addEventListener("click", () =>
  download("headroom-metrics.jsonl", log.entries().map((entry) => `${JSON.stringify(entry)}\n`), "application/x-ndjson"),
);
$("model").addEventListener("change", onModelChange);
$("run-form").addEventListener("input", schedulePlan);
$("run-form").addEventListener("change", schedulePlan);
$("backend").addEventListener("change", () => post({ type: Request.DESCRIBE, backend: $("backend").value }));
$("run-form").addEventListener("submit", (event) => event.preventDefault());
wireStreamPanel(post);
wireOwnData(post, { listDatasets, changed: schedulePlan, idle: () => page.state === "ready" || page.state === "ended" });
sampleHeap(({ bytes }) => charts.setHeap(bytes));
const heapLimit = heapNote();
$("heap-note").hidden = heapLimit == null;
$("heap-note").textContent = heapLimit ?? "";

startWorker();
listDatasets().then(
  () => {
    offerForget(page.state === "ready" || page.state === "ended");
    schedulePlan();
  },
  (error) => showError(`No datasets: ${error.message}`),
);
