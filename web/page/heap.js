// The page's own memory: performance.measureUserAgentSpecificMemory() where the page is
// cross-origin isolated (it counts every JS and wasm heap of the page and its workers, and
// may take seconds to answer), Chromium's performance.memory otherwise.

const INTERVAL_MS = 1000;

/// Whether the browser measures the page's whole heap here: both measure() and heapNote()
/// follow it, so the note never disagrees with the series.
const measuresWholeHeap = () => self.crossOriginIsolated && typeof performance.measureUserAgentSpecificMemory === "function";

async function measure() {
  if (measuresWholeHeap()) {
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

/// Why the page's JS heap series is partial or missing, in words; null when the page
/// measures its whole heap.
export function heapNote() {
  if (measuresWholeHeap()) return null;
  const why = self.crossOriginIsolated
    ? "This browser has no performance.measureUserAgentSpecificMemory()"
    : "The page is not cross-origin isolated (its host sends no COOP/COEP headers), so the browser does not measure its whole JS heap";
  const series = performance.memory
    ? "the page JS heap series is the main thread's heap alone, from performance.memory, which the browser rounds"
    : "the page JS heap series is missing";
  const fix = self.crossOriginIsolated
    ? ""
    : " Serve the page with COOP/COEP headers (headroom serve does), or build the site with web/scripts/build-site --isolate, whose service worker adds them.";
  return `${why}: ${series}; every other series is measured.${fix}`;
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
