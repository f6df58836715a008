// One case per call, in a fresh worker: { framework: "headroom" | "tfjs", ...spec }.
const workers = {
  headroom: () => new Worker(new URL("headroom-worker.js", import.meta.url), { type: "module" }),
  tfjs: () => new Worker(new URL("tfjs-worker.js", import.meta.url)),
};

window.runCase = (spec) =>
  new Promise((resolve, reject) => {
    const worker = workers[spec.framework]();
    const startedAt = performance.now();
    worker.onerror = (event) => reject(new Error(event.message || "the worker failed to load"));
    worker.onmessage = ({ data }) => {
      worker.terminate();
      if (data.error) reject(new Error(data.error));
      else resolve({ ...data.result, wall_seconds: (performance.now() - startedAt) / 1000 });
    };
    worker.postMessage({ ...spec, data: new URL(spec.data, location.href).href });
  });
