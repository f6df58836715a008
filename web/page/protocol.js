// The worker protocol, in one place.
//
// Requests (page -> worker):
//   { type: "describe", backend }                      which device a run would get
//   { type: "plan", url, config, backend }             the planner's preview
//   { type: "start", url, config, backend, saveEvery, init? }
//                                                      start a run, saved every saveEvery steps,
//                                                      from init's parameters (safetensors bytes) if given
//   { type: "resume-saved", id, backend }              go on with a saved run (saved-runs.js)
//   { type: "pause" } { type: "resume" } { type: "stop" }
//   { type: "export" }                                 the model as a burnpack file
//   { type: "export-run" }                             the whole run as a checkpoint blob
//   { type: "export-safetensors" }                     the model in PyTorch's names and layouts
//   { type: "prepare-text", name, files }              files ([{ name, bytes }]) as a text dataset kept in the browser
//   { type: "generate", prompt, tokens, temperature, seed }  text from the GPT (between steps)
//   { type: "lose-device" }                            test hook: destroy the GPU device (as a driver reset would)
//   { type: "crash" }                                  test hook: an uncaught error in the worker
//   { type: "stream", url, split, batch, options }     read one epoch, no training
// Replies (worker -> page):
//   { type: "ready" }                                  once the wasm module is loaded
//   { type: "device", report }                         answers describe
//   { type: "planned", preview }                       answers plan
//   { type: "probe", report, at }                      a probe step before step 1 starts or ends (Rust's ProbeReport)
//   { type: "started", device }                        the run's device; events follow
//   { type: "events", events, at }                     TrainEvents of one step (at: ms epoch)
//   { type: "memory", sample, at }                     a MemorySample between steps
//   { type: "paused" }                                 the run rests between two steps
//   { type: "resumed" }
//   { type: "ended", stopped }                         the run finished or was stopped
//   { type: "saved", id, step }                        the run was saved (every saveEvery steps, on pause and stop)
//   { type: "model", bytes }                           answers export (Uint8Array)
//   { type: "run", bytes }                             answers export-run (Uint8Array)
//   { type: "safetensors", bytes }                     answers export-safetensors (Uint8Array)
//   { type: "prepared", name, train, test }            answers prepare-text (tokens in each split)
//   { type: "generated", sample }                      answers generate (Rust's TextSample)
//   { type: "streamed", manifest, figures }            answers stream
//   { type: "error", request, kind, message, refusal? } any failure: its ErrorKind, in plain words;
//                                                      a refused cap also its figures (Rust's Refusal)
//
// Every request carries a requestId the page numbers; the reply that answers it (and an
// error it ends in) carries it back, so the page drops a reply to a request it has since
// sent again (a late plan). config is the Rust TrainConfig; events, samples, previews and figures are the Rust
// structs of the same names, serialized by serde.

export const Request = Object.freeze({
  DESCRIBE: "describe",
  PLAN: "plan",
  START: "start",
  RESUME_SAVED: "resume-saved",
  PAUSE: "pause",
  RESUME: "resume",
  STOP: "stop",
  EXPORT: "export",
  EXPORT_RUN: "export-run",
  EXPORT_SAFETENSORS: "export-safetensors",
  PREPARE_TEXT: "prepare-text",
  GENERATE: "generate",
  LOSE_DEVICE: "lose-device",
  CRASH: "crash",
  STREAM: "stream",
});

export const Reply = Object.freeze({
  READY: "ready",
  DEVICE: "device",
  PLANNED: "planned",
  PROBE: "probe",
  STARTED: "started",
  EVENTS: "events",
  MEMORY: "memory",
  PAUSED: "paused",
  RESUMED: "resumed",
  ENDED: "ended",
  SAVED: "saved",
  MODEL: "model",
  RUN: "run",
  SAFETENSORS: "safetensors",
  PREPARED: "prepared",
  GENERATED: "generated",
  STREAMED: "streamed",
  ERROR: "error",
});

/// What kind of failure an error reply reports: Rust's `ErrorKind` (crate/error.rs),
/// and those the worker adds. The page acts on the kind; the message is for the user.
export const ErrorKind = Object.freeze({
  DATASET_MISSING: "dataset-missing",
  NETWORK: "network",
  BAD_DATASET: "bad-dataset",
  BAD_SETTINGS: "bad-settings",
  CAP_TOO_SMALL: "cap-too-small",
  CAP_EXCEEDED: "cap-exceeded",
  DIVERGED: "diverged",
  NO_DEVICE: "no-device",
  DEVICE_LOST: "device-lost",
  READBACK: "readback",
  BUSY: "busy",
  BAD_CHECKPOINT: "bad-checkpoint",
  /// The wasm module trapped (a Rust panic) or did not load.
  CRASHED: "crashed",
  /// The browser's storage for saved runs is full: the save failed, the run goes on.
  STORAGE_FULL: "storage-full",
  /// Saved runs cannot be written or read here (no Origin Private File System).
  STORAGE: "storage",
});

/// How often the worker samples memory between steps.
export const MEMORY_SAMPLE_MS = 250;
