//! How chunks are compressed: deflate or lz4, both pure Rust, so natively and in wasm32
//! the same decoder runs.

use serde::{Deserialize, Serialize};

/// Chunk compression. Both codecs are pure Rust, so the same decoder runs natively and in
/// wasm32; `headroom bench data` measures them side by side (docs/data-format.md, "Codec").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Codec {
    /// LZ4 block format (lz4_flex): fastest decode, weaker ratio.
    Lz4,
    /// Raw DEFLATE (miniz_oxide) at level 6: better ratio, slower decode.
    #[default]
    Deflate,
}

impl Codec {
    pub const ALL: [Codec; 2] = [Codec::Lz4, Codec::Deflate];

    pub fn name(self) -> &'static str {
        match self {
            Codec::Lz4 => "lz4",
            Codec::Deflate => "deflate",
        }
    }

    pub fn compress(self, raw: &[u8]) -> Vec<u8> {
        match self {
            Codec::Lz4 => lz4_flex::block::compress(raw),
            Codec::Deflate => miniz_oxide::deflate::compress_to_vec(raw, 6),
        }
    }

    /// Decodes into exactly `raw_len` bytes; anything else is an error, so a chunk whose
    /// body decodes to the wrong size never reaches training.
    pub fn decompress(self, compressed: &[u8], raw_len: usize) -> Result<Vec<u8>, String> {
        let raw = match self {
            Codec::Lz4 => lz4_flex::block::decompress(compressed, raw_len).map_err(|e| e.to_string())?,
            Codec::Deflate => miniz_oxide::inflate::decompress_to_vec_with_limit(compressed, raw_len)
                .map_err(|e| format!("inflate failed: {e}"))?,
        };
        if raw.len() != raw_len {
            return Err(format!("decoded {} bytes, manifest says {raw_len}", raw.len()));
        }
        Ok(raw)
    }
}

impl std::str::FromStr for Codec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Codec::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| format!("unknown codec '{s}' (expected lz4 or deflate)"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    // In the browser (wasm-pack test, tests/run-all) these run as wasm-bindgen tests.
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn sample() -> Vec<u8> {
        (0..20_000u32).map(|i| (i * i % 251) as u8).collect()
    }

    #[test]
    fn both_codecs_give_back_what_they_compressed() {
        for codec in Codec::ALL {
            let raw = sample();
            assert_eq!(
                codec.decompress(&codec.compress(&raw), raw.len()).unwrap(),
                raw,
                "{codec:?}"
            );
        }
    }

    /// A body that decodes to more or fewer bytes than the manifest says, or does not decode,
    /// is an error naming why, not a chunk.
    #[test]
    fn a_deflate_body_of_the_wrong_size_or_corrupt_is_an_error() {
        let raw = sample();
        let compressed = Codec::Deflate.compress(&raw);
        let longer = Codec::Deflate.decompress(&compressed, raw.len() - 1).unwrap_err();
        assert!(longer.starts_with("inflate failed"), "{longer}");
        let shorter = Codec::Deflate.decompress(&compressed, raw.len() + 1).unwrap_err();
        assert!(shorter.contains("manifest says"), "{shorter}");
        let truncated = Codec::Deflate
            .decompress(&compressed[..compressed.len() / 2], raw.len())
            .unwrap_err();
        assert!(truncated.starts_with("inflate failed"), "{truncated}");
        let mut corrupt = compressed.clone();
        corrupt[0] ^= 0xff;
        let corrupt = Codec::Deflate.decompress(&corrupt, raw.len()).unwrap_err();
        assert!(corrupt.starts_with("inflate failed"), "{corrupt}");
    }
}
