// The page's own memory: performance.measureUserAgentSpecificMemory() where the page is
// cross-origin isolated (it counts every JS and wasm heap of the page and its workers, and
// may take seconds to answer), Chromium's performance.memory otherwise.

const INTERVAL_MS = 1000;

async function measure() {
  if (self.crossOriginIsolated && performance.measureUserAgentSpecificMemory) {
    try {
      const { bytes } = await performance.measureUserAgentSpecificMemory();
      return { bytes, source: "measureUserAgentSpecificMemory" };
    } catch {
      // Refused (e.g. a frame not isolated): fall through.
    }
  }
  if (performance.memory) return { bytes: performance.memory.usedJSHeapSize, source: "performance.memory" };
  return null;
}

/// Calls onSample({ bytes, source }) about once a second until the returned function is called.
export function sampleHeap(onSample) {
  let running = true;
  (async () => {
    while (running) {
      const sample = await measure();
      if (!running) break;
      if (sample) onSample(sample);
      await new Promise((resolve) => setTimeout(resolve, INTERVAL_MS));
    }
  })();
  return () => (running = false);
}
