//! The per-head computation of ONNX Attention on working buffers in the wide float type:
//! scores = Q·Kᵀ (GEMM), softcap, bias, softmax with the fully-masked-row guard, Y = P·V (GEMM).
//! Values are rounded through the input dtype where the ONNX reference rounds (scores, biased
//! scores, probabilities), so f16/bf16 results follow it closely.

use num_traits::{Float, One, ToPrimitive, Zero};
use strata_core::{bf16, f16};

use super::attention_bias::Bias;
use super::attention_geometry::Geometry;
use crate::kernels::{gemm, GemmFloat};
use crate::parallel;
use crate::support::numeric::{Real, WideFloat};
use crate::OpResult;

/// What the optional `qk_matmul_output` holds (`qk_matmul_output_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QkCapture {
    /// 0: the scaled Q·Kᵀ.
    Raw,
    /// 1: after the softcap.
    Softcapped,
    /// 2: after the softcap and the bias.
    Biased,
    /// 3: the softmax probabilities (fully masked rows zero).
    Probabilities,
}

/// The type softmax computes in (`softmax_precision`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SoftmaxPrecision {
    /// The input dtype (no attribute).
    Input,
    F16,
    BF16,
    /// float or double: the wide type, unrounded.
    Wide,
}

/// Attribute-derived settings of the score pipeline.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ScoreParams {
    /// Applied when positive.
    pub softcap: f32,
    pub capture: QkCapture,
    pub precision: SoftmaxPrecision,
}

/// The working buffers, all in the wide type and head-major: Q `(b, hq, s, d)` pre-scaled,
/// K `(b, hkv, l, d)` pre-scaled, V `(b, hkv, l, dv)`, scores `(b, hq, s, l)` and
/// Y `(b, hq, s, dv)`.
pub(crate) struct Buffers<'a, W> {
    pub q: &'a [W],
    pub k: &'a [W],
    pub v: &'a [W],
    pub scores: &'a mut [W],
    pub y: &'a mut [W],
}

/// Rounds through the input type `T`.
fn round_input<T: Real>(x: T::Wide) -> T::Wide {
    T::narrow(x).widen()
}

fn round_precision<T: Real>(precision: SoftmaxPrecision, x: T::Wide) -> T::Wide {
    match precision {
        SoftmaxPrecision::Input => round_input::<T>(x),
        SoftmaxPrecision::F16 => {
            T::Wide::lit(f16::from_f64(x.to_f64().unwrap_or(f64::NAN)).to_f64())
        }
        SoftmaxPrecision::BF16 => {
            T::Wide::lit(bf16::from_f64(x.to_f64().unwrap_or(f64::NAN)).to_f64())
        }
        SoftmaxPrecision::Wide => x,
    }
}

/// `softcap * tanh(x / softcap)`, each step rounded through `T` as the reference does.
fn apply_softcap<T: Real>(row: &mut [T::Wide], softcap: T::Wide) {
    for x in row {
        let t = round_input::<T>(round_input::<T>(*x / softcap).tanh_v());
        *x = round_input::<T>(t * softcap);
    }
}

/// Softmax of a row in place. The max propagates NaN (as numpy's does); a row whose max is -inf
/// gives zeros instead of NaN.
fn softmax_row<T: Real>(row: &mut [T::Wide], precision: SoftmaxPrecision) {
    let round = |x| round_precision::<T>(precision, x);
    let zero = T::Wide::zero();
    let max = row.iter().fold(T::Wide::neg_infinity(), |m, &x| {
        if x.is_nan() || m.is_nan() {
            T::Wide::nan()
        } else {
            m.max(round(x))
        }
    });
    let max = if max == T::Wide::neg_infinity() {
        zero
    } else {
        max
    };
    let mut sum = zero;
    for x in row.iter_mut() {
        let e = round(round(round(*x) - max).exp_v());
        *x = e;
        sum = sum + e;
    }
    let sum = round(sum);
    let sum = if sum == zero { T::Wide::one() } else { sum };
    for x in row.iter_mut() {
        *x = round(*x / sum);
    }
}

/// Writes `row` into the captured `qk_matmul_output` row, if one is requested at `stage`.
fn capture<T: Real>(
    stage: QkCapture,
    params: &ScoreParams,
    row: &[T::Wide],
    out: Option<&mut [T]>,
) {
    if let Some(out) = out.filter(|_| params.capture == stage) {
        for (o, &x) in out.iter_mut().zip(row) {
            *o = T::narrow(x);
        }
    }
}

