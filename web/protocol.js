// The worker protocol, in one place. The page posts requests; the worker answers each
// with exactly one reply.
//
// Requests (page -> worker):
//   { type: "stream", url: string (absolute dataset URL), split: "train" | "test",
//     batch: number, options: { prefetch: number, seed: number } }
// Replies (worker -> page):
//   { type: "ready" }                                   once the wasm module is loaded
//   { type: "streamed", manifest: Manifest, figures: EpochFigures }
//   { type: "error", message: string }                  any failure, in plain words
//
// Manifest and EpochFigures are the Rust structs of the same names, serialized by serde.

export const Request = Object.freeze({ STREAM: "stream" });
export const Reply = Object.freeze({ READY: "ready", STREAMED: "streamed", ERROR: "error" });
