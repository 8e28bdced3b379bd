//! 8-bit weights with f32 block scales and optional zero points, in blocks of any power of two
//! from 16 up along `k` (onnxruntime's 8-bit MatMulNBits): `y = x · Wᵀ` for `W` of `n` rows of
//! `k` inputs, in f32 on weights dequantized on the fly, exact up to f32 rounding.
//!
//! Layout ([`Q8Weights`]): row `j` is its `k` bytes (element `q`, value `(q - zero) · scale`),
//! rows one after the other; one f32 scale per block and per row; a zero point per block (a
//! byte, a float, or 128 for all). A quarter of the f32 matrix, read in place by every product.
//!
//! As for the 4-bit weights (`q4f`): few activation rows run a fused dequantize-and-dot per
//! weight row; many rows run the f32 GEMM with the weights dequantized block by block into its
//! packed layout (the panel product is shared with `q4f`). Split over output features on the
//! current intra-op pool.

use super::error_at;
use super::q4f::{finish_rows, panel_product_with, split_rows, PANEL_MIN_ROWS};
use super::OutPtr;
use crate::kernels::gemm::Epilogue;
use crate::kernels::KernelResult;

/// The zero points of a [`Q8Weights`], one per block, row after row.
#[derive(Clone, Copy, Debug)]
pub enum Q8Zeros<'a> {
    /// 128 for every block (symmetric quantization).
    Default,
    /// Bytes.
    Int(&'a [u8]),
    /// Floats.
    Float(&'a [f32]),
}

/// An 8-bit weight matrix (see the module docs), borrowed.
#[derive(Clone, Copy, Debug)]
pub struct Q8Weights<'a> {
    n: usize,
    k: usize,
    block_size: usize,
    n_blocks: usize,
    qs: &'a [u8],
    scales: &'a [f32],
    zeros: Q8Zeros<'a>,
}

impl<'a> Q8Weights<'a> {
    /// Checks the sizes: `block_size` a power of two of at least 16, `qs` of `n · k` bytes, a
    /// scale (and zero point) per block and row.
    pub fn new(
        n: usize,
        k: usize,
        block_size: usize,
        qs: &'a [u8],
        scales: &'a [f32],
        zeros: Q8Zeros<'a>,
    ) -> KernelResult<Self> {
        if block_size < 16 || !block_size.is_power_of_two() {
            return Err(error_at(
                "block size",
                format!("{block_size} is not a power of two of at least 16"),
            ));
        }
        let n_blocks = k.div_ceil(block_size);
        let blocks = n * n_blocks;
        let zero_len = match zeros {
            Q8Zeros::Default => blocks,
            Q8Zeros::Int(z) => z.len(),
            Q8Zeros::Float(z) => z.len(),
        };
        let lens = [
            ("bytes", qs.len(), n * k),
            ("scales", scales.len(), blocks),
            ("zero points", zero_len, blocks),
        ];
        for (what, got, want) in lens {
            if got != want {
                return Err(error_at(
                    what,
                    format!("{got} values for n {n} k {k} block {block_size}, need {want}"),
                ));
            }
        }
        Ok(Q8Weights {
            n,
            k,
            block_size,
            n_blocks,
            qs,
            scales,
            zeros,
        })
    }

    pub fn rows(&self) -> usize {
        self.n
    }

    pub fn cols(&self) -> usize {
        self.k
    }

    /// The (scale, zero) of block `b` of row `j`.
    #[inline(always)]
    fn block(&self, j: usize, b: usize) -> (f32, f32) {
        let at = j * self.n_blocks + b;
        let zero = match self.zeros {
            Q8Zeros::Default => 128.0,
            Q8Zeros::Int(z) => f32::from(z[at]),
            Q8Zeros::Float(z) => z[at],
        };
        (self.scales[at], zero)
    }

