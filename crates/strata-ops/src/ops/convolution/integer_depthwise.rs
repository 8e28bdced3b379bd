//! Depthwise integer convolution (one input and one output channel per group), direct: each
//! channel's centered input is copied once into a zero-padded i32 plane, split by column phase
//! for strided kernels so every tap reads a contiguous run, and each tap adds `plane · weight`
//! to a row of i32 sums in a loop the compiler vectorizes (compiled for AVX-512 and AVX2 too).
//! The sums are requantized (or stored) through the GEMM's write-back. Channels are spread over
//! the intra-op pool.

use std::cell::RefCell;

use crate::kernels::igemm::{write_line, Dest, Epilogue, IntSlice};

/// A depthwise convolution's 2-D geometry (a 1-D one has height 1).
#[derive(Debug, Clone, Copy)]
pub(crate) struct DepthwiseGeometry {
    pub batch: usize,
    pub channels: usize,
    pub in_hw: (usize, usize),
    pub out_hw: (usize, usize),
    pub kernel: (usize, usize),
    pub stride: (usize, usize),
    pub dilation: (usize, usize),
    pub pad: (usize, usize),
}

impl DepthwiseGeometry {
    fn pixels(&self) -> usize {
        self.out_hw.0 * self.out_hw.1
    }

    /// Rows and columns of the padded plane the outputs read.
    fn padded(&self) -> (usize, usize) {
        let ((oh, ow), (kh, kw)) = (self.out_hw, self.kernel);
        let ((sh, sw), (dh, dw)) = (self.stride, self.dilation);
        (
            (oh.max(1) - 1) * sh + (kh.max(1) - 1) * dh + 1,
            (ow.max(1) - 1) * sw + (kw.max(1) - 1) * dw + 1,
        )
    }

    /// Columns of one phase of the padded plane.
    fn phase_width(&self) -> usize {
        self.padded().1.div_ceil(self.stride.1.max(1))
    }
}

thread_local! {
    static BUFFERS: RefCell<(Vec<i32>, Vec<i32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Runs `f` with this thread's plane and sum buffers (`plane` and `sums` long), or temporary
/// ones should they be in use.
fn with_buffers<R>(plane: usize, sums: usize, f: impl FnOnce(&mut [i32], &mut [i32]) -> R) -> R {
    let mut f = Some(f);
    let reused = BUFFERS.try_with(|cell| {
        let mut buffers = cell.try_borrow_mut().ok()?;
        let (p, s) = &mut *buffers;
        if p.len() < plane {
            p.resize(plane, 0);
        }
        if s.len() < sums {
            s.resize(sums, 0);
        }
        let f = f.take()?;
        Some(f(&mut p[..plane], &mut s[..sums]))
    });
    if let Ok(Some(result)) = reused {
        return result;
    }
    let (mut p, mut s) = (vec![0; plane], vec![0; sums]);
    match f.take() {
        Some(f) => f(&mut p, &mut s),
        None => unreachable!("`f` is only taken on the path that returns its result"),
    }
}

/// `conv(x - x_zero, w - w_zero)` per channel, through `epilogue` into `dest` (NCHW).
#[allow(clippy::too_many_arguments)]
pub(crate) fn depthwise(
    g: &DepthwiseGeometry,
    x: IntSlice<'_>,
    x_zero: i32,
    w: IntSlice<'_>,
    w_zero: &[i32],
    epilogue: &Epilogue<'_>,
    dest: Dest<'_>,
    threads: usize,
) {
    let pixels = g.pixels();
    let planes = g.batch * g.channels;
    if pixels == 0 || planes == 0 {
        return;
    }
    let (ph, _) = g.padded();
    let plane_len = ph * g.phase_width() * g.stride.1.max(1);
    let taps = g.kernel.0 * g.kernel.1;
    let one = |index: usize, out: Dest<'_>| {
        let c = index % g.channels;
        let n = index / g.channels;
        let zw = if w_zero.len() == 1 {
            w_zero[0]
        } else {
            w_zero[c]
        };
        let (h, wd) = g.in_hw;
        let base = (n * g.channels + c) * h * wd;
        with_buffers(plane_len, pixels, |plane, sums| {
            match x {
                IntSlice::U8(s) => fill_plane(g, &s[base..base + h * wd], x_zero, plane),
                IntSlice::I8(s) => fill_plane(g, &s[base..base + h * wd], x_zero, plane),
            }
            let mut weights = [0i32; 64];
            let weights: &mut [i32] = if taps <= 64 {
                &mut weights[..taps]
            } else {
                unreachable!("kernels over 64 taps take the GEMM path")
            };
            for (t, wt) in weights.iter_mut().enumerate() {
                *wt = match w {
                    IntSlice::U8(s) => i32::from(s[c * taps + t]) - zw,
                    IntSlice::I8(s) => i32::from(s[c * taps + t]) - zw,
                };
            }
            accumulate((), g, plane, weights, sums);
            let mut out = out;
            write_line(sums, c, epilogue, &mut out, 0);
        });
    };
    // Small convolutions stay on the calling thread. Otherwise each pool thread takes a fixed
    // run of planes (the same on every call, so each thread's buffers are sized once).
    let parts = if pixels * taps * planes >= 1 << 16 {
        threads.min(crate::parallel::threads()).min(planes).max(1)
    } else {
        1
    };
    let per_part = planes.div_ceil(parts);
    macro_rules! spread {
        ($d:expr, $variant:ident) => {{
            let d = $d;
            if parts == 1 {
                for (i, chunk) in d.chunks_mut(pixels).enumerate().take(planes) {
                    one(i, Dest::$variant(chunk));
                }
            } else {
                let base = SharedPlanes(d.as_mut_ptr());
                crate::parallel::for_each_thread(parts, |part| {
                    let first = part * per_part;
                    let last = ((part + 1) * per_part).min(planes);
                    for i in first..last {
                        // SAFETY: `d` holds `planes * pixels` elements and is borrowed mutably
                        // for this whole call; plane `i` belongs to exactly one part.
                        let plane = unsafe { base.plane(i, pixels) };
                        one(i, Dest::$variant(plane));
                    }
                });
            }
        }};
    }
    match dest {
        Dest::I32(d) => spread!(&mut d[..planes * pixels], I32),
        Dest::U8(d) => spread!(&mut d[..planes * pixels], U8),
        Dest::I8(d) => spread!(&mut d[..planes * pixels], I8),
        Dest::F32(d) => spread!(&mut d[..planes * pixels], F32),
    }
}

/// The output's storage, shared by the threads that each write their own planes.
#[derive(Clone, Copy)]
struct SharedPlanes<T>(*mut T);
// SAFETY: the threads write disjoint planes of one live slice; the elements are plain numbers.
unsafe impl<T: Send> Send for SharedPlanes<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for SharedPlanes<T> {}

impl<T> SharedPlanes<T> {
    /// Plane `index` of `len` elements.
    ///
    /// # Safety
    /// The pointer is to a live slice holding plane `index` whole, and no other reference to
    /// that plane exists while the returned one does.
    #[allow(clippy::mut_from_ref)]
    unsafe fn plane(&self, index: usize, len: usize) -> &mut [T] {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(index * len), len) }
    }
}

