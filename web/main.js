// The page: reads the controls, asks the worker, shows what comes back.
import { Reply, Request } from "./protocol.js";

const form = document.getElementById("stream-form");
const button = document.getElementById("stream");
const status = document.getElementById("status");
const table = document.getElementById("figures");
const datasetSelect = document.getElementById("dataset");

const worker = new Worker(new URL("./worker.js", import.meta.url), { type: "module" });
worker.onerror = (event) => showError(`The worker failed: ${event.message ?? "unknown error"}`);

function showStatus(text) {
  status.textContent = text;
  status.classList.remove("error");
}

function showError(text) {
  status.textContent = text;
  status.classList.add("error");
  button.disabled = false;
}

function formatBytes(bytes) {
  const units = ["B", "KiB", "MiB", "GiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${bytes} B` : `${value.toFixed(1)} ${units[unit]}`;
}

function showFigures(manifest, figures) {
  const rows = [
    ["Dataset", `${manifest.name} (${manifest.class_names.length} classes)`],
    ["Samples", `${figures.samples} in ${figures.batches} batches`],
    ["Time", `${figures.seconds.toFixed(2)} s`],
    ["Samples/s", Math.round(figures.samples_per_sec).toLocaleString("en")],
    ["Chunks fetched", `${figures.transport.chunks_fetched} (${formatBytes(figures.transport.bytes_fetched)} over the wire)`],
    ["Retries", figures.transport.retries],
    ["Data pipeline peak", formatBytes(figures.memory.peak_bytes_held)],
    ["Bound (prefetch + 1 chunks)", formatBytes(figures.memory.bound_bytes)],
    ["Order digest", figures.order_digest.slice(0, 16)],
  ];
  const body = table.tBodies[0];
  body.replaceChildren(
    ...rows.map(([name, value]) => {
      const row = document.createElement("tr");
      row.dataset.figure = name;
      const th = document.createElement("th");
      th.textContent = name;
      const td = document.createElement("td");
      td.textContent = value;
      row.append(th, td);
      return row;
    }),
  );
  table.dataset.figures = JSON.stringify(figures);
  table.hidden = false;
}

worker.onmessage = ({ data }) => {
  switch (data.type) {
    case Reply.READY:
      showStatus("Ready.");
      button.disabled = false;
      break;
    case Reply.STREAMED:
      showStatus("Done: every chunk arrived and passed its checksum.");
      showFigures(data.manifest, data.figures);
      button.disabled = false;
      break;
    case Reply.ERROR:
      showError(data.message);
      break;
  }
};

async function listDatasets() {
  const response = await fetch("data/index.json");
  if (!response.ok) throw new Error(`data/index.json: HTTP ${response.status} (run headroom prepare)`);
  const { datasets } = await response.json();
  datasetSelect.replaceChildren(
    ...datasets.map(({ path, name, train, test }) => new Option(`${name} (${train} + ${test})`, `data/${path}`)),
  );
}

form.addEventListener("submit", (event) => {
  event.preventDefault();
  const number = (id) => Number(document.getElementById(id).value);
  button.disabled = true;
  table.hidden = true;
  showStatus("Streaming…");
  worker.postMessage({
    type: Request.STREAM,
    url: new URL(datasetSelect.value, document.baseURI).href,
    split: document.getElementById("split").value,
    batch: number("batch"),
    options: { prefetch: number("prefetch"), seed: number("seed") },
  });
});

button.disabled = true;
listDatasets().catch((error) => showError(`No datasets: ${error.message}`));
