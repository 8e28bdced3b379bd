//! The row kernel of onnxruntime's fused normalizations: each row of `cols` values is summed
//! with an optional residual (`skip`, broadcast over leading rows) and bias, optionally stored as
//! that sum, then normalized (centered LayerNorm or RMS) and scaled by gamma (plus beta).
//! Statistics are computed in the wide float type (f32 for 16-bit inputs).

use num_traits::{Float, ToPrimitive, Zero};

use crate::support::numeric::{Real, WideFloat};
use crate::{OpError, OpResult};

/// The inputs of one call. Empty `skip`, `bias` and `beta` mean absent; `skip` repeats every
/// `skip.len()` elements (a whole number of rows).
pub(crate) struct NormInputs<'a, T> {
    pub x: &'a [T],
    pub skip: &'a [T],
    pub bias: &'a [T],
    pub gamma: &'a [T],
    pub beta: &'a [T],
    pub cols: usize,
    pub epsilon: f32,
    /// LayerNorm (subtract the mean) or RMS norm.
    pub centered: bool,
}

/// Where the results go; absent optional outputs are `None`.
pub(crate) struct NormOutputs<'a, T> {
    pub y: &'a mut [T],
    /// `x + skip + bias`.
    pub sum: Option<&'a mut [T]>,
    pub mean: Option<&'a mut [f32]>,
    pub inv_std: Option<&'a mut [f32]>,
}

/// Checks every length against `cols` and runs the rows.
pub(crate) fn normalize_rows<T: Real>(
    op: &str,
    inp: &NormInputs<'_, T>,
    out: NormOutputs<'_, T>,
) -> OpResult<()> {
    let cols = inp.cols;
    let bad = |what: &str, len: usize| {
        OpError::kernel(
            op,
            format!("{what} has {len} elements, not fitting rows of {cols}"),
        )
    };
    if cols == 0 {
        return Ok(());
    }
    let rows = inp.x.len() / cols;
    if !inp.x.len().is_multiple_of(cols) || out.y.len() != inp.x.len() {
        return Err(bad("the input or output", inp.x.len()));
    }
    if !inp.skip.is_empty()
        && (!inp.skip.len().is_multiple_of(cols) || !inp.x.len().is_multiple_of(inp.skip.len()))
    {
        return Err(bad("skip", inp.skip.len()));
    }
    for (what, v, optional) in [
        ("gamma", inp.gamma, false),
        ("beta", inp.beta, true),
        ("bias", inp.bias, true),
    ] {
        if v.len() != cols && !(optional && v.is_empty()) {
            return Err(bad(what, v.len()));
        }
    }
    if out.sum.as_ref().is_some_and(|s| s.len() != inp.x.len()) {
        return Err(bad("the sum output", inp.x.len()));
    }
    for stat in [&out.mean, &out.inv_std].into_iter().flatten() {
        if stat.len() != rows {
            return Err(bad("a statistics output", stat.len()));
        }
    }
    let NormOutputs {
        y,
        mut sum,
        mut mean,
        mut inv_std,
    } = out;
    let eps = <T::Wide as WideFloat>::lit(f64::from(inp.epsilon));
    for (r, row_y) in y.chunks_exact_mut(cols).enumerate() {
        let at = r * cols;
        let xs = &inp.x[at..at + cols];
        // The summed row is kept in y (its own dtype), as onnxruntime rounds it.
        let skip = if inp.skip.is_empty() {
            None
        } else {
            let s = at % inp.skip.len();
            Some(&inp.skip[s..s + cols])
        };
        for (j, (o, &v)) in row_y.iter_mut().zip(xs).enumerate() {
            let mut s = v.widen();
            if let Some(k) = skip {
                s = s + k[j].widen();
            }
            if !inp.bias.is_empty() {
                s = s + inp.bias[j].widen();
            }
            *o = T::narrow(s);
        }
        if let Some(sum) = sum.as_deref_mut() {
            sum[at..at + cols].copy_from_slice(row_y);
        }
        let (m, inv) = normalize_row(row_y, inp.gamma, inp.beta, eps, inp.centered);
        if let Some(mean) = mean.as_deref_mut() {
            mean[r] = m.to_f32().unwrap_or(f32::NAN);
        }
        if let Some(inv_std) = inv_std.as_deref_mut() {
            inv_std[r] = inv.to_f32().unwrap_or(f32::NAN);
        }
    }
    Ok(())
}

/// Normalizes one row in place (centered or RMS), scales by `gamma` and shifts by `beta` (when
/// not empty); returns the row's mean (0 for RMS) and inverse standard deviation.
pub(crate) fn normalize_row<T: Real>(
    row: &mut [T],
    gamma: &[T],
    beta: &[T],
    eps: T::Wide,
    centered: bool,
) -> (T::Wide, T::Wide) {
    let n = <T::Wide as WideFloat>::lit(row.len().max(1) as f64);
    let m = if centered {
        row.iter().fold(T::Wide::zero(), |a, &v| a + v.widen()) / n
    } else {
        T::Wide::zero()
    };
    let var = row.iter().fold(T::Wide::zero(), |a, &v| {
        let d = v.widen() - m;
        a + d * d
    }) / n;
    let inv = (var + eps).sqrt().recip();
    if beta.is_empty() {
        for (o, &g) in row.iter_mut().zip(gamma) {
            *o = T::narrow((o.widen() - m) * inv * g.widen());
        }
    } else {
        for ((o, &g), &b) in row.iter_mut().zip(gamma).zip(beta) {
            *o = T::narrow((o.widen() - m) * inv * g.widen() + b.widen());
        }
    }
    (m, inv)
}
