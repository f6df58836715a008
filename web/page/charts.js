// Live charts with uPlot: loss and accuracy by step, memory by time. Data arrives
// many times a second; the charts redraw at most every REDRAW_MS.
import uPlot from "./vendor/uplot/uPlot.esm.js";
import { halve, peakOf, pushBounded } from "./bounded.js";
import { countedBytes, fillRows, formatBytes, toMiB } from "./format.js";

const REDRAW_MS = 250;
/// Points a chart keeps: beyond them it halves its resolution (bounded.js), so a long run
/// holds as much as a short one.
const CHART_POINTS = 4000;
const MIN_WIDTH = 240;
const SUMMARY_MS = 10000;
const WIDTH_NARROW = 520;
const WIDTH_WIDE = 820;
/// A level line (cap, predicted peak) is drawn only when it lies within this multiple of
/// the largest plotted series: a 256 MiB cap over a 10 MiB run would flatten every series
/// against the axis. The axis leaves a little room above what it shows.
const LEVEL_IN_VIEW = 1.8;
const AXIS_ROOM = 1.08;

const colors = {
  train: "#2857d8",
  test: "#d8572a",
  inUse: "#2857d8",
  cached: "#7f9ce8",
  data: "#31a354",
  wasm: "#8e44ad",
  js: "#b8860b",
  cap: "#b3261e",
  predicted: "#555",
};

function line(label, stroke, extra = {}) {
  return { label, stroke, width: 1.5, spanGaps: true, ...extra };
}

function mib(label, stroke, fill) {
  return line(label, stroke, { fill, value: (u, v) => (v == null ? "—" : `${v.toFixed(1)} MiB`) });
}

/// Vertical markers where the enforcer changed the micro-batch.
function markersPlugin(markers) {
  return {
    hooks: {
      draw: [
        (u) => {
          const { ctx } = u;
          ctx.save();
          ctx.strokeStyle = colors.cap;
          ctx.fillStyle = colors.cap;
          ctx.setLineDash([4, 3]);
          ctx.font = `${11 * devicePixelRatio}px system-ui`;
          // uPlot leaves the context right-aligned after its axes.
          ctx.textAlign = "left";
          for (const { x, label } of markers) {
            // A change before step 1 (from the plan) sits at the run's start, which can be
            // left of the first sample: draw it at the plot's edge, label inside.
            const px = Math.max(u.bbox.left, u.valToPos(x, "x", true));
            ctx.beginPath();
            ctx.moveTo(px, u.bbox.top);
            ctx.lineTo(px, u.bbox.top + u.bbox.height);
            ctx.stroke();
            ctx.fillText(label, px + 4, u.bbox.top + 12 * devicePixelRatio);
          }
          ctx.restore();
        },
      ],
    },
  };
}

/// Keeps `plot` as wide as `element`, which follows the page's layout.
function followWidth(plot, element, height) {
  new ResizeObserver(() => {
    const width = Math.max(MIN_WIDTH, Math.floor(element.clientWidth));
    if (width !== plot.width) plot.setSize({ width, height });
  }).observe(element);
}

