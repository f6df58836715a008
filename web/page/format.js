// Numbers as people read them.

const MIB = 1024 * 1024;

const UNITS = ["B", "KiB", "MiB", "GiB"];

/// `bytes` as a value and the index of its unit, as Rust's `units::scaled`.
function scaled(bytes) {
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return [value, unit];
}

export function formatBytes(bytes) {
  if (bytes == null) return "—";
  const [value, unit] = scaled(bytes);
  return unit === 0 ? `${bytes} B` : `${value.toFixed(1)} ${UNITS[unit]}`;
}

/// Rounded up to the tenth shown: for a cap that must be at least `bytes`, so that the cap
/// printed really is enough (Rust's format_bytes_up).
export function formatBytesUp(bytes) {
  if (bytes == null) return "—";
  const [value, unit] = scaled(bytes);
  // The small tolerance keeps an exact tenth (16 MiB) from rounding past itself.
  return unit === 0 ? `${bytes} B` : `${(Math.ceil(value * 10 - 1e-9) / 10).toFixed(1)} ${UNITS[unit]}`;
}

export function toMiB(bytes) {
  return bytes == null ? null : bytes / MIB;
}

export function fromMiB(mib) {
  return Math.round(mib * MIB);
}

/// A table body of [name, value] rows; each row carries its name in data-figure.
export function fillTable(table, rows) {
  fillRows(table, rows.map(([name, value]) => ({ name, cells: [String(value)] })));
}

/// A table body of rows, each { name, cells, offScale }: a header cell, then data cells;
/// each row carries its name in data-figure.
export function fillRows(table, rows) {
  table.tBodies[0].replaceChildren(
    ...rows.map(({ name, cells, offScale }) => {
      const row = document.createElement("tr");
      row.dataset.figure = name;
      row.classList.toggle("off-scale", Boolean(offScale));
      const th = document.createElement("th");
      th.textContent = name;
      row.append(th, ...cells.map((text) => Object.assign(document.createElement("td"), { textContent: text })));
      return row;
    }),
  );
}

/// What the cap counts of a memory sample: the device's reservation and the data pipeline.
export function countedBytes(sample) {
  return (sample.gpu_bytes_reserved ?? 0) + sample.data_bytes_held;
}

/// A setting's memory levers as the page names them: "f32", "f16, checkpointing, 8-bit moments".
export function describeLevers({ precision, checkpointing, moments }) {
  return [precision, checkpointing ? "checkpointing" : null, moments === "8bit" ? "8-bit moments" : null].filter(Boolean).join(", ");
}

const PROBE_STAGES = { warm_up: "warm-up", ladder: "ladder", climb: "climb", confirm: "confirming the pick" };

/// A probe step before step 1 (Rust's ProbeReport), as the status line shows it.
export function describeProbe(report) {
  const setting = `micro-batch ${report.micro_batch}${report.accumulating ? " × 2" : ""}, ${describeLevers(report.levers)}`;
  const stage = PROBE_STAGES[report.stage] ?? report.stage;
  if (!report.finished) return `Probing before step 1 (${stage}): ${setting}, census ${formatBytes(report.census_reserved)}…`;
  const peak = report.peak_reserved == null ? "" : `: peak ${formatBytes(report.peak_reserved)}`;
  return `Probed (${stage}) ${setting}${peak} in ${report.seconds.toFixed(1)} s.`;
}
