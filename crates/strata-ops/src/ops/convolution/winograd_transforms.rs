//! The transform matrices of Winograd's minimal filtering algorithms F(2x2, 3x3) and F(4x4, 3x3)
//! (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2016): `G` for the
//! kernel, `Bᵀ` for the input tile and `Aᵀ` for the output tile, `Y = Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d
//! B)] A`. The band schedule, products and epilogue around them are shared (`winograd.rs`).
//!
//! `Bᵀ` and `Aᵀ` are written out as sums over `N` values at once (tiles for the input, channels
//! for the output), so they vectorize; they take their operands by reference and write their
//! results in place, so that neither a column of a tile nor a result is copied (arrays built
//! and returned by value were `memcpy` calls). `G` runs once per weight, in f64.

/// Channels per vector step of the output transform.
pub(crate) const LANES: usize = 16;

/// One transform's arithmetic on `ALPHA`-point input tiles giving `TILE`-point output tiles
/// (`ALPHA = TILE + 2` for a 3x3 kernel).
pub(crate) trait Transforms<const ALPHA: usize, const TILE: usize> {
    /// `G` (ALPHA x 3).
    const G: [[f64; 3]; ALPHA];
    /// `o = Bᵀ z` for the `ALPHA` values `z` of each of `N` lanes.
    fn bt<const N: usize>(z: [&[f32; N]; ALPHA], o: &mut [[f32; N]; ALPHA]);
    /// `o = Aᵀ z` for the `ALPHA` values `z` of each of `N` lanes.
    fn at<const N: usize>(z: [&[f32; N]; ALPHA], o: &mut [[f32; N]; TILE]);
}

/// F(2x2, 3x3): 4x4 input tiles, 16 products, 2x2 outputs. Transformed weights are 16/9 of the
/// original and the transforms only add, so it is the tighter numerically of the two.
#[derive(Debug, Clone, Copy)]
pub(crate) struct F2x2;

/// F(4x4, 3x3): 6x6 input tiles, 36 products, 4x4 outputs. Fewer multiplies per output (2.25
/// against 4), at weights 4x the original.
#[derive(Debug, Clone, Copy)]
pub(crate) struct F4x4;

impl Transforms<4, 2> for F2x2 {
    const G: [[f64; 3]; 4] = [
        [1.0, 0.0, 0.0],
        [0.5, 0.5, 0.5],
        [0.5, -0.5, 0.5],
        [0.0, 0.0, 1.0],
    ];

    #[inline(always)]
    fn bt<const N: usize>(z: [&[f32; N]; 4], o: &mut [[f32; N]; 4]) {
        for l in 0..N {
            let [z0, z1, z2, z3] = [z[0][l], z[1][l], z[2][l], z[3][l]];
            o[0][l] = z0 - z2;
            o[1][l] = z1 + z2;
            o[2][l] = z2 - z1;
            o[3][l] = z1 - z3;
        }
    }

    #[inline(always)]
    fn at<const N: usize>(z: [&[f32; N]; 4], o: &mut [[f32; N]; 2]) {
        for l in 0..N {
            let [z0, z1, z2, z3] = [z[0][l], z[1][l], z[2][l], z[3][l]];
            o[0][l] = z0 + z1 + z2;
            o[1][l] = z1 - z2 - z3;
        }
    }
}