export class Charts {
  constructor({ loss, accuracy, memory, memoryTable, summary }) {
    this.memoryTable = memoryTable;
    // The charts' latest figures in words, for screen readers, at most every SUMMARY_MS.
    this.summary = summary;
    this.summarizedAt = 0;
    this.markers = [];
    this.loss = new uPlot(
      {
        width: WIDTH_NARROW,
        height: 220,
        scales: { x: { time: false } },
        series: [{ label: "step" }, line("train loss", colors.train), line("test loss", colors.test, { points: { show: true } })],
      },
      [[], [], []],
      loss,
    );
    this.accuracy = new uPlot(
      {
        width: WIDTH_NARROW,
        height: 220,
        scales: { x: { time: false }, y: { range: [0, 1] } },
        series: [{ label: "step" }, line("test accuracy", colors.test, { points: { show: true, size: 6 } })],
      },
      [[], []],
      accuracy,
    );
    this.memory = new uPlot(
      {
        width: WIDTH_WIDE,
        height: 280,
        scales: { x: { time: false }, y: { range: () => [0, this.axisMax()] } },
        axes: [{ label: "seconds" }, { label: "MiB", size: 60 }],
        series: [
          { label: "s", value: (u, v) => (v == null ? "—" : v.toFixed(1)) },
          mib("device in use", colors.inUse, "rgba(40,87,216,.35)"),
          mib("+ device cached", colors.cached, "rgba(127,156,232,.25)"),
          mib("+ data pipeline", colors.data, "rgba(49,163,84,.25)"),
          mib("wasm memory", colors.wasm),
          mib("page JS heap", colors.js),
          mib("cap", colors.cap, undefined),
          mib("predicted peak", colors.predicted, undefined),
        ],
        bands: [
          { series: [2, 1], fill: "rgba(127,156,232,.25)" },
          { series: [3, 2], fill: "rgba(49,163,84,.25)" },
        ],
        plugins: [markersPlugin(this.markers)],
      },
      [[], [], [], [], [], [], [], []],
      memory,
    );
    this.memory.series[6].dash = [6, 4];
    this.memory.series[7].dash = [2, 3];
    followWidth(this.loss, loss, 220);
    followWidth(this.accuracy, accuracy, 220);
    followWidth(this.memory, memory, 280);
    this.reset();
  }

  reset() {
    this.steps = { x: [], train: [], test: [] };
    this.acc = { x: [], y: [] };
    // Bytes as sampled, kept for tests and the metrics file: what the chart plots.
    this.samples = [];
    // The largest value of the series the run itself produces (not the cap or the
    // prediction), in MiB: what the memory axis follows.
    this.largest = 0;
    this.heapBytes = null;
    this.cap = null;
    this.predicted = null;
    this.markers.length = 0;
    this.start = null;
    this.dirty = true;
    this.redraw();
  }

  startRun(atMs, cap, predicted) {
    this.start = atMs;
    this.cap = cap;
    this.predicted = predicted;
  }

  seconds(atMs) {
    return (atMs - (this.start ?? atMs)) / 1000;
  }

  addStep(step, loss) {
    this.steps.x.push(step);
    this.steps.train.push(loss);
    this.steps.test.push(null);
    if (this.steps.x.length > CHART_POINTS) this.halveSteps();
    this.touch();
  }

  /// Half the loss chart's resolution: each pair of points as one, at the later step,
  /// with the mean of their training losses and whichever test loss they hold.
  halveSteps() {
    const { x, train, test } = this.steps;
    const points = halve(
      x.map((step, i) => ({ step, train: train[i], test: test[i] })),
      (a, b) => {
        const known = [a.train, b.train].filter((v) => v != null);
        const mean = known.length ? known.reduce((sum, v) => sum + v, 0) / known.length : null;
        return { step: b.step, train: mean, test: b.test ?? a.test };
      },
    );
    this.steps = { x: points.map((p) => p.step), train: points.map((p) => p.train), test: points.map((p) => p.test) };
  }

  addEval(step, loss, accuracy) {
    const last = this.steps.x.length - 1;
    if (last >= 0 && this.steps.x[last] === step) {
      this.steps.test[last] = loss;
    } else {
      this.steps.x.push(step);
      this.steps.train.push(null);
      this.steps.test.push(loss);
    }
    this.acc.x.push(step);
    this.acc.y.push(accuracy);
    this.touch();
  }

  addMemory(atMs, sample) {
    const m = { seconds: this.seconds(atMs), ...sample, js_heap_bytes: this.heapBytes };
    this.samples = pushBounded(this.samples, m, CHART_POINTS, peakOf);
    for (const bytes of [m.gpu_bytes_in_use, countedBytes(m), m.host_bytes, m.js_heap_bytes]) {
      if (bytes != null) this.largest = Math.max(this.largest, toMiB(bytes));
    }
    this.touch();
  }

  setHeap(bytes) {
    this.heapBytes = bytes;
  }

  addMarker(atMs, label) {
    this.markers.push({ x: this.seconds(atMs), label });
    this.touch();
  }

  touch() {
    this.dirty = true;
    this.timer ??= setTimeout(() => {
      this.timer = null;
      this.redraw();
    }, REDRAW_MS);
  }

