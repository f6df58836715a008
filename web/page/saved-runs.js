// Saved runs: each a checkpoint (one blob the wasm module writes and reads) and its meta
// (what the page lists: the settings, the step, the curves so far). The worker saves and
// loads; the page lists and deletes.
//
// Kept in the Origin Private File System, as runs/ID/run-GENERATION.bin and
// runs/ID/meta.json, each written under a temporary name and renamed into place. A save
// writes its checkpoint under a new name, then the meta that names it, then removes the
// older checkpoints: a reload or crash at any point leaves a meta and the checkpoint it
// names, of the same step (one fixed run.bin, rewritten before the meta, once paired a
// step-12 checkpoint with a step-8 meta's curves). Where a browser has no OPFS, in IndexedDB, one record a
// run, replaced in one transaction (as whole). `?store=indexeddb` on the page's address
// picks IndexedDB anyway (the tests use it).
import { ErrorKind } from "./protocol.js";

const ROOT = "runs";
// Where runs saved before checkpoints had generations keep theirs.
const LEGACY_RUN_FILE = "run.bin";
const META_FILE = "meta.json";
const DATABASE = "headroom";

function storageError(message, kind = ErrorKind.STORAGE) {
  return Object.assign(new Error(message), { kind });
}

function isQuotaError(error) {
  return error?.name === "QuotaExceededError";
}

const mib = (n) => (n / 2 ** 20).toFixed(1);

/// Refuses before writing where the browser's quota would not hold another copy of the
/// checkpoint beside the current one, in plain words.
async function checkQuota(bytes) {
  const { usage = 0, quota = Number.POSITIVE_INFINITY } = (await navigator.storage?.estimate?.()) ?? {};
  if (usage + bytes > quota) {
    throw storageError(
      `Not saved: the browser's storage for this page is full (${mib(usage)} of ${mib(quota)} MiB used, ` +
        `the checkpoint needs ${mib(bytes)} MiB); the previous checkpoint is kept`,
      ErrorKind.STORAGE_FULL,
    );
  }
}

/// Writes `data` to `name` in the OPFS `folder`: a reader sees the old file or the whole new
/// one (local-data.js keeps datasets the same way).
export async function writeAtomically(folder, name, data) {
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

const opfs = {
  async folder() {
    const root = await navigator.storage.getDirectory();
    return root.getDirectoryHandle(ROOT, { create: true });
  },

  async save(meta, bytes) {
    const folder = await (await this.folder()).getDirectoryHandle(meta.id, { create: true });
    const runFile = `run-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}.bin`;
    await writeAtomically(folder, runFile, bytes);
    await writeAtomically(folder, META_FILE, JSON.stringify({ ...meta, run_file: runFile }));
    // The older checkpoints, now named by no meta; one left by a crash here goes next time.
    const older = [];
    for await (const name of folder.keys()) if (name !== runFile && /^run.*\.bin$/.test(name)) older.push(name);
    for (const name of older) await folder.removeEntry(name).catch(() => {});
  },

  async list() {
    const runs = [];
    for await (const [id, handle] of (await this.folder()).entries()) {
      if (handle.kind !== "directory") continue;
      try {
        const file = await (await handle.getFileHandle(META_FILE)).getFile();
        const { run_file: _runFile, ...meta } = JSON.parse(await file.text());
        runs.push({ ...meta, id });
      } catch {
        // A run whose first save never finished has no meta: nothing to resume.
      }
    }
    return runs;
  },

  async load(id) {
    const folder = await (await this.folder()).getDirectoryHandle(id);
    const read = async (name) => (await folder.getFileHandle(name)).getFile();
    const { run_file: runFile = LEGACY_RUN_FILE, ...meta } = JSON.parse(await (await read(META_FILE)).text());
    const bytes = new Uint8Array(await (await read(runFile)).arrayBuffer());
    return { meta: { ...meta, id }, bytes };
  },

  async remove(id) {
    await (await this.folder()).removeEntry(id, { recursive: true });
  },
};

/// An IndexedDB request as a promise.
function done(request) {
  return new Promise((resolve, reject) => {
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(request.error);
  });
}

const indexedDb = {
  async store(mode) {
    const opening = indexedDB.open(DATABASE, 1);
    opening.onupgradeneeded = () => opening.result.createObjectStore(ROOT, { keyPath: "id" });
    const database = await done(opening);
    const transaction = database.transaction(ROOT, mode);
    const finished = new Promise((resolve, reject) => {
      transaction.oncomplete = resolve;
      transaction.onerror = transaction.onabort = () => reject(transaction.error);
    });
    finished.finally(() => database.close()).catch(() => {});
    return { store: transaction.objectStore(ROOT), finished };
  },

  async save(meta, bytes) {
    const { store, finished } = await this.store("readwrite");
    store.put({ id: meta.id, meta, bytes });
    await finished;
  },

  async list() {
    const { store } = await this.store("readonly");
    return (await done(store.getAll())).map(({ id, meta }) => ({ ...meta, id }));
  },

  async load(id) {
    const { store } = await this.store("readonly");
    const record = await done(store.get(id));
    if (!record) throw storageError(`The saved run ${id} is gone`);
    return { meta: { ...record.meta, id }, bytes: new Uint8Array(record.bytes) };
  },

  async remove(id) {
    const { store, finished } = await this.store("readwrite");
    store.delete(id);
    await finished;
  },
};

/// OPFS where the browser has it (unless the page's address asks for IndexedDB).
function backing() {
  const asked = new URLSearchParams(self.location.search).get("store");
  if (asked !== "indexeddb" && navigator.storage?.getDirectory) return opfs;
  if (self.indexedDB) return indexedDb;
  throw storageError("This browser has neither the Origin Private File System nor IndexedDB: runs cannot be saved");
}

/// The store in use, for the page to say where runs are kept.
export function storeName() {
  return backing() === opfs ? "opfs" : "indexeddb";
}

/// Saves `bytes` (a checkpoint) and `meta` (`meta.id` names the run), replacing what
/// that run saved before.
export async function saveRun(meta, bytes) {
  await checkQuota(bytes.byteLength);
  try {
    await backing().save(meta, bytes);
  } catch (error) {
    if (isQuotaError(error)) {
      throw storageError(`Not saved: the browser's storage is full (${error.message}); the previous checkpoint is kept`, ErrorKind.STORAGE_FULL);
    }
    throw error;
  }
}

/// Every saved run's meta, newest first.
export async function listRuns() {
  return (await backing().list()).sort((a, b) => b.saved_at - a.saved_at);
}

/// The checkpoint and meta of run `id`.
export async function loadRun(id) {
  return backing().load(id);
}

export async function deleteRun(id) {
  await backing().remove(id);
}