    /// Row `j`'s bytes.
    fn row(&self, j: usize) -> &'a [u8] {
        &self.qs[j * self.k..(j + 1) * self.k]
    }

    /// Row `j` dequantized into `out` (`k` values).
    pub fn dequantize_row(&self, j: usize, out: &mut [f32]) {
        dequantize_range(0u8, self, j, 0, &mut out[..self.k]);
    }

    /// Elements `p0..p0 + out.len()` of row `j` (inside the row) dequantized into `out`.
    pub fn dequantize_range(&self, j: usize, p0: usize, out: &mut [f32]) {
        dequantize_range(0u8, self, j, p0, out);
    }

    /// Row `j` dotted with `x` (`k` values).
    pub fn dot_row(&self, j: usize, x: &[f32]) -> f32 {
        let mut v = 0.0;
        dot_row(0u8, self, j, x, &mut v);
        v
    }
}

crate::kernels::simd::multiversion! {
    /// Elements `p0..p0 + out.len()` of row `j` of `w` as f32 values in `out`, block by block
    /// (`T` is unused: the macro wants a type parameter).
    fn dequantize_range<T: Copy>(
        _unit: T,
        w: &Q8Weights<'_>,
        j: usize,
        p0: usize,
        out: &mut [f32],
    ) {
        let row = w.row(j);
        let mut done = 0;
        while done < out.len() {
            let at = p0 + done;
            let b = at / w.block_size;
            let len = ((b + 1) * w.block_size - at).min(out.len() - done);
            let (s, z) = w.block(j, b);
            for (o, &q) in out[done..done + len].iter_mut().zip(&row[at..at + len]) {
                *o = (f32::from(q) - z) * s;
            }
            done += len;
        }
    }
}

/// Lanes of the partial sums of [`dot_row`] (one vector's worth; the compiler keeps them in
/// registers).
const LANES: usize = 16;

crate::kernels::simd::multiversion! {
    /// Row `j` of `w` dotted with `x` into `out`: per block, `scale · Σ (q - zero) · x` over
    /// lane-wise partial sums (`T` is unused: the macro wants a type parameter).
    fn dot_row<T: Copy>(_unit: T, w: &Q8Weights<'_>, j: usize, x: &[f32], out: &mut f32) {
        let row = w.row(j);
        let mut total = 0.0f32;
        for (b, (q, x)) in row
            .chunks(w.block_size)
            .zip(x[..w.k].chunks(w.block_size))
            .enumerate()
        {
            let (s, z) = w.block(j, b);
            let mut acc = [0.0f32; LANES];
            let (qc, xc) = (q.chunks_exact(LANES), x.chunks_exact(LANES));
            let (q_tail, x_tail) = (qc.remainder(), xc.remainder());
            for (q, x) in qc.zip(xc) {
                for l in 0..LANES {
                    acc[l] += (f32::from(q[l]) - z) * x[l];
                }
            }
            let tail: f32 = q_tail
                .iter()
                .zip(x_tail)
                .map(|(&q, &x)| (f32::from(q) - z) * x)
                .sum();
            total += s * (acc.iter().sum::<f32>() + tail);
        }
        *out = total;
    }
}

/// `y = x · Wᵀ`: `x` is `m × k` row-major, `y` `m × n` row-major, on up to `threads` threads of
/// the current intra-op pool.
pub fn q8_matmul(
    w: &Q8Weights<'_>,
    x: &[f32],
    m: usize,
    y: &mut [f32],
    threads: usize,
) -> KernelResult<()> {
    q8_matmul_fused(w, x, m, y, threads, None)
}

