//! Adam's moments in 8 bits: block-wise quantisation with the dynamic data type of
//! Dettmers et al., "8-bit Optimizers via Block-wise Quantization" (2022): each block of
//! [`BLOCK`] values keeps its largest magnitude as an f32 scale, and each value the
//! nearest of 256 codes of a map whose precision follows the value's decade (more
//! fraction bits near the scale, fewer far below it). The first moment uses the signed
//! map, the second the unsigned one, as bitsandbytes' 8-bit Adam does.
//!
//! Everything runs as tensor ops on the device (a gather per decoded value, a binary
//! search of eight gathers per encoded one), so the same code runs on wgpu, on WebGPU in
//! the page and on the CPU backends. Four codes are packed into each 32-bit word: WGSL
//! has no 8-bit type.

use burn::prelude::*;

/// Values per block: one f32 scale each, 1/64 of a byte per value. bitsandbytes uses
/// 2048; smaller blocks confine an outlier's loss of precision to fewer neighbours.
pub const BLOCK: usize = crate::settings::QUANT_BLOCK;

/// Codes a 32-bit word holds.
const PER_WORD: usize = 4;

/// bitsandbytes' `create_dynamic_map(signed, max_exponent_bits=7, total_bits=8)`: for each
/// decade 10^-6 .. 10^0, the midpoints of 2^i (signed) or 2^(i+1) (unsigned) equal steps
/// of [0.1, 1] times the decade, then 0 and 1; sorted.
///
/// In the unsigned map the 0 is replaced by half the smallest code. Adam divides by the
/// second moment's root, and a value that decodes to 0 where the first moment does not
/// would make an update of `m / epsilon`: the zero-point problem of Li et al., "Memory
/// Efficient Optimizers with 4-bit States" (2023). A true zero (a parameter without
/// gradient yet) still decodes to zero: its first moment is zero too.
pub fn dynamic_map(signed: bool) -> [f32; 256] {
    let mut data: Vec<f64> = Vec::with_capacity(256);
    for i in 0..7 {
        let fraction_items = if signed { (1 << i) + 1 } else { (1 << (i + 1)) + 1 };
        let decade = 10f64.powi(i - 6);
        let step = 0.9 / (fraction_items - 1) as f64;
        for k in 0..fraction_items - 1 {
            let mean = 0.1 + step * (k as f64 + 0.5);
            data.push(decade * mean);
            if signed {
                data.push(-decade * mean);
            }
        }
    }
    data.push(0.0);
    data.push(1.0);
    data.sort_by(f64::total_cmp);
    if !signed {
        data[0] = data[1] / 2.0;
    }
    let mut map = [0f32; 256];
    for (slot, value) in map.iter_mut().zip(data) {
        *slot = value as f32;
    }
    map
}

/// One of the two maps on a device: its 256 values, and the 255 midpoints between
/// neighbours that the encoder searches.
#[derive(Clone, Debug)]
pub struct Codebook {
    values: Tensor<1>,
    midpoints: Tensor<1>,
}

impl Codebook {
    pub fn new(signed: bool, device: &Device) -> Self {
        let map = dynamic_map(signed);
        let midpoints: Vec<f32> = map.windows(2).map(|w| (w[0] + w[1]) / 2.0).collect();
        Codebook {
            values: Tensor::from_data(TensorData::new(map.to_vec(), [256]), device),
            midpoints: Tensor::from_data(TensorData::new(midpoints, [255]), device),
        }
    }

    /// The code of the nearest map value to each of `normalized` (values in [-1, 1]):
    /// the number of midpoints below it, found bit by bit from the top, eight gathers.
    fn encode(&self, normalized: Tensor<1>) -> Tensor<1, Int> {
        let mut code = normalized.zeros_like().int();
        for bit in (0..8).rev() {
            let candidate = code.clone().add_scalar(1 << bit);
            let below = self.midpoints.clone().select(0, candidate.clone().sub_scalar(1));
            code = code.mask_where(normalized.clone().greater(below), candidate);
        }
        code
    }

    fn decode(&self, codes: Tensor<1, Int>) -> Tensor<1> {
        self.values.clone().select(0, codes)
    }

    /// The map's 256 values and the 255 midpoints its encoder searches.
    pub fn tensors(&self) -> (&Tensor<1>, &Tensor<1>) {
        (&self.values, &self.midpoints)
    }
}

