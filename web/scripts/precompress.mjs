// Writes FILE.br (brotli, quality 11) and FILE.gz (gzip -9) beside each FILE given, for
// servers that send a precompressed file to a browser that accepts it (`headroom serve`
// does); prints the sizes. web/scripts/build-site imports it for every compressible file of a site.
import { readFileSync, renameSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { brotliCompressSync, constants, gzipSync } from "node:zlib";

const mib = (bytes) => (bytes / 2 ** 20).toFixed(2);

export function precompress(file, { quiet = false } = {}) {
  const bytes = readFileSync(file);
  const variants = {
    br: brotliCompressSync(bytes, {
      params: { [constants.BROTLI_PARAM_QUALITY]: 11, [constants.BROTLI_PARAM_SIZE_HINT]: bytes.length },
    }),
    gz: gzipSync(bytes, { level: 9 }),
  };
  for (const [suffix, packed] of Object.entries(variants)) {
    // Written whole, then renamed: a server never sends half a file.
    writeFileSync(`${file}.${suffix}.partial`, packed);
    renameSync(`${file}.${suffix}.partial`, `${file}.${suffix}`);
  }
  if (!quiet) console.log(`${file}: ${mib(bytes.length)} MiB, brotli ${mib(variants.br.length)} MiB, gzip ${mib(variants.gz.length)} MiB`);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  for (const file of process.argv.slice(2)) precompress(file);
}