/// [`q8_matmul`] with an epilogue on Y's rows, as [`super::q4_matmul_fused`].
pub fn q8_matmul_fused(
    w: &Q8Weights<'_>,
    x: &[f32],
    m: usize,
    y: &mut [f32],
    threads: usize,
    epilogue: Option<&Epilogue<'_, f32>>,
) -> KernelResult<()> {
    let (n, k) = (w.n, w.k);
    super::check_len("x", m.saturating_mul(k), x.len())?;
    super::check_len("y", m.saturating_mul(n), y.len())?;
    if m == 0 {
        return Ok(());
    }
    if m >= PANEL_MIN_ROWS {
        return panel_product_with(n, k, x, m, y, threads, epilogue, |j, p0, out| {
            w.dequantize_range(j, p0, out)
        });
    }
    let out = OutPtr(y.as_mut_ptr());
    split_rows(n, k, threads, (1, 3), |j0, j1| {
        for j in j0..j1 {
            for i in 0..m {
                let v = w.dot_row(j, &x[i * k..(i + 1) * k]);
                // SAFETY: (i, j) is inside y (lengths checked) and row j belongs to this task
                // only.
                unsafe { out.write(i * n + j, v) };
            }
        }
    });
    finish_rows(y, n, epilogue);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Weights, scales and zero points of every kind, against the product of the dequantized
    /// matrix computed in f64, for decode-sized and prefill-sized activations.
    #[test]
    fn products_match_the_dequantized_matrix_for_every_block_size_and_zero_point_kind() {
        for block in [16usize, 32, 128] {
            // 290 x 520: several column blocks, depth blocks starting inside a weight block.
            for (n, k) in [(3usize, 48usize), (37, 200), (290, 520)] {
                let nb = k.div_ceil(block);
                let qs: Vec<u8> = (0..n * k).map(|i| (i * 97 % 256) as u8).collect();
                let scales: Vec<f32> = (0..n * nb).map(|i| 0.01 + i as f32 * 1e-3).collect();
                let zi: Vec<u8> = (0..n * nb).map(|i| (i * 31 % 256) as u8).collect();
                let zf: Vec<f32> = (0..n * nb).map(|i| (i * 53 % 2560) as f32 / 10.0).collect();
                for zeros in [Q8Zeros::Default, Q8Zeros::Int(&zi), Q8Zeros::Float(&zf)] {
                    let w = Q8Weights::new(n, k, block, &qs, &scales, zeros).unwrap();
                    let mut dense = vec![0.0f32; n * k];
                    for j in 0..n {
                        w.dequantize_row(j, &mut dense[j * k..(j + 1) * k]);
                        for kk in 0..k {
                            let at = j * nb + kk / block;
                            let z = match zeros {
                                Q8Zeros::Default => 128.0,
                                Q8Zeros::Int(z) => f32::from(z[at]),
                                Q8Zeros::Float(z) => z[at],
                            };
                            let want = (f32::from(qs[j * k + kk]) - z) * scales[at];
                            assert_eq!(dense[j * k + kk], want, "block {block} ({j}, {kk})");
                        }
                    }
                    for m in [1usize, 2, 9] {
                        let x: Vec<f32> = (0..m * k)
                            .map(|i| ((i * 7919) % 201) as f32 / 100.0 - 1.0)
                            .collect();
                        for threads in [1, 2] {
                            let mut y = vec![0.0f32; m * n];
                            q8_matmul(&w, &x, m, &mut y, threads).unwrap();
                            for i in 0..m {
                                for j in 0..n {
                                    let pairs = x[i * k..(i + 1) * k]
                                        .iter()
                                        .zip(&dense[j * k..(j + 1) * k]);
                                    let (want, mag) =
                                        pairs.fold((0.0f64, 0.0f64), |(s, a), (&x, &w)| {
                                            let p = f64::from(x) * f64::from(w);
                                            (s + p, a + p.abs())
                                        });
                                    let got = f64::from(y[i * n + j]);
                                    assert!(
                                        (got - want).abs() <= mag * 1e-5 + 1e-6,
                                        "block {block} m {m} ({i}, {j}): {got} vs {want}"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn wrong_sizes_are_errors() {
        let qs = [0u8; 64];
        let s = [1.0f32; 2];
        assert!(Q8Weights::new(2, 32, 32, &qs, &s, Q8Zeros::Default).is_ok());
        assert!(Q8Weights::new(2, 32, 24, &qs, &s, Q8Zeros::Default).is_err());
        assert!(Q8Weights::new(2, 31, 32, &qs, &s, Q8Zeros::Default).is_err());
        assert!(Q8Weights::new(2, 32, 32, &qs, &s[..1], Q8Zeros::Default).is_err());
        assert!(Q8Weights::new(2, 32, 32, &qs, &s, Q8Zeros::Int(&[0u8; 3])).is_err());
        let mut y = [0.0f32; 2];
        let w = Q8Weights::new(2, 32, 32, &qs, &s, Q8Zeros::Default).unwrap();
        assert!(q8_matmul(&w, &[0.0; 31], 1, &mut y, 1).is_err());
    }
}