impl Transforms<6, 4> for F4x4 {
    const G: [[f64; 3]; 6] = [
        [1.0 / 4.0, 0.0, 0.0],
        [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
        [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
        [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
        [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
        [0.0, 0.0, 1.0],
    ];

    #[inline(always)]
    fn bt<const N: usize>(z: [&[f32; N]; 6], o: &mut [[f32; N]; 6]) {
        for l in 0..N {
            let [z0, z1, z2, z3, z4, z5] = [z[0][l], z[1][l], z[2][l], z[3][l], z[4][l], z[5][l]];
            o[0][l] = 4.0 * z0 - 5.0 * z2 + z4;
            o[1][l] = -4.0 * z1 - 4.0 * z2 + z3 + z4;
            o[2][l] = 4.0 * z1 - 4.0 * z2 - z3 + z4;
            o[3][l] = -2.0 * z1 - z2 + 2.0 * z3 + z4;
            o[4][l] = 2.0 * z1 - z2 - 2.0 * z3 + z4;
            o[5][l] = 4.0 * z1 - 5.0 * z3 + z5;
        }
    }

    #[inline(always)]
    fn at<const N: usize>(z: [&[f32; N]; 6], o: &mut [[f32; N]; 4]) {
        for l in 0..N {
            let [z0, z1, z2, z3, z4, z5] = [z[0][l], z[1][l], z[2][l], z[3][l], z[4][l], z[5][l]];
            o[0][l] = z0 + z1 + z2 + z3 + z4;
            o[1][l] = z1 - z2 + 2.0 * z3 - 2.0 * z4;
            o[2][l] = z1 + z2 + 4.0 * z3 + 4.0 * z4;
            o[3][l] = z1 - z2 + 8.0 * z3 - 8.0 * z4 + z5;
        }
    }
}

/// `G g Gᵀ` of one 3x3 kernel `g` (row-major), in f64.
pub(crate) fn kernel_transform<const ALPHA: usize>(
    gm: &[[f64; 3]; ALPHA],
    g: &[f32],
) -> [[f64; ALPHA]; ALPHA] {
    let mut gg = [[0.0f64; 3]; ALPHA]; // G g
    for (i, row) in gg.iter_mut().enumerate() {
        for (j, v) in row.iter_mut().enumerate() {
            *v = (0..3).map(|k| gm[i][k] * f64::from(g[k * 3 + j])).sum();
        }
    }
    std::array::from_fn(|i| std::array::from_fn(|j| (0..3).map(|k| gg[i][k] * gm[j][k]).sum()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One tile through the three transforms (a single lane) against the direct 3x3
    /// correlation of the same `ALPHA x ALPHA` input: `Aᵀ[(G g Gᵀ) ⊙ (Bᵀ d B)]A`.
    fn check<const ALPHA: usize, const TILE: usize, V: Transforms<ALPHA, TILE>>() {
        for seed in 0..20 {
            let value = |i: usize, s: f32| (i as f32 * 0.913 + s + seed as f32).sin() * 2.0;
            let g: Vec<f32> = (0..9).map(|i| value(i, 0.4)).collect();
            let d: Vec<f32> = (0..ALPHA * ALPHA).map(|i| value(i, 1.7)).collect();
            let u = kernel_transform(&V::G, &g);
            // Bᵀ d B: rows, then columns, as the band transform does (one lane).
            let mut rows = [[[0.0f32; 1]; ALPHA]; ALPHA];
            for (r, out) in rows.iter_mut().enumerate() {
                let row: [[f32; 1]; ALPHA] = std::array::from_fn(|k| [d[r * ALPHA + k]]);
                V::bt(row.each_ref(), out);
            }
            let mut v = [[[0.0f32; 1]; ALPHA]; ALPHA];
            for (j, out) in v.iter_mut().enumerate() {
                V::bt(std::array::from_fn(|r| &rows[r][j]), out);
            }
            // v[j][i] is position (i, j); the product, then Aᵀ along j and along i.
            let m: [[[f32; 1]; ALPHA]; ALPHA] = std::array::from_fn(|i| {
                std::array::from_fn(|j| [(u[i][j] * f64::from(v[j][i][0])) as f32])
            });
            let mut s = [[[0.0f32; 1]; TILE]; ALPHA];
            for (i, out) in s.iter_mut().enumerate() {
                V::at(m[i].each_ref(), out);
            }
            let scale = d.iter().fold(0.0f32, |a, x| a.max(x.abs()))
                * g.iter().fold(0.0f32, |a, x| a.max(x.abs()));
            for q in 0..TILE {
                let mut y = [[0.0f32; 1]; TILE];
                V::at(std::array::from_fn(|i| &s[i][q]), &mut y);
                for (p, yp) in y.iter().enumerate() {
                    let direct: f32 = (0..3)
                        .flat_map(|a| (0..3).map(move |b| (a, b)))
                        .map(|(a, b)| g[a * 3 + b] * d[(p + a) * ALPHA + q + b])
                        .sum();
                    assert!(
                        (yp[0] - direct).abs() <= 1e-5 * scale * 9.0,
                        "F({TILE}x{TILE}) seed {seed}: output ({p}, {q}) {} vs {direct}",
                        yp[0]
                    );
                }
            }
        }
    }

    #[test]
    fn f2x2_reproduces_the_direct_3x3() {
        check::<4, 2, F2x2>();
    }

    #[test]
    fn f4x4_reproduces_the_direct_3x3() {
        check::<6, 4, F4x4>();
    }
}
