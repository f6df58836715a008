//! Human-readable byte figures, one format everywhere the CLI prints them.

const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];

/// `bytes` in its largest unit below 1024 (a tenth's precision), and that unit.
fn scaled(bytes: usize) -> (f64, usize) {
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    (value, unit)
}

pub fn format_bytes(bytes: usize) -> String {
    match scaled(bytes) {
        (_, 0) => format!("{bytes} B"),
        (value, unit) => format!("{value:.1} {}", UNITS[unit]),
    }
}

/// `bytes` rounded up to the tenth `format_bytes` prints: for a cap that must be at
/// least `bytes`, so that the printed cap really is enough.
pub fn format_bytes_up(bytes: usize) -> String {
    match scaled(bytes) {
        (_, 0) => format!("{bytes} B"),
        // The small tolerance keeps an exact tenth (16 MiB) from rounding past itself.
        (value, unit) => format!("{:.1} {}", (value * 10.0 - 1e-9).ceil() / 10.0, UNITS[unit]),
    }
}

/// A rate with about three significant figures: a step of a large model on an emulator
/// takes minutes, and "0 samples/s" would say nothing.
pub fn format_rate(rate: f64) -> String {
    match rate {
        r if r >= 100.0 => format!("{r:.0}"),
        r if r >= 1.0 => format!("{r:.1}"),
        r => format!("{r:.3}"),
    }
}

pub fn mb_per_sec(bytes: usize, seconds: f64) -> f64 {
    bytes as f64 / 1e6 / seconds.max(1e-9)
}

/// A byte count as people write it: `512MiB`, `1.5 GiB`, `300MB`, `4096`. Binary and
/// decimal units both mean what they say.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let parsed: bytesize::ByteSize = text
        .trim()
        .parse()
        .map_err(|error| format!("{text:?} is not a size like 512MiB or 1.5GB ({error})"))?;
    if parsed.as_u64() == 0 {
        return Err(format!("{text:?}: a size must be more than zero bytes"));
    }
    Ok(parsed.as_u64())
}

#[cfg(test)]
mod tests {
    use super::{format_bytes, format_bytes_up, format_rate, parse_bytes};
    // In the browser (wasm-pack test, tests/run-all) these run as wasm-bindgen tests.
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn a_needed_size_is_printed_rounded_up() {
        let needed = 16 * 1024 * 1024 + 5;
        assert_eq!(format_bytes(needed), "16.0 MiB");
        assert_eq!(format_bytes_up(needed), "16.1 MiB");
        assert_eq!(format_bytes_up(16 * 1024 * 1024), "16.0 MiB");
        assert_eq!(format_bytes_up(1000), "1000 B");
    }

    #[test]
    fn a_slow_rate_keeps_its_figures() {
        assert_eq!(format_rate(0.0918), "0.092");
        assert_eq!(format_rate(7.46), "7.5");
        assert_eq!(format_rate(2486.4), "2486");
    }

    #[test]
    fn sizes_parse_in_binary_and_decimal_units() {
        assert_eq!(parse_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("1.5 GiB"), Ok(3 << 29));
        assert_eq!(parse_bytes("300MB"), Ok(300_000_000));
        assert_eq!(parse_bytes("4096"), Ok(4096));
    }

    #[test]
    fn bad_sizes_are_refused() {
        for bad in ["", "0", "0MiB", "-5MiB", "12 parsecs", "MiB"] {
            assert!(parse_bytes(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
