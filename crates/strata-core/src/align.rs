//! Alignment (C5): buffers are aligned to 256 bytes by default and capacities rounded up to it.

use crate::{CoreError, Result};

/// Default buffer alignment: a multiple of AVX-512's 64 bytes, CUDA's recommendation and
/// TensorRT's default.
pub const DEFAULT_ALIGNMENT: usize = 256;

/// Checks that `align` is a non-zero power of two.
pub fn check_alignment(align: usize) -> Result<()> {
    if align.is_power_of_two() {
        Ok(())
    } else {
        Err(CoreError::InvalidAlignment { align })
    }
}

/// Rounds `bytes` up to a multiple of `align` (a power of two), checked for overflow.
pub fn align_up(bytes: usize, align: usize) -> Result<usize> {
    check_alignment(align)?;
    bytes
        .checked_add(align - 1)
        .map(|b| b & !(align - 1))
        .ok_or_else(|| CoreError::overflow(format!("{bytes} bytes rounded up to {align}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_rule() {
        assert_eq!(align_up(1000, DEFAULT_ALIGNMENT).unwrap(), 1024);
        assert_eq!(align_up(256, DEFAULT_ALIGNMENT).unwrap(), 256);
        assert_eq!(align_up(257, DEFAULT_ALIGNMENT).unwrap(), 512);
        assert_eq!(align_up(0, DEFAULT_ALIGNMENT).unwrap(), 0);
        assert!(align_up(usize::MAX, 256).is_err());
        assert!(align_up(10, 3).is_err());
        assert!(align_up(10, 0).is_err());
    }
}
