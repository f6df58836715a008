// The user's own material in the page: text files dropped on the run form or picked, which
// the worker prepares and keeps (local-data.js); a safetensors file a run starts from; and
// the Generate box, which asks the GPT for text during a run or after it.
import { LOCAL_PREFIX, datasetName, deleteLocal } from "./local-data.js";
import { Request } from "./protocol.js";

const $ = (id) => document.getElementById(id);
const TEXT_FILE = /\.(txt|md)$/i;

function say(message, kind = "") {
  $("text-status").textContent = message;
  $("text-status").dataset.kind = kind;
}

/// Sends `files`' text to the worker to prepare, named after the first.
async function prepare(post, files) {
  const text = files.filter((file) => TEXT_FILE.test(file.name));
  if (text.length === 0) {
    say("Only .txt and .md files become a text dataset.", "bad-dataset");
    return;
  }
  const name = datasetName(text[0].name);
  say(`Preparing ${text.map((f) => f.name).join(", ")} as ${name}…`);
  const contents = await Promise.all(text.map(async (f) => ({ name: f.name, bytes: new Uint8Array(await f.arrayBuffer()) })));
  post({ type: Request.PREPARE_TEXT, name, files: contents });
}

/// The kept dataset chosen, if one is.
function chosenLocal() {
  const value = $("dataset").value;
  return value.startsWith(LOCAL_PREFIX) ? value.slice(LOCAL_PREFIX.length) : null;
}

/// Forget is offered for a kept dataset while no run is using one.
export function offerForget(idle) {
  $("forget-dataset").hidden = chosenLocal() == null;
  $("forget-dataset").disabled = !idle;
}

/// `listDatasets` lists what is offered again; `changed` previews the new choice.
export function wireOwnData(post, { listDatasets, changed, idle }) {
  // A model change may choose another dataset too.
  for (const id of ["dataset", "model"]) $(id).addEventListener("change", () => offerForget(idle()));
  $("forget-dataset").addEventListener("click", async () => {
    const name = chosenLocal();
    if (name == null) return;
    try {
      await deleteLocal(name);
      await listDatasets();
      say(`Forgot ${name}: it is no longer kept in this browser.`);
    } catch (error) {
      say(`${name} could not be removed: ${error.message}`, "storage");
    }
    offerForget(idle());
    changed();
  });
  const picker = $("text-files");
  picker.addEventListener("change", () => prepare(post, [...picker.files]).finally(() => (picker.value = "")));
  const form = $("run-form");
  const carriesFiles = (event) => [...(event.dataTransfer?.types ?? [])].includes("Files");
  form.addEventListener("dragover", (event) => {
    if (!carriesFiles(event)) return;
    event.preventDefault();
    form.classList.add("dropping");
  });
  form.addEventListener("dragleave", () => form.classList.remove("dropping"));
  form.addEventListener("drop", (event) => {
    if (!carriesFiles(event)) return;
    event.preventDefault();
    form.classList.remove("dropping");
    prepare(post, [...event.dataTransfer.files]);
  });
  $("generate-form").addEventListener("submit", (event) => {
    event.preventDefault();
    $("generated-text").textContent = "Generating…";
    post({
      type: Request.GENERATE,
      prompt: $("generate-prompt").value || "\n",
      tokens: Number($("generate-length").value),
      temperature: Number($("generate-temperature").value),
      seed: Math.floor(Math.random() * 2 ** 32),
    });
  });
}

/// The text was kept: the dataset list shows it, chosen, with the GPT.
export async function onPrepared({ name, train, test }, listDatasets) {
  await listDatasets();
  $("dataset").value = `local-data/${name}`;
  if ($("model").value !== "gpt") {
    $("model").value = "gpt";
    $("model").dispatchEvent(new Event("change", { bubbles: true }));
    $("dataset").value = `local-data/${name}`;
  }
  $("dataset").dispatchEvent(new Event("change", { bubbles: true }));
  // Said last: the dataset is listed and chosen by now.
  say(`Prepared ${name}: ${train} + ${test} characters, kept in this browser.`);
}

export function onTextError(message, kind) {
  say(message, kind);
}

export function onGenerated({ sample }) {
  $("generated-text").textContent = sample.prompt + sample.text;
}

/// The bytes of the safetensors file Start from names, if any.
export async function initWeights() {
  const file = $("init-weights").files?.[0];
  return file ? new Uint8Array(await file.arrayBuffer()) : undefined;
}
