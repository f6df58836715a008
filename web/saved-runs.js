// Saved runs in the Origin Private File System: runs/ID/run.bin (the checkpoint, one blob
// the wasm module writes and reads) and runs/ID/meta.json (what the page lists: the
// settings, the step, the curves so far). Each file is written under a temporary name and
// renamed into place, so a crash while saving leaves the previous checkpoint whole. The
// worker saves and loads; the page lists and deletes.
import { ErrorKind } from "./protocol.js";

const ROOT = "runs";
const RUN_FILE = "run.bin";
const META_FILE = "meta.json";

function storageError(message, kind = ErrorKind.STORAGE) {
  return Object.assign(new Error(message), { kind });
}

async function runsFolder() {
  if (!navigator.storage?.getDirectory) {
    throw storageError("This browser has no Origin Private File System: runs cannot be saved");
  }
  const root = await navigator.storage.getDirectory();
  return root.getDirectoryHandle(ROOT, { create: true });
}

/// Writes `data` to `name` in `folder`: a reader sees the old file or the whole new one.
async function writeAtomically(folder, name, data) {
  const temporary = await folder.getFileHandle(`${name}.tmp`, { create: true });
  const writable = await temporary.createWritable();
  try {
    await writable.write(data);
    await writable.close();
  } catch (error) {
    await writable.abort().catch(() => {});
    throw error;
  }
  await temporary.move(name);
}

/// Refuses before writing where the browser's quota would not hold another copy of the
/// checkpoint beside the current one (the temporary file), in plain words.
async function checkQuota(bytes) {
  const { usage = 0, quota = Number.POSITIVE_INFINITY } = await navigator.storage.estimate();
  if (usage + bytes > quota) {
    const mib = (n) => (n / 2 ** 20).toFixed(1);
    throw storageError(
      `Not saved: the browser's storage for this page is full (${mib(usage)} of ${mib(quota)} MiB used, ` +
        `the checkpoint needs ${mib(bytes)} MiB); the previous checkpoint is kept`,
      ErrorKind.STORAGE_FULL,
    );
  }
}

function isQuotaError(error) {
  return error?.name === "QuotaExceededError";
}

/// Saves `bytes` (a checkpoint) and `meta` (`meta.id` names the run), replacing what
/// that run saved before.
export async function saveRun(meta, bytes) {
  await checkQuota(bytes.byteLength);
  const folder = await (await runsFolder()).getDirectoryHandle(meta.id, { create: true });
  try {
    await writeAtomically(folder, RUN_FILE, bytes);
    await writeAtomically(folder, META_FILE, JSON.stringify(meta));
  } catch (error) {
    if (isQuotaError(error)) throw storageError(`Not saved: the browser's storage is full (${error.message}); the previous checkpoint is kept`, ErrorKind.STORAGE_FULL);
    throw error;
  }
}

/// Every saved run's meta, newest first; a run whose files cannot be read is skipped.
export async function listRuns() {
  const runs = [];
  for await (const [id, handle] of (await runsFolder()).entries()) {
    if (handle.kind !== "directory") continue;
    try {
      const file = await (await handle.getFileHandle(META_FILE)).getFile();
      runs.push({ ...JSON.parse(await file.text()), id });
    } catch {
      // A run whose first save never finished has no meta: nothing to resume.
    }
  }
  return runs.sort((a, b) => b.saved_at - a.saved_at);
}

/// The checkpoint and meta of run `id`.
export async function loadRun(id) {
  const folder = await (await runsFolder()).getDirectoryHandle(id);
  const read = async (name) => (await folder.getFileHandle(name)).getFile();
  const meta = JSON.parse(await (await read(META_FILE)).text());
  const bytes = new Uint8Array(await (await read(RUN_FILE)).arrayBuffer());
  return { meta: { ...meta, id }, bytes };
}

export async function deleteRun(id) {
  await (await runsFolder()).removeEntry(id, { recursive: true });
}
