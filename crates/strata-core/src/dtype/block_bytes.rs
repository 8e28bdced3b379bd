//! Element and byte counts of one block of each GGML block format, apart from the block code so
//! that `DType`'s byte math and the codecs can both use them without importing each other.

/// Elements per block of the legacy formats (q4_0 … q8_0).
pub const QUANT_BLOCK: usize = 32;
/// Elements per super-block of the k-quants (q4_k, q5_k, q6_k).
pub const QK_K: usize = 256;
/// Bytes of one block of each format.
pub const Q4_0_BYTES: usize = 2 + QUANT_BLOCK / 2;
pub const Q4_1_BYTES: usize = 4 + QUANT_BLOCK / 2;
pub const Q5_0_BYTES: usize = 2 + 4 + QUANT_BLOCK / 2;
pub const Q5_1_BYTES: usize = 4 + 4 + QUANT_BLOCK / 2;
pub const Q8_0_BYTES: usize = 2 + QUANT_BLOCK;
pub const Q4_K_BYTES: usize = 4 + 12 + QK_K / 2;
pub const Q5_K_BYTES: usize = 4 + 12 + QK_K / 8 + QK_K / 2;
pub const Q6_K_BYTES: usize = QK_K / 2 + QK_K / 4 + QK_K / 16 + 2;
