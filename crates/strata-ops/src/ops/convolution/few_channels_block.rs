//! The register block of the few-input-channel convolution, shared by its driver and its AVX-512
//! kernel.

/// Output channels computed together (one broadcast weight each per tap).
pub(crate) const OC_BLOCK: usize = 4;
/// Column vectors (16 outputs each) of one row computed together: 20 accumulators, with room
/// for the loads and a weight.
pub(super) const MAX_VECTORS: usize = 5;