/// Runs every (batch, query head) block, spread over up to `threads` workers.
pub(crate) fn attend<T: Real>(
    g: &Geometry,
    buffers: Buffers<'_, T::Wide>,
    qk_output: Option<&mut [T]>,
    bias: &Bias<'_, T>,
    params: &ScoreParams,
    threads: usize,
) -> OpResult<()>
where
    T::Wide: GemmFloat,
{
    let Buffers { q, k, v, scores, y } = buffers;
    let score_len = g.q_len * g.total_kv;
    let y_len = g.q_len * g.v_head_size;
    let blocks = g.batch * g.q_heads;
    if blocks == 0 || g.q_len == 0 {
        return Ok(());
    }
    let min_len = blocks.div_ceil(threads.max(1));
    // Zero-length chunks would make the zipped iterators skip every block.
    if score_len == 0 {
        y.fill(T::Wide::zero());
        return Ok(());
    }
    // Taken here: the pool's workers that run the blocks have no run control installed.
    let stop = crate::run_control::stop_token();
    let probabilities = |block: usize, scores: &mut [T::Wide], qk: Option<&mut [T]>| {
        stop.poll(block, "Attention")?;
        head_probabilities::<T>(g, block, (q, k), scores, qk, bias, params)
    };
    match qk_output {
        Some(qk) => parallel::try_for_each_chunk_pair_mut(
            (scores, score_len),
            (qk, score_len),
            min_len,
            |block, s, qk| probabilities(block, s, Some(qk)),
        )?,
        None => parallel::try_for_each_chunk_mut(scores, score_len, min_len, |block, s| {
            probabilities(block, s, None)
        })?,
    }
    if y_len == 0 {
        return Ok(());
    }
    let (l, dv) = (g.total_kv, g.v_head_size);
    let scores = &*scores;
    parallel::try_for_each_chunk_mut(y, y_len, min_len, |block, y| {
        if stop.should_stop_at(block) {
            // Skipped: the run fails at its check after this node.
            return Ok(());
        }
        let p = &scores[block * score_len..(block + 1) * score_len];
        // Y (s × dv) = P (s × l) · V (l × dv).
        let kv_block = kv_block(g, block);
        let v = &v[kv_block * l * dv..(kv_block + 1) * l * dv];
        let (one, zero) = (T::Wide::one(), T::Wide::zero());
        let row = |cols: usize| (cols as isize, 1);
        gemm(
            g.q_len,
            dv,
            l,
            p,
            row(l),
            v,
            row(dv),
            y,
            row(dv),
            one,
            zero,
            1,
        )
    })?;
    Ok(())
}

/// The key/value block that query block `block` (batch-major) reads: query head `h` uses
/// key/value head `h / group` (each key/value head repeated `group` times in order).
fn kv_block(g: &Geometry, block: usize) -> usize {
    let (b, h) = (block / g.q_heads, block % g.q_heads);
    b * g.kv_heads + h / g.group()
}

/// The probabilities of one (batch, query head) block, left in `scores`.
fn head_probabilities<T: Real>(
    g: &Geometry,
    block: usize,
    (q, k): (&[T::Wide], &[T::Wide]),
    scores: &mut [T::Wide],
    mut qk: Option<&mut [T]>,
    bias: &Bias<'_, T>,
    params: &ScoreParams,
) -> OpResult<()>
where
    T::Wide: GemmFloat,
{
    let (s, l, d) = (g.q_len, g.total_kv, g.head_size);
    let (b, h) = (block / g.q_heads, block % g.q_heads);
    let kv_block = kv_block(g, block);
    let q = &q[block * s * d..(block + 1) * s * d];
    let k = &k[kv_block * l * d..(kv_block + 1) * l * d];
    let (one, zero) = (T::Wide::one(), T::Wide::zero());
    // scores (s × l) = Q (s × d) · Kᵀ, Kᵀ read through transposed strides.
    let d_stride = d as isize;
    gemm(
        s,
        l,
        d,
        q,
        (d_stride, 1),
        k,
        (1, d_stride),
        scores,
        (l as isize, 1),
        one,
        zero,
        1,
    )?;
    let softcap = T::Wide::lit(f64::from(params.softcap));
    for (i, row) in scores.chunks_mut(l).enumerate() {
        let mut qk_row = qk.as_deref_mut().map(|qk| &mut qk[i * l..(i + 1) * l]);
        for x in row.iter_mut() {
            *x = round_input::<T>(*x);
        }
        capture(QkCapture::Raw, params, row, qk_row.as_deref_mut());
        if params.softcap > 0.0 {
            apply_softcap::<T>(row, softcap);
        }
        capture(QkCapture::Softcapped, params, row, qk_row.as_deref_mut());
        let fully_masked = bias.add_to_row((b, h, i), row, round_input::<T>);
        capture(QkCapture::Biased, params, row, qk_row.as_deref_mut());
        if fully_masked {
            row.fill(zero);
        } else {
            softmax_row::<T>(row, params.precision);
            for x in row.iter_mut() {
                *x = round_input::<T>(*x);
            }
        }
        capture(QkCapture::Probabilities, params, row, qk_row);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softmax_is_nan_safe_for_neg_inf_rows_and_propagates_nan() {
        let mut row = [1.0f32, 2.0, f32::NEG_INFINITY];
        softmax_row::<f32>(&mut row, SoftmaxPrecision::Input);
        let e = 1.0f32.exp();
        assert!((row[0] - 1.0 / (1.0 + e)).abs() < 1e-6);
        assert!((row[1] - e / (1.0 + e)).abs() < 1e-6);
        assert_eq!(row[2], 0.0);
        let mut row = [f32::NEG_INFINITY; 2];
        softmax_row::<f32>(&mut row, SoftmaxPrecision::Input);
        assert_eq!(row, [0.0, 0.0]);
        let mut row = [f32::NAN, 0.0];
        softmax_row::<f32>(&mut row, SoftmaxPrecision::Input);
        assert!(row.iter().all(|x| x.is_nan()));
    }

    #[test]
    fn softcap_bounds_scores() {
        let mut row = [100.0f32, 0.5];
        apply_softcap::<f32>(&mut row, 2.0);
        assert!((row[0] - 2.0).abs() < 1e-6);
        assert!((row[1] - 2.0 * 0.25f32.tanh()).abs() < 1e-6);
    }
}