/// One moment in 8 bits: packed codes and a scale per block.
#[derive(Clone, Debug)]
pub struct Quantized {
    /// `blocks * BLOCK / 4` words, four codes each, the first in the lowest byte.
    pub words: Tensor<1, Int>,
    /// Each block's largest magnitude.
    pub scales: Tensor<1>,
    /// The values it stands for (the last block is padded with zeros).
    pub elements: usize,
}

impl Quantized {
    /// Moments of zero for `elements` values: every scale 0, so every code decodes to 0.
    pub fn zeros(elements: usize, device: &Device) -> Quantized {
        let blocks = elements.div_ceil(BLOCK);
        Quantized {
            words: Tensor::zeros([blocks * BLOCK / PER_WORD], device),
            scales: Tensor::zeros([blocks], device),
            elements,
        }
    }

    /// The values `range` stands for, as their own `Quantized`: `range` starts on a block's
    /// first value, so its blocks are whole blocks of this one (the last padded as here).
    pub fn slice(&self, range: std::ops::Range<usize>) -> Quantized {
        debug_assert!(range.start.is_multiple_of(BLOCK) && range.end <= self.elements);
        let blocks = range.start / BLOCK..range.end.div_ceil(BLOCK);
        Quantized {
            words: self
                .words
                .clone()
                .slice(blocks.start * BLOCK / PER_WORD..blocks.end * BLOCK / PER_WORD),
            scales: self.scales.clone().slice(blocks),
            elements: range.len(),
        }
    }

    /// Consecutive slices joined again; all but the last stand for whole blocks.
    pub fn cat(parts: Vec<Quantized>) -> Quantized {
        let elements = parts.iter().map(|part| part.elements).sum();
        let (words, scales) = parts.into_iter().map(|part| (part.words, part.scales)).unzip();
        Quantized {
            words: Tensor::cat(words, 0),
            scales: Tensor::cat(scales, 0),
            elements,
        }
    }
}

/// Shifts that put the four codes of a word in place, lowest byte first.
fn byte_shifts(words: usize, device: &Device) -> Tensor<2, Int> {
    Tensor::<1, Int>::from_data(TensorData::new(vec![0i32, 8, 16, 24], [PER_WORD]), device)
        .reshape([1, PER_WORD])
        .expand([words, PER_WORD])
}

pub fn quantize(values: Tensor<1>, codebook: &Codebook) -> Quantized {
    let elements = values.shape().num_elements();
    let blocks = elements.div_ceil(BLOCK);
    let device = values.device();
    let padded = match blocks * BLOCK - elements {
        0 => values,
        pad => Tensor::cat(vec![values, Tensor::zeros([pad], &device)], 0),
    };
    let blocked = padded.reshape([blocks, BLOCK]);
    let scales = blocked.clone().abs().max_dim(1);
    // A block of zeros divides by the smallest normal float rather than by zero.
    let normalized = blocked.div(scales.clone().clamp_min(f32::MIN_POSITIVE));
    let codes = codebook.encode(normalized.reshape([blocks * BLOCK]));
    let words = blocks * BLOCK / PER_WORD;
    let packed = codes
        .reshape([words, PER_WORD])
        .bitwise_left_shift(byte_shifts(words, &device))
        // The fields do not overlap: their sum is their bitwise or.
        .sum_dim(1)
        .reshape([words]);
    Quantized {
        words: packed,
        scales: scales.reshape([blocks]),
        elements,
    }
}

