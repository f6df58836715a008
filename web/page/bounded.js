// Bounded series for long runs: a 10,000-step run must not grow the page's heap without
// limit, yet the charts and the metrics file must still show every peak.

/// `items` with neighbouring pairs merged into one by `merge`: half the resolution.
export function halve(items, merge) {
  const kept = [];
  for (let i = 0; i < items.length; i += 2) kept.push(i + 1 < items.length ? merge(items[i], items[i + 1]) : items[i]);
  return kept;
}

/// `items` with `item` appended, halved once it holds more than `limit`.
export function pushBounded(items, item, limit, merge) {
  items.push(item);
  return items.length > limit ? halve(items, merge) : items;
}

/// Two memory samples as one: the later time, and each figure's larger value, so that a
/// peak (and a claim that every sample stayed under the cap) survives the merge.
export function peakOf(earlier, later) {
  const merged = { ...later };
  for (const [key, value] of Object.entries(earlier)) {
    if (typeof value === "number" && typeof later[key] === "number" && key !== "seconds" && key !== "at") {
      merged[key] = Math.max(value, later[key]);
    }
  }
  return merged;
}

/// Entries kept apart by kind, steps and memory samples bounded (thinned by halving, memory
/// keeping peaks), everything else (config, evaluations, enforcements, text samples, the
/// end) kept whole.
export class MetricsLog {
  constructor(limit = 5000) {
    this.limit = limit;
    this.clear();
  }

  clear() {
    this.steps = [];
    this.memory = [];
    this.rest = [];
  }

  push(entry) {
    if (entry.event === "step") this.steps = pushBounded(this.steps, entry, this.limit, (_, later) => later);
    else if (entry.event === "memory") this.memory = pushBounded(this.memory, entry, this.limit, peakOf);
    else this.rest.push(entry);
  }

  get length() {
    return this.steps.length + this.memory.length + this.rest.length;
  }

  /// Every entry kept, in time order.
  entries() {
    return [...this.rest, ...this.steps, ...this.memory].sort((a, b) => a.at - b.at);
  }
}
