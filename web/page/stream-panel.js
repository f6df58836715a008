// The data pipeline on its own: stream one epoch through the worker and show its figures.
import { fillTable, formatBytes } from "./format.js";
import { textWindow } from "./controls.js";
import { Request } from "./protocol.js";

const $ = (id) => document.getElementById(id);

export function showStreamed(manifest, figures) {
  $("stream-status").textContent = "Done: every chunk arrived and passed its checksum.";
  $("stream-status").classList.remove("error");
  fillTable($("figures"), [
    ["Dataset", manifest.vocabulary ? `${manifest.name} (text, ${manifest.vocabulary.length} symbols)` : `${manifest.name} (${manifest.class_names.length} classes)`],
    ["Samples", `${figures.samples} in ${figures.batches} batches`],
    ["Time", `${figures.seconds.toFixed(2)} s`],
    ["Samples/s", Math.round(figures.samples_per_sec).toLocaleString("en")],
    ["Chunks fetched", `${figures.transport.chunks_fetched} (${formatBytes(figures.transport.bytes_fetched)} over the wire)`],
    ["Retries", figures.transport.retries],
    ["Data pipeline peak", formatBytes(figures.memory.peak_bytes_held)],
    ["Bound (chunks open + prefetched)", formatBytes(figures.memory.bound_bytes)],
    ["Order digest", figures.order_digest.slice(0, 16)],
  ]);
  $("figures").dataset.figures = JSON.stringify(figures);
  $("figures").hidden = false;
  $("stream").disabled = false;
}

export function showStreamError(message) {
  $("stream-status").textContent = message;
  $("stream-status").classList.add("error");
  $("stream").disabled = false;
}

export function wireStreamPanel(post) {
  $("stream-form").addEventListener("submit", (event) => {
    event.preventDefault();
    $("stream").disabled = true;
    $("figures").hidden = true;
    $("stream-status").textContent = "Streaming…";
    $("stream-status").classList.remove("error");
    post({
      type: Request.STREAM,
      url: new URL($("dataset").value, document.baseURI).href,
      split: $("split").value,
      batch: Number($("batch").value),
      options: { prefetch: Number($("prefetch").value), seed: Number($("seed").value), window: textWindow() },
    });
  });
}
