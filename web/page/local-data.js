// Text datasets the user brings, kept in the browser: the worker has the wasm module prepare
// the files (the rules of `headroom prepare --text`) into chunks and a manifest, kept in the
// Origin Private File System under datasets/NAME/, so that a reload keeps them. The page
// lists them beside the server's datasets, at local-data/NAME under its own address; the
// worker answers the wasm module's fetches of those addresses from storage (serveLocal), so
// they stream, checksummed, like any other dataset.
import { ErrorKind } from "./protocol.js";
import { writeAtomically } from "./saved-runs.js";

/// Where a kept dataset is, relative to the page.
export const LOCAL_PREFIX = "local-data/";
const ROOT = "datasets";
const MANIFEST = "manifest.json";

async function datasets(create = false) {
  const storage = await navigator.storage.getDirectory();
  return storage.getDirectoryHandle(ROOT, { create });
}

/// A dataset's name from a file's: lowercase letters, digits and dashes, at most 40.
export function datasetName(fileName) {
  const stem = fileName.replace(/\.[^.]*$/, "").toLowerCase();
  const name = stem.replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "").slice(0, 40);
  return name || "text";
}

/// Keeps a prepared dataset: its chunks first, its manifest last, so that a dataset is
/// listed only once whole. One of the same name is replaced.
export async function saveDataset(name, manifest, chunks) {
  try {
    const root = await datasets(true);
    await root.removeEntry(name, { recursive: true }).catch(() => {});
    const folder = await root.getDirectoryHandle(name, { create: true });
    for (const { file, bytes } of chunks) await writeAtomically(folder, file, bytes);
    await writeAtomically(folder, MANIFEST, manifest);
  } catch (error) {
    const full = error?.name === "QuotaExceededError";
    const message = full ? "the browser's storage for this page is full" : (error?.message ?? String(error));
    throw Object.assign(new Error(`The text could not be kept: ${message}`), { kind: full ? ErrorKind.STORAGE_FULL : ErrorKind.STORAGE });
  }
}

/// The kept datasets: `{ name, train, test }` each (tokens), by name; none where the browser
/// has no OPFS.
export async function listLocal() {
  if (!navigator.storage?.getDirectory) return [];
  const found = [];
  let root;
  try {
    root = await datasets();
  } catch {
    return found; // nothing kept yet
  }
  for await (const [name, handle] of root.entries()) {
    if (handle.kind !== "directory") continue;
    try {
      const file = await (await handle.getFileHandle(MANIFEST)).getFile();
      const { counts } = JSON.parse(await file.text());
      found.push({ name, train: counts.train ?? 0, test: counts.test ?? 0 });
    } catch {
      // A dataset whose manifest is missing was cut short: not listed.
    }
  }
  return found.sort((a, b) => a.name.localeCompare(b.name));
}

/// Removes a kept dataset.
export async function deleteLocal(name) {
  await (await datasets()).removeEntry(name, { recursive: true });
}

/// The answer to a fetch of `.../local-data/NAME/FILE` from the kept files (404 where there
/// is none); null for any other address, which goes to the network.
export async function serveLocal(input) {
  const url = new URL(typeof input === "string" ? input : input.url, self.location.href);
  const at = url.pathname.indexOf(`/${LOCAL_PREFIX}`);
  if (at < 0) return null;
  const [name, file, ...rest] = url.pathname.slice(at + LOCAL_PREFIX.length + 1).split("/").map(decodeURIComponent);
  const missing = () => new Response(`${name}/${file} is not in this browser's storage`, { status: 404 });
  if (!name || !file || rest.length > 0 || file.endsWith(".tmp")) return missing();
  try {
    const folder = await (await datasets()).getDirectoryHandle(name);
    const body = await (await folder.getFileHandle(file)).getFile();
    return new Response(body, { headers: { "content-length": String(body.size) } });
  } catch {
    return missing();
  }
}
