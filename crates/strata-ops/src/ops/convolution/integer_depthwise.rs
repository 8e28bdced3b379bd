//! Depthwise integer convolution (one input and one output channel per group), direct: each
//! channel's centered input is copied once into a zero-padded i32 plane whose rows are split by
//! the vertical stride's phase, so that for every tap the whole output plane — computed at the
//! plane's row pitch and at every column, the columns between strided outputs and past the
//! output width dropped afterwards — reads one contiguous run. Each tap is then one long
//! `sums += run · weight` loop the compiler vectorizes (compiled for AVX-512 and AVX2 too),
//! whatever the output width: 7-wide planes vectorize as well as 112-wide ones, and the plane
//! is filled by contiguous row copies. The sums are requantized (or stored) through the GEMM's
//! write-back. Channels are spread over the intra-op pool.

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

    /// Rows of one row phase of the padded plane.
    fn phase_rows(&self) -> usize {
        self.padded().0.div_ceil(self.stride.0.max(1))
    }

    /// Where padded position `(py, pc)` lives in the plane: row phase `py % sh`, then row
    /// `py / sh` of the padded width, column `pc`.
    fn at(&self, py: usize, pc: usize) -> usize {
        let sh = self.stride.0.max(1);
        ((py % sh) * self.phase_rows() + py / sh) * self.padded().1 + pc
    }

    /// Elements of the whole phase-split plane.
    fn plane_len(&self) -> usize {
        self.stride.0.max(1) * self.phase_rows() * self.padded().1
    }

    /// Sums computed per tap: output rows at the plane's row pitch, each at every column up to
    /// the last strided output.
    fn pitched_len(&self) -> usize {
        let (oh, ow) = self.out_hw;
        (oh.max(1) - 1) * self.padded().1 + (ow.max(1) - 1) * self.stride.1.max(1) + 1
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
    let plane_len = g.plane_len();
    let taps = g.kernel.0 * g.kernel.1;
    if taps > MAX_TAPS {
        unreachable!("kernels over {MAX_TAPS} taps take the GEMM path");
    }
    // Where each tap's run starts in the plane: output (oy, ox) reads padded position
    // (oy·sh + ky·dh, ox·sw + kx·dw), at start(ky, kx) + oy · pitch + ox · sw.
    let mut starts = [0usize; MAX_TAPS];
    for ky in 0..g.kernel.0 {
        for kx in 0..g.kernel.1 {
            starts[ky * g.kernel.1 + kx] = g.at(ky * g.dilation.0, kx * g.dilation.1);
        }
    }
    let starts = &starts[..taps];
    let (pitch, sw) = (g.padded().1, g.stride.1.max(1));
    let pitched = g.pitched_len();
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
        with_buffers(plane_len, pitched, |plane, sums| {
            match x {
                IntSlice::U8(s) => fill_plane(g, &s[base..base + h * wd], x_zero, plane),
                IntSlice::I8(s) => fill_plane(g, &s[base..base + h * wd], x_zero, plane),
            }
            let mut weights = [0i32; MAX_TAPS];
            let weights = &mut weights[..taps];
            for (t, wt) in weights.iter_mut().enumerate() {
                *wt = match w {
                    IntSlice::U8(s) => i32::from(s[c * taps + t]) - zw,
                    IntSlice::I8(s) => i32::from(s[c * taps + t]) - zw,
                };
            }
            accumulate((), plane, starts, weights, sums);
            // Keep the strided outputs: (oy, ox) moves from oy · pitch + ox · sw to oy · ow +
            // ox, never past a value still to be read.
            let (oh, ow) = g.out_hw;
            if sw == 1 {
                for oy in 1..oh {
                    sums.copy_within(oy * pitch..oy * pitch + ow, oy * ow);
                }
            } else {
                for oy in 0..oh {
                    for ox in 0..ow {
                        sums[oy * ow + ox] = sums[oy * pitch + ox * sw];
                    }
                }
            }
            let mut out = out;
            write_line(&sums[..pixels], c, epilogue, &mut out, 0);
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

/// Copies one channel's centered input into `plane` (laid out by [`DepthwiseGeometry::at`]),
/// zero where the window is padding.
fn fill_plane<X: Copy + Into<i32>>(g: &DepthwiseGeometry, x: &[X], x_zero: i32, plane: &mut [i32]) {
    let (h, w) = g.in_hw;
    let (rows, cols) = g.padded();
    let (pt, pl) = g.pad;
    let (sh, rows_p) = (g.stride.0.max(1), g.phase_rows());
    let run = w.min(cols.saturating_sub(pl));
    plane.fill(0);
    for ry in 0..sh {
        for rr in 0..rows_p {
            let py = rr * sh + ry;
            let iy = py.wrapping_sub(pt);
            if py >= rows || iy >= h || run == 0 {
                continue;
            }
            let start = (ry * rows_p + rr) * cols + pl;
            for (d, &v) in plane[start..start + run].iter_mut().zip(&x[iy * w..]) {
                *d = v.into() - x_zero;
            }
        }
    }
}

/// Taps a depthwise kernel may have.
const MAX_TAPS: usize = 64;

crate::kernels::simd::multiversion! {
    /// `sums[i] = Σ_t plane[starts[t] + i] · weights[t]` over the first `sums.len()` sums (`T`
    /// is unused: the macro wants a type parameter).
    fn accumulate<T: Copy>(
        _unit: T,
        plane: &[i32],
        starts: &[usize],
        weights: &[i32],
        sums: &mut [i32],
    ) {
        // A strip of sums at a time, so it stays in L1 while every tap adds to it.
        const STRIP: usize = 1024;
        for (strip, sums) in sums.chunks_mut(STRIP).enumerate() {
            let (offset, len) = (strip * STRIP, sums.len());
            for (t, (&start, &wt)) in starts.iter().zip(weights).enumerate() {
                let src = &plane[start + offset..start + offset + len];
                if t == 0 {
                    for (s, &v) in sums.iter_mut().zip(src) {
                        *s = v.wrapping_mul(wt);
                    }
                } else {
                    for (s, &v) in sums.iter_mut().zip(src) {
                        *s = s.wrapping_add(v.wrapping_mul(wt));
                    }
                }
            }
        }
    }
}
