use serde::{Deserialize, Serialize};

/// Chunk compression. Both codecs are pure Rust, so the same decoder runs natively and in
/// wasm32; `headroom bench data` measures them side by side (README, "Chunk format").
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
