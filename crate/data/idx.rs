//! IDX files (the MNIST family's format), plain or gzipped.

use std::io::Read;
use std::path::Path;

use super::error::DataError;

#[derive(Debug)]
pub struct IdxArray {
    pub dims: Vec<usize>,
    pub data: Vec<u8>,
}

const UBYTE: u8 = 0x08;

/// Reads an unsigned-byte IDX file with `expected_rank` dimensions, checking the magic
/// number and that the data length matches the dimensions.
pub fn read_idx(path: &Path, expected_rank: usize) -> Result<IdxArray, DataError> {
    let file_bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
    let bytes = if file_bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&file_bytes[..])
            .read_to_end(&mut out)
            .map_err(|e| DataError::Import(format!("{}: not a valid gzip file: {e}", path.display())))?;
        out
    } else {
        file_bytes
    };
    parse_idx(&bytes, expected_rank)
        .map_err(|reason| DataError::Import(format!("{}: {reason}", path.display())))
}

pub fn parse_idx(bytes: &[u8], expected_rank: usize) -> Result<IdxArray, String> {
    if bytes.len() < 4 {
        return Err(format!("{} bytes is too short for an IDX header", bytes.len()));
    }
    if bytes[0] != 0 || bytes[1] != 0 {
        return Err(format!(
            "bad IDX magic number {:02x}{:02x}{:02x}{:02x}",
            bytes[0], bytes[1], bytes[2], bytes[3]
        ));
    }
    if bytes[2] != UBYTE {
        return Err(format!(
            "IDX element type 0x{:02x} is not unsigned byte (0x08)",
            bytes[2]
        ));
    }
    let rank = usize::from(bytes[3]);
    if rank != expected_rank {
        return Err(format!("IDX has {rank} dimensions, expected {expected_rank}"));
    }
    let header = 4 + 4 * rank;
    if bytes.len() < header {
        return Err("truncated IDX header".into());
    }
    let dims: Vec<usize> = bytes[4..header]
        .chunks_exact(4)
        .map(|d| u32::from_be_bytes([d[0], d[1], d[2], d[3]]) as usize)
        .collect();
    let got = bytes.len() - header;
    let expected = dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    if expected != Some(got) {
        return Err(format!(
            "IDX dimensions {dims:?} need {} data bytes, file has {got}",
            expected.map_or("more".to_string(), |n| n.to_string())
        ));
    }
    Ok(IdxArray {
        dims,
        data: bytes[header..].to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dimensions_whose_product_overflows_are_an_error() {
        let error = parse_idx(&idx(3, &[u32::MAX, u32::MAX, u32::MAX], &[1]), 3).unwrap_err();
        assert!(error.contains("need more data bytes"), "{error}");
    }

    fn idx(rank: u8, dims: &[u32], data: &[u8]) -> Vec<u8> {
        let mut bytes = vec![0, 0, UBYTE, rank];
        for d in dims {
            bytes.extend_from_slice(&d.to_be_bytes());
        }
        bytes.extend_from_slice(data);
        bytes
    }

    #[test]
    fn reads_dimensions_and_data() {
        let array = parse_idx(&idx(3, &[2, 2, 1], &[1, 2, 3, 4]), 3).unwrap();
        assert_eq!(array.dims, vec![2, 2, 1]);
        assert_eq!(array.data, vec![1, 2, 3, 4]);
    }

    #[test]
    fn rejects_bad_magic_rank_and_length() {
        let mut bad_magic = idx(1, &[2], &[0, 1]);
        bad_magic[0] = 7;
        assert!(parse_idx(&bad_magic, 1).unwrap_err().contains("magic"));
        assert!(
            parse_idx(&idx(1, &[2], &[0, 1]), 3)
                .unwrap_err()
                .contains("dimensions")
        );
        assert!(
            parse_idx(&idx(1, &[3], &[0, 1]), 1)
                .unwrap_err()
                .contains("need 3")
        );
    }
}
