//! Storage size of an element count (C1): checked, and whole blocks only for block-quantized
//! dtypes. Apart from `mod.rs` so that the dtype definition does not depend on the error type.

use super::DType;
use crate::{CoreError, Result};

impl DType {
    /// Bytes needed to hold `numel` elements, checked: overflow is an error, and a quantized
    /// count that does not fill whole blocks is an error.
    #[inline]
    pub fn bytes_for(self, numel: usize) -> Result<usize> {
        let block = self.block_size();
        if block == 1 {
            // Every unquantized type: no division on the path of every tensor creation.
            return numel
                .checked_mul(self.size_in_bytes())
                .ok_or_else(|| overflow(numel, self));
        }
        if !numel.is_multiple_of(block) {
            return Err(CoreError::PartialBlock {
                dtype: self,
                numel,
                block,
            });
        }
        (numel / block)
            .checked_mul(self.size_in_bytes())
            .ok_or_else(|| overflow(numel, self))
    }
}

#[cold]
fn overflow(numel: usize, dtype: DType) -> CoreError {
    CoreError::overflow(format!("{numel} elements of {dtype}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_math_is_checked() {
        assert!(matches!(
            DType::Q4_0.bytes_for(33),
            Err(CoreError::PartialBlock { .. })
        ));
        assert!(matches!(
            DType::F64.bytes_for(usize::MAX / 4),
            Err(CoreError::SizeOverflow { .. })
        ));
    }
}
