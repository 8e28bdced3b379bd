//! ggml's float arithmetic, operation for operation, so the `strata.llm` operators give
//! llama.cpp's numbers bit for bit (greedy tokens then agree, not only within rounding). The
//! reference is llama.cpp's x86 build with AVX-512 (`-march=native` on the machines we compare
//! on): its vectorized `exp` and SiLU, 16-lane reductions, and the C compiler's contraction of
//! `a*b ± c*d` into one fused multiply-add. Every function here is scalar and portable; the
//! fused multiply-adds are `f32::mul_add` (exactly rounded, like the instruction).

/// Lanes of an AVX-512 float vector: the width of ggml's vector loops and reductions.
pub const LANES: usize = 16;

/// `e^x` as ggml's AVX-512 `ggml_v_expf` computes one lane: range reduction by a power of two,
/// a degree-5 polynomial (ARM's optimized routines), then `vscalefps` by that power.
#[inline(always)]
pub fn v_expf(x: f32) -> f32 {
    let r = f32::from_bits(0x4b40_0000); // 0x1.8p23
    let z = x.mul_add(f32::from_bits(0x3fb8_aa3b), r); // log2(e)
    let n = z - r;
    let b = (-n).mul_add(
        f32::from_bits(0x35bf_be8e),                  // 0x1.7f7d1cp-20
        (-n).mul_add(f32::from_bits(0x3f31_7200), x), // 0x1.62e4p-1
    );
    if n.is_nan() {
        return n;
    }
    if n.abs() > 192.0 {
        return if n <= 0.0 { 0.0 } else { f32::INFINITY };
    }
    let u = b * b;
    let j = f32::from_bits(0x3c07_2010) // 0x1.0e4020p-7
        .mul_add(b, f32::from_bits(0x3d2b_9f17)) // 0x1.573e2ep-5
        .mul_add(
            u,
            f32::from_bits(0x3e2a_af33).mul_add(b, f32::from_bits(0x3eff_fedb)), // 0x1.555e66p-3, 0x1.fffdb6p-2
        )
        .mul_add(u, f32::from_bits(0x3f7f_fff6).mul_add(b, 1.0)); // 0x1.ffffecp-1
    scalef(j, n)
}

/// `j · 2^n` rounded once, as `vscalefps` does (also into the subnormal range): the product is
/// exact in f64, the conversion rounds it. `|n| <= 192` (checked by the caller), so `2^n` is a
/// normal f64 built from its exponent bits (`powi` would be a libm call per element).
#[inline(always)]
fn scalef(j: f32, n: f32) -> f32 {
    let pow2 = f64::from_bits(((n as i64 + 1023) as u64) << 52);
    (f64::from(j) * pow2) as f32
}

/// SiLU `x / (1 + e^-x)` as ggml's AVX-512 `ggml_v_silu` (the vector part of a row).
#[inline(always)]
pub fn v_silu(x: f32) -> f32 {
    x / (1.0 + v_expf(0.0 - x))
}

/// SiLU as ggml's scalar `ggml_silu_f32` (the tail of a row past the last whole vector), with
/// the C library's `expf`.
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// The sum of 16 lanes in `_mm512_reduce_add_ps`'s order: halves, then quarters, then pairs.
#[inline(always)]
pub fn reduce16(v: &[f32; LANES]) -> f32 {
    let mut h = [0.0f32; 8];
    for i in 0..8 {
        h[i] = v[i] + v[i + 8];
    }
    let q = [h[0] + h[4], h[1] + h[5], h[2] + h[6], h[3] + h[7]];
    (q[0] + q[2]) + (q[1] + q[3])
}