pub fn dequantize(quantized: &Quantized, codebook: &Codebook) -> Tensor<1> {
    let words = quantized.words.shape().num_elements();
    let blocks = quantized.scales.shape().num_elements();
    let device = quantized.words.device();
    let codes = quantized
        .words
        .clone()
        .reshape([words, 1])
        .expand([words, PER_WORD])
        .bitwise_right_shift(byte_shifts(words, &device))
        .bitwise_and_scalar(0xff)
        .reshape([words * PER_WORD]);
    let values = codebook
        .decode(codes)
        .reshape([blocks, BLOCK])
        .mul(quantized.scales.clone().reshape([blocks, 1]))
        .reshape([blocks * BLOCK]);
    match blocks * BLOCK == quantized.elements {
        true => values,
        false => values.slice(0..quantized.elements),
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use burn::tensor::Distribution;

    fn read(tensor: Tensor<1>) -> Vec<f32> {
        tensor.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
    }

    #[test]
    fn the_maps_are_bitsandbytes_dynamic_types() {
        let signed = dynamic_map(true);
        let unsigned = dynamic_map(false);
        for map in [signed, unsigned] {
            assert!(map.windows(2).all(|w| w[0] < w[1]), "sorted and distinct");
            assert_eq!(map[255], 1.0);
        }
        assert_eq!(signed[0], -0.99296875);
        assert!(signed.contains(&0.0));
        // The smallest magnitudes: 10^-6 times the midpoint of [0.1, 1] (signed), of
        // [0.1, 0.55] (unsigned); below it, half of that instead of zero.
        assert!((signed[128] - 0.55e-6).abs() < 1e-12, "{}", signed[128]);
        assert!((unsigned[1] - 0.325e-6).abs() < 1e-12, "{}", unsigned[1]);
        assert_eq!(unsigned[0], unsigned[1] / 2.0);
    }

    /// Values spread over seven decades, in blocks that are full, partial, all zero and
    /// led by a negative value: each decodes to the map value nearest it (checked against
    /// a search on the host), which bounds its error by half the map's step at its decade.
    #[test]
    fn a_round_trip_lands_on_the_nearest_code_within_half_a_step() {
        let device = Device::flex();
        for signed in [true, false] {
            let codebook = Codebook::new(signed, &device);
            let map = dynamic_map(signed);
            for elements in [1, 255, 256, 257, 3 * BLOCK + 17] {
                device.seed(elements as u64);
                let magnitude = Tensor::<1>::random([elements], Distribution::Uniform(-7.0, 0.0), &device);
                let mut values = Tensor::<1>::full([elements], 10.0, &device).powf(magnitude);
                if signed {
                    let sign =
                        Tensor::<1>::random([elements], Distribution::Uniform(-1.0, 1.0), &device).sign();
                    values = values * sign;
                }
                let mut host = read(values);
                if elements > BLOCK {
                    host[..BLOCK].fill(0.0);
                    host[BLOCK] = if signed { -2.5 } else { 2.5 };
                }
                let values = Tensor::<1>::from_data(TensorData::new(host.clone(), [elements]), &device);
                let quantized = quantize(values, &codebook);
                assert_eq!(
                    quantized.words.shape().num_elements(),
                    elements.div_ceil(BLOCK) * BLOCK / 4
                );
                let decoded = read(dequantize(&quantized, &codebook));
                assert_eq!(decoded.len(), elements);
                for (block, (xs, ys)) in host.chunks(BLOCK).zip(decoded.chunks(BLOCK)).enumerate() {
                    let scale = xs.iter().fold(0f32, |m, x| m.max(x.abs()));
                    for (&x, &y) in xs.iter().zip(ys) {
                        if scale == 0.0 {
                            assert_eq!(y, 0.0, "a block of zeros decodes to zeros");
                            continue;
                        }
                        let nearest = map
                            .iter()
                            .map(|&c| c * scale)
                            .min_by(|a, b| (a - x).abs().total_cmp(&(b - x).abs()))
                            .unwrap();
                        let tolerance = 1e-6 * scale;
                        assert!(
                            (y - x).abs() <= (nearest - x).abs() + tolerance,
                            "block {block}: {x} decoded to {y}, nearest code {nearest}"
                        );
                        // The map's step in x's decade 10^e: 0.9 * 10^e over 2^(6+e) codes
                        // (signed) or 2^(7+e); below 10^-6 the smallest decade's.
                        let e = (x.abs() / scale).log10().ceil().clamp(-6.0, 0.0);
                        let codes = if signed { 64.0 } else { 128.0 } * 2f32.powf(e);
                        let decade_step = 0.9 * scale * 10f32.powf(e) / codes;
                        assert!(
                            (y - x).abs() <= decade_step / 2.0 + tolerance,
                            "block {block}: {x} decoded to {y}, step {decade_step}"
                        );
                        if !signed {
                            assert!(y > 0.0, "a positive second moment never decodes to zero");
                        } else if y != 0.0 {
                            assert_eq!(y.signum(), x.signum(), "{x} kept its sign");
                        }
                    }
                }
            }
        }
    }
}
