// The peers' side of the data: the first samples of a split of a Headroom chunk dataset
// (docs/data-format.md, "Chunk format"), in file order, which is the order Headroom reads when it does
// not shuffle. Every chunk is checked as Headroom checks it: length, sha256, decoded size.

async function chunkBytes(url, chunk) {
  const response = await fetch(new URL(chunk.file, url));
  if (!response.ok) throw new Error(`${chunk.file}: HTTP ${response.status}`);
  const compressed = new Uint8Array(await response.arrayBuffer());
  if (compressed.length !== chunk.compressed_bytes) {
    throw new Error(`${chunk.file}: ${compressed.length} bytes, the manifest says ${chunk.compressed_bytes}`);
  }
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", compressed));
  const hex = Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
  if (hex !== chunk.sha256) throw new Error(`${chunk.file}: sha256 mismatch`);
  if (chunk.codec !== "deflate") throw new Error(`${chunk.file}: codec ${chunk.codec}; the peers read deflate chunks only`);
  const raw = new Uint8Array(
    await new Response(new Blob([compressed]).stream().pipeThrough(new DecompressionStream("deflate-raw"))).arrayBuffer(),
  );
  if (raw.length !== chunk.raw_bytes) throw new Error(`${chunk.file}: decodes to ${raw.length} bytes, not ${chunk.raw_bytes}`);
  return raw;
}

/// Resolves to { images: Float32Array of count x pixels scaled to [0, 1], labels: Int32Array,
/// pixels, classes } for the first `count` samples of `split` of the dataset at `url` (ending in "/").
export async function loadSamples(url, split, count) {
  const response = await fetch(new URL("manifest.json", url));
  if (!response.ok) throw new Error(`manifest.json: HTTP ${response.status}`);
  const manifest = await response.json();
  const pixels = manifest.sample_shape.reduce((a, b) => a * b, 1);
  const available = manifest.counts[split] ?? 0;
  if (count > available) throw new Error(`${split} has ${available} samples, ${count} asked`);
  const images = new Float32Array(count * pixels);
  const labels = new Int32Array(count);
  let filled = 0;
  for (const chunk of manifest.chunks.filter((c) => c.split === split)) {
    if (filled === count) break;
    const raw = await chunkBytes(url, chunk);
    const take = Math.min(chunk.samples, count - filled);
    labels.set(raw.subarray(0, take), filled);
    const features = raw.subarray(chunk.samples, chunk.samples + take * pixels);
    for (let i = 0; i < features.length; i++) images[filled * pixels + i] = features[i] / 255;
    filled += take;
  }
  return { images, labels, pixels, classes: manifest.class_names.length };
}