/// Copies one channel's centered input into `plane`: phase `r` of the padded plane (its
/// columns `r, r + sw, ...`) at `r * rows * phase_width`, zero where the window is padding.
fn fill_plane<X: Copy + Into<i32>>(g: &DepthwiseGeometry, x: &[X], x_zero: i32, plane: &mut [i32]) {
    let (h, w) = g.in_hw;
    let (rows, cols) = g.padded();
    let (pt, pl) = g.pad;
    let sw = g.stride.1.max(1);
    let qw = g.phase_width();
    plane.fill(0);
    for py in 0..rows {
        let iy = py.wrapping_sub(pt);
        if iy >= h {
            continue;
        }
        let src = &x[iy * w..(iy + 1) * w];
        let end = (pl + w).min(cols);
        for r in 0..sw {
            let dst = &mut plane[(r * rows + py) * qw..(r * rows + py + 1) * qw];
            // Phase columns q whose padded column q * sw + r lies in pl..end.
            let q0 = pl.saturating_sub(r).div_ceil(sw);
            let q1 = end.saturating_sub(r).div_ceil(sw).min(qw);
            if q0 >= q1 {
                continue;
            }
            let first = q0 * sw + r - pl;
            if sw == 1 {
                for (d, &v) in dst[q0..q1].iter_mut().zip(&src[first..]) {
                    *d = v.into() - x_zero;
                }
            } else {
                let run = src[first..].iter().step_by(sw);
                for (d, &v) in dst[q0..q1].iter_mut().zip(run) {
                    *d = v.into() - x_zero;
                }
            }
        }
    }
}

crate::kernels::simd::multiversion! {
    /// `sums[oy][ox] = Σ_taps plane[oy·sh + ky·dh][ox·sw + kx·dw] · w[ky][kx]` (`T` is
    /// unused: the macro wants a type parameter).
    fn accumulate<T: Copy>(
        _unit: T,
        g: &DepthwiseGeometry,
        plane: &[i32],
        weights: &[i32],
        sums: &mut [i32],
    ) {
        let ((oh, ow), (kh, kw)) = (g.out_hw, g.kernel);
        let ((sh, sw), (dh, dw)) = (g.stride, g.dilation);
        let sw = sw.max(1);
        let (rows, _) = g.padded();
        let qw = g.phase_width();
        for oy in 0..oh {
            let row = &mut sums[oy * ow..(oy + 1) * ow];
            row.fill(0);
            for ky in 0..kh {
                let py = oy * sh + ky * dh;
                for kx in 0..kw {
                    let wt = weights[ky * kw + kx];
                    let shift = kx * dw;
                    let (r, q) = (shift % sw, shift / sw);
                    let start = (r * rows + py) * qw + q;
                    let src = &plane[start..start + ow];
                    for (s, &v) in row.iter_mut().zip(src) {
                        *s = s.wrapping_add(v.wrapping_mul(wt));
                    }
                }
            }
        }
    }
}