/// Whether the CPU has fused multiply-add instructions. Without them `f32::mul_add` is a call
/// to the C library's `fmaf` (the same exactly rounded result, many times slower), so the row
/// functions below have forms compiled with FMA enabled.
pub fn has_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// [`swiglu_row`] over consecutive rows of `row` values, with FMA instructions when the CPU
/// has them.
pub fn swiglu_rows(gate: &[f32], up: &[f32], y: &mut [f32], row: usize) {
    #[cfg(target_arch = "x86_64")]
    if has_fma() {
        // SAFETY: FMA was detected.
        unsafe { swiglu_rows_fma(gate, up, y, row) };
        return;
    }
    swiglu_rows_any(gate, up, y, row);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn swiglu_rows_fma(gate: &[f32], up: &[f32], y: &mut [f32], row: usize) {
    swiglu_rows_any(gate, up, y, row);
}

#[inline(always)]
fn swiglu_rows_any(gate: &[f32], up: &[f32], y: &mut [f32], row: usize) {
    for ((g, u), y) in gate
        .chunks_exact(row)
        .zip(up.chunks_exact(row))
        .zip(y.chunks_exact_mut(row))
    {
        swiglu_row(g, u, y);
    }
}

/// RMSNorm of one row as ggml's `rms_norm` then `mul` by the weight: the sum of squares in f64
/// (each square rounded to f32 first), the mean rounded to f32, `1/sqrt(mean + eps)` in f32,
/// then `(x · scale) · w`.
pub fn rms_norm_row(x: &[f32], w: &[f32], eps: f32, y: &mut [f32]) {
    let sum = x.iter().fold(0.0f64, |s, &v| s + f64::from(v * v));
    let mean = (sum / x.len() as f64) as f32;
    let scale = 1.0 / (mean + eps).sqrt();
    for ((y, &x), &w) in y.iter_mut().zip(x).zip(w) {
        *y = (x * scale) * w;
    }
}

/// SwiGLU of one row as ggml's `ggml_vec_swiglu_f32`: `silu(gate) · up`, whole 16-lane vectors
/// with the vectorized SiLU, the rest with the scalar one.
#[inline(always)]
pub fn swiglu_row(gate: &[f32], up: &[f32], y: &mut [f32]) {
    let whole = gate.len() / LANES * LANES;
    for ((y, &g), &u) in y.iter_mut().zip(gate).zip(up).take(whole) {
        *y = v_silu(g) * u;
    }
    for ((y, &g), &u) in y.iter_mut().zip(gate).zip(up).skip(whole) {
        *y = silu(g) * u;
    }
}

/// One RoPE rotation as ggml's `rotate_pairs` compiles with contraction: the first product of
/// each output is fused with the sum, `x0·cos - x1·sin` and `x0·sin + x1·cos`.
#[inline(always)]
pub fn rotate(x0: f32, x1: f32, cos: f32, sin: f32) -> (f32, f32) {
    (x0.mul_add(cos, -(x1 * sin)), x0.mul_add(sin, x1 * cos))
}

/// The dot product of `ggml_vec_dot_f16` on AVX-512 over `n` elements `x(i) · y(i)` (both
/// already widened from f16): four accumulators of 16 lanes over each 64 elements (element `e`
/// in accumulator `e % 64 / 16`, lane `e % 16`), folded `(0+2) + (1+3)` and reduced; elements
/// past the last whole 64 added in f64 one by one.
#[inline(always)]
pub fn dot_f16_order(n: usize, x: impl Fn(usize) -> f32, y: impl Fn(usize) -> f32) -> f32 {
    let whole = n / (4 * LANES) * (4 * LANES);
    let mut acc = [[0.0f32; LANES]; 4];
    for base in (0..whole).step_by(4 * LANES) {
        for (a, lanes) in acc.iter_mut().enumerate() {
            for (l, lane) in lanes.iter_mut().enumerate() {
                let i = base + a * LANES + l;
                *lane = x(i).mul_add(y(i), *lane);
            }
        }
    }
    let mut total = f64::from(fold_accumulators(&acc));
    for i in whole..n {
        total += f64::from(x(i) * y(i));
    }
    total as f32
}

/// ggml's AVX-512 reduction of four 16-lane accumulators: `(0+2) + (1+3)`, then the 16 lanes.
#[inline(always)]
pub fn fold_accumulators(acc: &[[f32; LANES]; 4]) -> f32 {
    let mut sum = [0.0f32; LANES];
    for (l, s) in sum.iter_mut().enumerate() {
        *s = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    }
    reduce16(&sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v_expf_is_close_to_exp_and_exact_at_zero() {
        assert_eq!(v_expf(0.0), 1.0);
        assert_eq!(v_expf(f32::NEG_INFINITY), 0.0);
        assert_eq!(v_expf(-200.0), 0.0);
        assert_eq!(v_expf(200.0), f32::INFINITY);
        for i in -1000..=800 {
            let x = i as f32 * 0.1;
            let (ours, libm) = (v_expf(x), x.exp());
            let ulps = (ours.to_bits() as i64 - libm.to_bits() as i64).abs();
            assert!(
                ulps <= 2 || (libm - ours).abs() < 1e-38,
                "{x}: {ours} vs {libm}"
            );
        }
    }

    #[test]
    fn silu_vector_and_scalar_agree_closely() {
        for i in -200..200 {
            let x = i as f32 * 0.07;
            assert!((v_silu(x) - silu(x)).abs() <= 1e-6 * (1.0 + x.abs()), "{x}");
        }
    }

    #[test]
    fn reduce16_follows_the_tree_order() {
        // 1e8 + 1 is lost in f32 unless the ones meet each other first.
        let mut v = [1.0f32; LANES];
        v[0] = 1e8;
        v[8] = -1e8;
        // lanes 0 and 8 cancel first, so every one counts.
        assert_eq!(reduce16(&v), 14.0);
    }

    #[test]
    fn dot_f16_order_matches_a_plain_dot_on_small_integers() {
        for n in [0, 1, 15, 16, 63, 64, 65, 100, 128, 200] {
            let x: Vec<f32> = (0..n).map(|i| (i % 7) as f32 - 3.0).collect();
            let y: Vec<f32> = (0..n).map(|i| (i % 5) as f32 - 2.0).collect();
            let plain: f32 = x.iter().zip(&y).map(|(a, b)| a * b).sum();
            assert_eq!(dot_f16_order(n, |i| x[i], |i| y[i]), plain, "n = {n}");
        }
    }

    #[test]
    fn dot_f16_order_folds_accumulators_zero_and_two_first() {
        // Accumulators 0 and 2 cancel before the ones are added: all 62 count. A plain
        // running sum loses the ones that meet 1e8.
        let mut x = vec![1.0f32; 64];
        x[0] = 1e8;
        x[32] = -1e8;
        let ones = vec![1.0f32; 64];
        assert_eq!(dot_f16_order(64, |i| x[i], |i| ones[i]), 62.0);
        let plain: f32 = x.iter().sum();
        assert_ne!(plain, 62.0);
    }

    #[test]
    fn rms_norm_row_normalizes() {
        let x = [3.0f32, 4.0, 0.0, 0.0];
        let mut y = [0.0f32; 4];
        rms_norm_row(&x, &[1.0, 2.0, 1.0, 1.0], 0.0, &mut y);
        // rms = sqrt(25/4) = 2.5
        assert_eq!(y, [1.2, 3.2, 0.0, 0.0]);
    }

    #[test]
    fn rms_norm_row_matches_a_plain_reference_on_odd_sizes() {
        for n in [1, 5, 17, 37, 576, 1001] {
            let x: Vec<f32> = (0..n)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
                .collect();
            let w: Vec<f32> = (0..n).map(|i| 0.5 + (i % 3) as f32 * 0.25).collect();
            let mut y = vec![0.0f32; n];
            rms_norm_row(&x, &w, 1e-5, &mut y);
            let ms = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / n as f64;
            let inv = 1.0 / (ms + 1e-5).sqrt();
            for (i, ((&x, &w), &y)) in x.iter().zip(&w).zip(&y).enumerate() {
                let want = f64::from(x) * inv * f64::from(w);
                assert!(
                    (f64::from(y) - want).abs() <= 1e-6 * (1.0 + want.abs()),
                    "n {n} at {i}"
                );
            }
        }
    }

    #[test]
    fn swiglu_row_uses_the_vector_silu_for_whole_vectors_only() {
        let gate: Vec<f32> = (0..37).map(|i| i as f32 * 0.37 - 6.0).collect();
        let up = vec![1.0f32; 37];
        let mut y = vec![0.0f32; 37];
        swiglu_row(&gate, &up, &mut y);
        for (i, (&y, &g)) in y.iter().zip(&gate).enumerate() {
            let want = if i < 32 { v_silu(g) } else { silu(g) };
            assert_eq!(y, want, "{i}");
        }
    }
}
