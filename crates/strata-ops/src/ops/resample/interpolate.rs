//! The Resize/Upsample kernel: builds one tap table per axis (see `geometry`) in planned
//! scratch, then writes every output element as the weighted sum over the product of its
//! axes' taps, accumulated in f64 like the ONNX reference and rounded once on store (see `sample`).

use smallvec::SmallVec;
use strata_core::Tensor;

use super::geometry::{AxisGeometry, ResizeSpec, EXTRAPOLATE};
use super::sample::{dispatch_sample, Sample};
use crate::support::strided::advance_index;
use crate::{OpError, OpResult};

/// Bytes of scratch the tap tables of `geo` take: one `usize` index and one `f64` weight per tap.
pub(crate) fn tap_table_bytes(spec: &ResizeSpec, geo: &[AxisGeometry]) -> usize {
    let taps: usize = geo.iter().map(|g| g.out_dim * spec.taps(g)).sum();
    taps * (std::mem::size_of::<usize>() + std::mem::size_of::<f64>())
}

/// Resizes `x` into `out` (dims already checked against `geo`), using `scratch` for the tap
/// tables when it is large enough.
pub(crate) fn resize_into(
    spec: &ResizeSpec,
    geo: &[AxisGeometry],
    x: &Tensor,
    out: &Tensor,
    scratch: Option<&Tensor>,
) -> OpResult<()> {
    let op = spec.op;
    let total: usize = geo.iter().map(|g| g.out_dim * spec.taps(g)).sum();
    let mut guard = match scratch {
        Some(s) if s.numel() >= tap_table_bytes(spec, geo) => Some(s.write_bytes(op)?),
        _ => None,
    };
    // Without planned scratch (a caller that did not ask for it) the tables are allocated here.
    let (mut owned_index, mut owned_weight) = (Vec::new(), Vec::new());
    let (index, weight): (&mut [usize], &mut [f64]) = match guard.as_mut() {
        Some(g) => {
            let (w, rest) = g.bytes().split_at_mut(total * std::mem::size_of::<f64>());
            let i = &mut rest[..total * std::mem::size_of::<usize>()];
            let misaligned = |e| OpError::kernel(op, format!("scratch is misaligned: {e}"));
            (
                bytemuck::try_cast_slice_mut(i).map_err(misaligned)?,
                bytemuck::try_cast_slice_mut(w).map_err(misaligned)?,
            )
        }
        None => {
            owned_index.resize(total, 0usize);
            owned_weight.resize(total, 0.0f64);
            (&mut owned_index, &mut owned_weight)
        }
    };
    // Per axis: (taps, offset of its table).
    let mut tables: SmallVec<[(usize, usize); 8]> = SmallVec::new();
    let mut at = 0;
    for g in geo {
        let n = spec.taps(g);
        let len = g.out_dim * n;
        spec.fill_taps(g, &mut index[at..at + len], &mut weight[at..at + len]);
        tables.push((n, at));
        at += len;
    }
    let tables = Tables {
        index,
        weight,
        axes: &tables,
    };
    dispatch_sample!(x.dtype(), T => apply::<T>(spec, &tables, x, out),
        _ => Err(OpError::kernel(op, format!("no kernel for dtype {}", x.dtype()))))
}

struct Tables<'a> {
    index: &'a [usize],
    weight: &'a [f64],
    /// Per axis: taps per output index and where its rows start.
    axes: &'a [(usize, usize)],
}

fn apply<T: Sample>(spec: &ResizeSpec, t: &Tables, x: &Tensor, out: &Tensor) -> OpResult<()> {
    let op = spec.op;
    let rank = t.axes.len();
    let xr = x.read::<T>()?;
    let src = xr.storage_data();
    let base = x.storage_offset() as isize;
    let strides = x.strides();
    let mut ow = out.write::<T>()?;
    let dst = ow
        .as_mut_slice()
        .ok_or_else(|| OpError::kernel(op, "output is not contiguous"))?;
    let out_dims = out.dims();
    let fill = T::store(spec.extrapolation);
    let mut coord: SmallVec<[usize; 8]> = SmallVec::from_elem(0, rank);
    let mut tap: SmallVec<[usize; 8]> = SmallVec::from_elem(0, rank);
    // Taps per output index of each axis: the dims of the tap walk.
    let taps: SmallVec<[usize; 8]> = t.axes.iter().map(|&(n, _)| n).collect();
    for slot in dst.iter_mut() {
        // Row start of each axis' taps for the current output coordinate.
        let row = |a: usize| t.axes[a].1 + coord[a] * t.axes[a].0;
        if (0..rank).any(|a| t.index[row(a)] == EXTRAPOLATE) {
            *slot = fill;
        } else {
            let mut acc = 0.0f64;
            tap.fill(0);
            loop {
                let mut w = 1.0f64;
                let mut offset = base;
                for a in 0..rank {
                    let k = row(a) + tap[a];
                    w *= t.weight[k];
                    offset += t.index[k] as isize * strides[a];
                }
                if w != 0.0 {
                    let v = src[offset as usize].load();
                    acc += w * v;
                }
                // Next tap combination (last axis fastest); done after the last.
                if !advance_index(&mut tap, &taps) {
                    break;
                }
            }
            *slot = T::store(acc);
        }
        advance_index(&mut coord, out_dims);
    }
    Ok(())
}