  /// The largest value of the series the run itself produces, in MiB.
  largestSeries() {
    return this.largest;
  }

  /// A level (cap, predicted peak) in MiB when it is in view, else null.
  levelInView(bytes) {
    const level = toMiB(bytes);
    return level != null && this.largest > 0 && level <= this.largest * LEVEL_IN_VIEW ? level : null;
  }

  /// The memory axis's top: what the run uses, and the levels in view.
  axisMax() {
    const shown = [this.largest, this.levelInView(this.cap), this.levelInView(this.predicted)];
    const top = Math.max(...shown.filter((v) => v != null));
    return top > 0 ? top * AXIS_ROOM : 1;
  }

  /// Current and peak of each series, and the cap's and prediction's values whether or not
  /// they are in view.
  fillMemoryTable() {
    if (!this.memoryTable) return;
    const s = this.samples;
    const series = [
      ["device in use", (m) => m.gpu_bytes_in_use],
      ["device reserved", (m) => m.gpu_bytes_reserved],
      ["data pipeline held", (m) => m.data_bytes_held],
      ["counted against the cap", countedBytes],
      ["wasm memory", (m) => m.host_bytes],
      ["page JS heap", (m) => m.js_heap_bytes],
    ];
    const rows = series.map(([name, pick]) => {
      const values = s.map(pick).filter((v) => v != null);
      const now = values.length ? values[values.length - 1] : null;
      const peak = values.length ? Math.max(...values) : null;
      return { name, cells: [formatBytes(now), formatBytes(peak)] };
    });
    for (const [name, bytes] of [["cap", this.cap], ["predicted peak", this.predicted]]) {
      const offScale = bytes != null && s.length > 0 && this.levelInView(bytes) == null;
      const where = bytes == null ? "—" : offScale ? "above the chart's scale" : "drawn";
      rows.push({ name, cells: [formatBytes(bytes), where], offScale });
    }
    fillRows(this.memoryTable, rows);
  }

  redraw() {
    if (!this.dirty) return;
    this.dirty = false;
    this.loss.setData([this.steps.x, this.steps.train, this.steps.test]);
    this.accuracy.setData([this.acc.x, this.acc.y]);
    const s = this.samples;
    const inUse = s.map((m) => toMiB(m.gpu_bytes_in_use));
    const reserved = s.map((m) => toMiB(m.gpu_bytes_reserved));
    const counted = s.map((m) => toMiB(countedBytes(m)));
    const cap = this.levelInView(this.cap);
    const predicted = this.levelInView(this.predicted);
    this.memory.setData([
      s.map((m) => m.seconds),
      inUse,
      reserved,
      counted,
      s.map((m) => toMiB(m.host_bytes)),
      s.map((m) => toMiB(m.js_heap_bytes)),
      s.map(() => cap),
      s.map(() => predicted),
    ]);
    this.fillMemoryTable();
    this.summarize();
  }

  /// The latest figures in words, into the live region (at most every SUMMARY_MS, and
  /// never while nothing was drawn).
  summarize() {
    const now = Date.now();
    if (!this.summary || this.steps.x.length === 0 || now - this.summarizedAt < SUMMARY_MS) return;
    this.summarizedAt = now;
    const last = (values) => values.findLast((v) => v != null);
    const parts = [`Step ${this.steps.x.at(-1)}`];
    const train = last(this.steps.train);
    if (train != null) parts.push(`training loss ${train.toFixed(3)}`);
    const test = last(this.steps.test);
    if (test != null) parts.push(`test loss ${test.toFixed(3)}`);
    const accuracy = this.acc.y.at(-1);
    if (accuracy != null) parts.push(`test accuracy ${(accuracy * 100).toFixed(1)}%`);
    const counted = this.samples.map(countedBytes).filter((v) => v != null);
    if (counted.length) {
      parts.push(`memory counted against the cap ${formatBytes(counted.at(-1))}, peak ${formatBytes(Math.max(...counted))}`);
    }
    this.summary.textContent = `${parts.join(", ")}.`;
  }
}
