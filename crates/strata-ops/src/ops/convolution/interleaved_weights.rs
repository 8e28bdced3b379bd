//! Constant convolution weights interleaved once, at plan time, for kernels that broadcast or
//! load a block of output channels per tap: `block` rows side by side at every step of their
//! depth, zero past the last row, in Persistent memory (counted in the plan's weight stats).

use strata_core::{DType, Device, MemoryKind, Tensor};

/// `values` (rows of `depth`) as `dst[(r / block * depth + t) * block + r % block] = values[r *
/// depth + t]`; `Err` carries the allocator's reason.
pub(super) fn interleave_weight_rows(
    values: &[f32],
    depth: usize,
    block: usize,
) -> Result<Tensor, String> {
    let rows = values.len() / depth.max(1);
    let len = rows.div_ceil(block.max(1)) * depth * block;
    let data = Tensor::empty(&[len], DType::F32, Device::Cpu, MemoryKind::Persistent)
        .map_err(|e| e.to_string())?;
    {
        let mut guard = data.write::<f32>().map_err(|e| e.to_string())?;
        let dst = guard
            .as_mut_slice()
            .ok_or_else(|| "fresh buffer is not contiguous".to_string())?;
        dst.fill(0.0);
        for (row, taps) in values.chunks_exact(depth.max(1)).enumerate() {
            let (b, r) = (row / block, row % block);
            for (t, &v) in taps.iter().enumerate() {
                dst[(b * depth + t) * block + r] = v;
            }
        }
    }
    Ok(data)
}
