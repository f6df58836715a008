// The worker protocol, in one place.
//
// Requests (page -> worker):
//   { type: "describe", backend }                      which device a run would get
//   { type: "plan", url, config, backend }             the planner's preview
//   { type: "start", url, config, backend }            start a run
//   { type: "pause" } { type: "resume" } { type: "stop" }
//   { type: "export" }                                 the model as a burnpack file
//   { type: "stream", url, split, batch, options }     read one epoch, no training
// Replies (worker -> page):
//   { type: "ready" }                                  once the wasm module is loaded
//   { type: "device", report }                         answers describe
//   { type: "planned", preview }                       answers plan
//   { type: "started", device }                        the run's device; events follow
//   { type: "events", events, at }                     TrainEvents of one step (at: ms epoch)
//   { type: "memory", sample, at }                     a MemorySample between steps
//   { type: "paused" }                                 the run rests between two steps
//   { type: "resumed" }
//   { type: "ended", stopped }                         the run finished or was stopped
//   { type: "model", bytes }                           answers export (Uint8Array)
//   { type: "streamed", manifest, figures }            answers stream
//   { type: "error", request, kind, message }          any failure: its ErrorKind, in plain words
//
// config is the Rust TrainConfig; events, samples, previews and figures are the Rust
// structs of the same names, serialized by serde.

export const Request = Object.freeze({
  DESCRIBE: "describe",
  PLAN: "plan",
  START: "start",
  PAUSE: "pause",
  RESUME: "resume",
  STOP: "stop",
  EXPORT: "export",
  STREAM: "stream",
});

export const Reply = Object.freeze({
  READY: "ready",
  DEVICE: "device",
  PLANNED: "planned",
  STARTED: "started",
  EVENTS: "events",
  MEMORY: "memory",
  PAUSED: "paused",
  RESUMED: "resumed",
  ENDED: "ended",
  MODEL: "model",
  STREAMED: "streamed",
  ERROR: "error",
});

/// What kind of failure an error reply reports: Rust's `ErrorKind` (crate/data/error.rs),
/// and two the worker adds. The page acts on the kind; the message is for the user.
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
});

/// How often the worker samples memory between steps.
export const MEMORY_SAMPLE_MS = 250;
