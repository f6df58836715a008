// The user's own material in the page: text files dropped on the run form or picked, which
// the worker prepares and keeps (local-data.js); a safetensors file a run starts from; and
// the Generate box, which asks the GPT for text during a run or after it.
import { datasetName } from "./local-data.js";
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

export function wireOwnData(post) {
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
