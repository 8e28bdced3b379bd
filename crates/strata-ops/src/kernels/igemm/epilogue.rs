//! The write-back of an integer product: raw tile sums corrected for the zero points, plus an
//! int32 bias, then stored as int32, requantized to u8/i8 (per-tensor or per-column scale,
//! rounding half to even, saturating) or scaled to f32 (plus an f32 bias).

/// Where C goes: element `(i, j)` at `index = i * rs + j * cs`.
#[derive(Debug)]
pub struct OutMat<'a> {
    pub dest: Dest<'a>,
    pub rs: usize,
    pub cs: usize,
}

/// C's storage and element type.
#[derive(Debug)]
pub enum Dest<'a> {
    I32(&'a mut [i32]),
    U8(&'a mut [u8]),
    I8(&'a mut [i8]),
    F32(&'a mut [f32]),
}

impl Dest<'_> {
    /// Elements `start..start + len` as a destination of their own.
    pub fn sub(&mut self, start: usize, len: usize) -> Dest<'_> {
        match self {
            Dest::I32(s) => Dest::I32(&mut s[start..start + len]),
            Dest::U8(s) => Dest::U8(&mut s[start..start + len]),
            Dest::I8(s) => Dest::I8(&mut s[start..start + len]),
            Dest::F32(s) => Dest::F32(&mut s[start..start + len]),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Dest::I32(s) => s.len(),
            Dest::U8(s) => s.len(),
            Dest::I8(s) => s.len(),
            Dest::F32(s) => s.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The storage as a raw pointer the workers write disjoint elements through.
    pub(super) fn raw(&mut self) -> RawDest {
        match self {
            Dest::I32(s) => RawDest::I32(s.as_mut_ptr()),
            Dest::U8(s) => RawDest::U8(s.as_mut_ptr()),
            Dest::I8(s) => RawDest::I8(s.as_mut_ptr()),
            Dest::F32(s) => RawDest::F32(s.as_mut_ptr()),
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub(super) enum RawDest {
    I32(*mut i32),
    U8(*mut u8),
    I8(*mut i8),
    F32(*mut f32),
}

// SAFETY: a `RawDest` is shared by the workers of one product only, each writing a disjoint
// set of C's elements (the driver hands out disjoint tiles); the pointees are plain numbers.
unsafe impl Send for RawDest {}
// SAFETY: as above.
unsafe impl Sync for RawDest {}

/// The scale from the corrected i32 sum to the output's real value, for u8/i8/f32 outputs.
#[derive(Clone, Copy, Debug)]
pub struct Requant<'a> {
    /// One multiplier per column (or one for all), applied as `acc as f32 * col[j]`.
    pub col: &'a [f32],
    /// When set, the multiplier is `(row[i] * col[j]) / divisor` instead (per-row A scales).
    pub row: Option<(&'a [f32], f32)>,
}

impl Requant<'_> {
    #[inline(always)]
    fn multiplier(&self, i: usize, j: usize) -> f32 {
        let col = if self.col.len() == 1 {
            self.col[0]
        } else {
            self.col[j]
        };
        match self.row {
            None => col,
            Some((row, divisor)) => {
                let r = if row.len() == 1 { row[0] } else { row[i] };
                (r * col) / divisor
            }
        }
    }
}

/// What is done to each corrected sum before it is stored.
#[derive(Clone, Copy, Debug, Default)]
pub struct Epilogue<'a> {
    /// Added to the i32 sum (one per column), before any scaling (QLinearConv's bias).
    pub bias_i32: Option<&'a [i32]>,
    /// Scaling for u8/i8/f32 outputs (required for those).
    pub scale: Option<Requant<'a>>,
    /// Output zero point for u8/i8 outputs.
    pub zero_point: i32,
    /// Added after scaling for f32 outputs (one per column).
    pub bias_f32: Option<&'a [f32]>,
}

/// The per-tile facts the write-back needs besides the raw sums.
pub(super) struct TileCorrection<'a> {
    pub depth: i32,
    /// A's zero point per row (or one), in A's own domain, and what packing added to A.
    pub a_zero: &'a [i32],
    pub a_shift: i32,
    /// B's zero point per column (or one), in B's own domain, and what packing added to B.
    pub b_zero: &'a [i32],
    pub b_shift: i32,
    /// Packed A's row sums for this tile's rows.
    pub row_sums: &'a [i32],
    /// Packed B's column sums (all columns).
    pub col_sums: &'a [i32],
}

#[inline(always)]
fn pick(values: &[i32], index: usize) -> i32 {
    if values.len() == 1 {
        values[0]
    } else {
        values[index]
    }
}

/// `x` rounded half to even, for |x| up to 2^22 (larger values are clamped there first, which
/// no 8-bit result can tell apart). Adding and subtracting 1.5 · 2^23 rounds in the FPU's
/// default mode, without the library call `round_ties_even` becomes on baseline x86_64.
#[inline(always)]
pub fn round_half_even(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    (x.clamp(-4_194_304.0, 4_194_304.0) + MAGIC) - MAGIC
}

#[inline(always)]
fn quantize(value: f32, zero_point: i32, lo: f32, hi: f32) -> f32 {
    // NaN (from a NaN scale) clamps to nothing in particular; `as` then gives 0.
    (round_half_even(value) + zero_point as f32).clamp(lo, hi)
}

/// Writes rows `i0..i0 + rows` by columns `j0..j0 + cols` of C from the raw sums `acc` (row
/// stride [`super::NR`]). Per-column terms (zero-point corrections, bias, multipliers) come
/// from `terms` (the strip's [`strip_terms`], shared by the strip's tiles) or are computed here;
/// the loops run along whichever of C's axes is contiguous.
///
/// # Safety
/// Every element `(i, j)` written is inside C's storage (the driver checked C's extent) and no
/// other thread accesses it during the call.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn write_tile(
    acc: &[i32],
    (i0, rows): (usize, usize),
    (j0, cols): (usize, usize),
    fix: &TileCorrection<'_>,
    epilogue: &Epilogue<'_>,
    dest: RawDest,
    (rs, cs): (usize, usize),
    terms: Option<&ColumnTerms>,
) {
    const NR: usize = super::NR;
    let owned;
    let terms = match terms {
        Some(terms) => Some(terms),
        None => {
            owned = strip_terms(fix, epilogue, dest, (j0, cols));
            owned.as_ref()
        }
    };
    if let Some(terms) = terms {
        let (zero_point, tile) = (epilogue.zero_point, (i0, rows));
        match dest {
            // SAFETY: forwarded caller's contract.
            RawDest::U8(p) => {
                return unsafe {
                    write_tile_scaled(acc, tile, (j0, cols), fix, terms, zero_point, p, (rs, cs))
                }
            }
            // SAFETY: forwarded caller's contract.
            RawDest::I8(p) => {
                return unsafe {
                    write_tile_scaled(acc, tile, (j0, cols), fix, terms, zero_point, p, (rs, cs))
                }
            }
            // SAFETY: forwarded caller's contract.
            RawDest::F32(p) => {
                return unsafe {
                    write_tile_scaled(acc, tile, (j0, cols), fix, terms, zero_point, p, (rs, cs))
                }
            }
            RawDest::I32(_) => {}
        }
    }
    // Per column: the constant term, B's zero point, the multiplier and the float bias.
    let mut col_term = [0i32; NR];
    let mut col_zero = [0i32; NR];
    let mut col_mult = [1f32; NR];
    let mut col_bias = [0f32; NR];
    let row_scaled = epilogue.scale.is_some_and(|s| s.row.is_some());
    for jj in 0..cols {
        let col = j0 + jj;
        let zb = pick(fix.b_zero, col).wrapping_add(fix.b_shift);
        col_zero[jj] = zb;
        col_term[jj] = epilogue.bias_i32.map_or(0, |b| b[col]);
        if let Some(scale) = &epilogue.scale {
            col_mult[jj] = scale.multiplier(0, col);
        }
        col_bias[jj] = epilogue.bias_f32.map_or(0.0, |b| b[col]);
    }
    // The corrected sum of tile element (i, jj):
    // Σ(a-za)(b-zb) = Σab - zb·Σa - za·Σb + K·za·zb (+ bias), wrapping like i32 accumulation.
    let value = |i: usize, jj: usize| -> i32 {
        let za = pick(fix.a_zero, i0 + i).wrapping_add(fix.a_shift);
        let zb = col_zero[jj];
        acc[i * NR + jj]
            .wrapping_sub(zb.wrapping_mul(fix.row_sums[i]))
            .wrapping_sub(za.wrapping_mul(fix.col_sums[j0 + jj]))
            .wrapping_add(fix.depth.wrapping_mul(za).wrapping_mul(zb))
            .wrapping_add(col_term[jj])
    };
    let mult = |i: usize, jj: usize| -> f32 {
        match (row_scaled, &epilogue.scale) {
            (true, Some(s)) => s.multiplier(i0 + i, j0 + jj),
            _ => col_mult[jj],
        }
    };
    macro_rules! store {
        ($p:expr, $convert:expr) => {{
            let p = $p;
            let convert = $convert;
            if cs == 1 {
                for i in 0..rows {
                    let base = (i0 + i) * rs + j0;
                    for jj in 0..cols {
                        // SAFETY: (i0 + i, j0 + jj) is an element of C inside its storage that
                        // only this call writes (the caller's contract).
                        unsafe { *p.add(base + jj) = convert(value(i, jj), i, jj) };
                    }
                }
            } else {
                for jj in 0..cols {
                    let base = i0 * rs + (j0 + jj) * cs;
                    for i in 0..rows {
                        // SAFETY: as above.
                        unsafe { *p.add(base + i * rs) = convert(value(i, jj), i, jj) };
                    }
                }
            }
        }};
    }
    match dest {
        RawDest::I32(p) => store!(p, |v: i32, _, _| v),
        RawDest::U8(p) => store!(p, |v: i32, i, jj| quantize(
            v as f32 * mult(i, jj),
            epilogue.zero_point,
            0.0,
            255.0
        ) as u8),
        RawDest::I8(p) => store!(p, |v: i32, i, jj| quantize(
            v as f32 * mult(i, jj),
            epilogue.zero_point,
            -128.0,
            127.0
        ) as i8),
        RawDest::F32(p) => store!(p, |v: i32, i, jj| v as f32 * mult(i, jj) + col_bias[jj]),
    }
}

/// An 8-bit output type of the requantizing write-back.
pub(crate) trait Narrow: Copy + Default + Send + Sync + 'static {
    const LO: i32;
    const HI: i32;
    /// `v`, already within `LO..=HI`.
    fn narrow(v: i32) -> Self;
}

impl Narrow for u8 {
    const LO: i32 = 0;
    const HI: i32 = 255;
    #[inline(always)]
    fn narrow(v: i32) -> Self {
        v as u8
    }
}

impl Narrow for i8 {
    const LO: i32 = -128;
    const HI: i32 = 127;
    #[inline(always)]
    fn narrow(v: i32) -> Self {
        v as i8
    }
}

/// An output type of the scaling write-back: how a corrected sum becomes an element.
pub(crate) trait Finish: Copy + Default + Send + Sync + 'static {
    /// `v` (zero points and int32 bias applied) times `mult`, then offset by the output zero
    /// point and saturated (8-bit) or plus the float bias (f32).
    fn finish(v: i32, mult: f32, zero_point: i32, bias: f32) -> Self;
}

macro_rules! finish_narrow {
    ($($t:ty),*) => {$(
        impl Finish for $t {
            #[inline(always)]
            fn finish(v: i32, mult: f32, zero_point: i32, _bias: f32) -> Self {
                let q = round_to_i32(v as f32 * mult).wrapping_add(zero_point);
                <$t>::narrow(q.max(<$t>::LO).min(<$t>::HI))
            }
        }
    )*};
}
finish_narrow!(u8, i8);

impl Finish for f32 {
    #[inline(always)]
    fn finish(v: i32, mult: f32, _zero_point: i32, bias: f32) -> Self {
        v as f32 * mult + bias
    }
}

/// `round_half_even(x)` as an integer, for |x| up to 2^22 (clamped there first; NaN goes to
/// the low end). The sum with 1.5 · 2^23 holds the rounded integer in its low mantissa bits,
/// so no float-to-int conversion (and its saturation fix-ups) is needed: the loop vectorizes.
#[inline(always)]
pub(crate) fn round_to_i32(x: f32) -> i32 {
    const MAGIC: f32 = 12_582_912.0;
    // max/min rather than clamp: a NaN becomes the lower bound instead of passing through.
    #[allow(clippy::manual_clamp)]
    let x = x.max(-4_194_304.0).min(4_194_304.0);
    ((x + MAGIC).to_bits() as i32).wrapping_sub(0x4B40_0000)
}

/// Per-column terms of a requantizing write-back, for one strip of columns (shared by every
/// tile of the strip).
pub(super) struct ColumnTerms {
    /// B's zero point (in the packed domain).
    zero: [i32; super::NR],
    /// `depth · zb − Σb`: multiplied by A's zero point.
    a_term: [i32; super::NR],
    /// The int32 bias.
    bias: [i32; super::NR],
    mult: [f32; super::NR],
    /// The float bias (f32 outputs).
    float_bias: [f32; super::NR],
}

crate::kernels::simd::multiversion! {
    /// Scales the tile's rows into `out`, lane by lane along the columns.
    fn requant_rows<T: Finish>(
        acc: &[i32],
        rows: usize,
        row_sums: &[i32],
        row_zero: &[i32; MAX_TILE_ROWS],
        terms: &ColumnTerms,
        zero_point: i32,
        out: &mut [[T; super::NR]; MAX_TILE_ROWS],
    ) {
        const NR: usize = super::NR;
        for i in 0..rows {
            let (sum_a, za) = (row_sums[i], row_zero[i]);
            let row = &acc[i * NR..(i + 1) * NR];
            for j in 0..NR {
                let v = row[j]
                    .wrapping_sub(terms.zero[j].wrapping_mul(sum_a))
                    .wrapping_add(za.wrapping_mul(terms.a_term[j]))
                    .wrapping_add(terms.bias[j]);
                out[i][j] = T::finish(v, terms.mult[j], zero_point, terms.float_bias[j]);
            }
        }
    }
}

/// Rows a tile may have (the largest microkernel's `MR`).
const MAX_TILE_ROWS: usize = 8;

/// The per-column terms of columns `j0..j0 + cols` (at most [`super::NR`]) for the scaled
/// write-back, computed once per strip rather than per tile; `None` when the output takes
/// [`write_tile`]'s general path (int32 output or per-row scales).
pub(super) fn strip_terms(
    fix: &TileCorrection<'_>,
    epilogue: &Epilogue<'_>,
    dest: RawDest,
    (j0, cols): (usize, usize),
) -> Option<ColumnTerms> {
    const NR: usize = super::NR;
    if matches!(dest, RawDest::I32(_)) || epilogue.scale.is_some_and(|s| s.row.is_some()) {
        return None;
    }
    let mut terms = ColumnTerms {
        zero: [0; NR],
        a_term: [0; NR],
        bias: [0; NR],
        mult: [0.0; NR],
        float_bias: [0.0; NR],
    };
    for jj in 0..cols {
        let col = j0 + jj;
        let zb = pick(fix.b_zero, col).wrapping_add(fix.b_shift);
        terms.zero[jj] = zb;
        terms.a_term[jj] = fix.depth.wrapping_mul(zb).wrapping_sub(fix.col_sums[col]);
        terms.bias[jj] = epilogue.bias_i32.map_or(0, |b| b[col]);
        terms.mult[jj] = epilogue.scale.map_or(1.0, |s| s.multiplier(0, col));
        terms.float_bias[jj] = epilogue.bias_f32.map_or(0.0, |b| b[col]);
    }
    Some(terms)
}

/// [`write_tile`] for u8/i8/f32 outputs scaled per column (or per tensor): the scaling runs
/// vectorized over a whole tile, then the values are stored along C's contiguous axis.
///
/// # Safety
/// As [`write_tile`]; `p` is C's storage; `terms` are [`strip_terms`] of these columns.
#[allow(clippy::too_many_arguments)]
unsafe fn write_tile_scaled<T: Finish>(
    acc: &[i32],
    (i0, rows): (usize, usize),
    (j0, cols): (usize, usize),
    fix: &TileCorrection<'_>,
    terms: &ColumnTerms,
    zero_point: i32,
    p: *mut T,
    (rs, cs): (usize, usize),
) {
    const NR: usize = super::NR;
    let mut row_zero = [0i32; MAX_TILE_ROWS];
    for (i, z) in row_zero.iter_mut().enumerate().take(rows) {
        *z = pick(fix.a_zero, i0 + i).wrapping_add(fix.a_shift);
    }
    let mut out = [[T::default(); NR]; MAX_TILE_ROWS];
    requant_rows(
        acc,
        rows,
        fix.row_sums,
        &row_zero,
        terms,
        zero_point,
        &mut out,
    );
    if cs == 1 {
        for (i, row) in out.iter().enumerate().take(rows) {
            let dst = p.wrapping_add((i0 + i) * rs + j0);
            if cols == NR {
                // A whole row as one fixed-size move (vector stores, not a `memcpy` call).
                // SAFETY: row i0 + i, columns j0..j0 + NR of C lie in its storage and are this
                // call's alone (the caller's contract); unaligned write.
                unsafe { dst.cast::<[T; NR]>().write_unaligned(*row) };
            } else {
                // SAFETY: as above, columns j0..j0 + cols; `row` holds NR >= cols values.
                unsafe { std::ptr::copy_nonoverlapping(row.as_ptr(), dst, cols) };
            }
        }
    } else {
        #[cfg(target_arch = "x86_64")]
        if std::mem::size_of::<T>() == 1 && rows == MAX_TILE_ROWS && rs == 1 {
            // SAFETY: T is u8 or i8 (the only one-byte `Finish` types), so the tile is plain
            // bytes; columns j0..j0 + cols of rows i0..i0 + 8 lie in C (caller's contract).
            unsafe { store_columns_sse2(&out, cols, p.cast::<u8>().add(i0 + j0 * cs), cs) };
            return;
        }
        for jj in 0..cols {
            let base = i0 * rs + (j0 + jj) * cs;
            for (i, row) in out.iter().enumerate().take(rows) {
                // SAFETY: as above, element (i0 + i, j0 + jj).
                unsafe { *p.add(base + i * rs) = row[jj] };
            }
        }
    }
}

/// Stores the first `cols` columns of an 8-row tile of bytes as 8-byte runs `cs` apart (a
/// channel-major output, where a tile column is one channel's 8 consecutive pixels): the tile
/// is transposed 16 columns at a time with SSE2 (x86_64's baseline) byte, word and dword
/// interleaves.
///
/// # Safety
/// `T` must be one byte wide; `dst + j · cs .. + 8` must be writable for every `j < cols`.
#[cfg(target_arch = "x86_64")]
unsafe fn store_columns_sse2<T>(
    tile: &[[T; super::NR]; MAX_TILE_ROWS],
    cols: usize,
    dst: *mut u8,
    cs: usize,
) {
    use std::arch::x86_64::*;
    let bytes = tile.as_ptr().cast::<u8>();
    for half in 0..cols.div_ceil(16) {
        // SAFETY: each row holds NR = 32 one-byte values, so bytes 16·half..16·half + 16 of
        // row r are inside the tile; SSE2 is part of x86_64.
        let r: [__m128i; 8] = std::array::from_fn(|row| unsafe {
            _mm_loadu_si128(bytes.add(row * super::NR + 16 * half).cast())
        });
        let pairs = [(r[0], r[1]), (r[2], r[3]), (r[4], r[5]), (r[6], r[7])];
        // Byte interleave: rows (2p, 2p+1), columns 0..8 (lo) and 8..16 (hi).
        let lo8: [__m128i; 4] = std::array::from_fn(|x| _mm_unpacklo_epi8(pairs[x].0, pairs[x].1));
        let hi8: [__m128i; 4] = std::array::from_fn(|x| _mm_unpackhi_epi8(pairs[x].0, pairs[x].1));
        for (part, v8) in [lo8, hi8].into_iter().enumerate() {
            // Rows 0..4 and 4..8 of columns 4·c..4·c + 4 (c = 0, 1 within this part).
            let top = [
                _mm_unpacklo_epi16(v8[0], v8[1]),
                _mm_unpackhi_epi16(v8[0], v8[1]),
            ];
            let bottom = [
                _mm_unpacklo_epi16(v8[2], v8[3]),
                _mm_unpackhi_epi16(v8[2], v8[3]),
            ];
            for c in 0..2 {
                // Two columns each: all 8 rows of column 2·c' in the low, 2·c' + 1 in the high.
                let cols2 = [
                    _mm_unpacklo_epi32(top[c], bottom[c]),
                    _mm_unpackhi_epi32(top[c], bottom[c]),
                ];
                for (e, v) in cols2.into_iter().enumerate() {
                    let j = 16 * half + 8 * part + 4 * c + 2 * e;
                    if j < cols {
                        // SAFETY: column j's 8 bytes are writable (caller's contract).
                        unsafe { _mm_storel_epi64(dst.add(j * cs).cast(), v) };
                    }
                    if j + 1 < cols {
                        // SAFETY: as above, column j + 1.
                        unsafe {
                            _mm_storel_epi64(dst.add((j + 1) * cs).cast(), _mm_unpackhi_epi64(v, v))
                        };
                    }
                }
            }
        }
    }
}

/// Writes finished sums `values` (zero points already applied), all of column `col` (one
/// output channel), to `dest[start..start + values.len()]` through the epilogue: the int32
/// bias, then the conversion to the destination's type. Used by direct kernels (depthwise
/// convolution) that accumulate without the GEMM.
pub fn write_line(
    values: &[i32],
    col: usize,
    epilogue: &Epilogue<'_>,
    dest: &mut Dest<'_>,
    start: usize,
) {
    let bias = epilogue.bias_i32.map_or(0, |b| b[col]);
    let m = epilogue.scale.map_or(1.0, |s| s.multiplier(0, col));
    let zp = epilogue.zero_point;
    let len = values.len();
    match dest {
        Dest::I32(d) => {
            for (o, &v) in d[start..start + len].iter_mut().zip(values) {
                *o = v.wrapping_add(bias);
            }
        }
        Dest::U8(d) => requant_line(values, bias, m, zp, &mut d[start..start + len]),
        Dest::I8(d) => requant_line(values, bias, m, zp, &mut d[start..start + len]),
        Dest::F32(d) => {
            let fb = epilogue.bias_f32.map_or(0.0, |b| b[col]);
            for (o, &v) in d[start..start + len].iter_mut().zip(values) {
                *o = v.wrapping_add(bias) as f32 * m + fb;
            }
        }
    }
}

crate::kernels::simd::multiversion! {
    /// `out[i] = saturate(round_half_even((values[i] + bias) · mult) + zero_point)`.
    pub(crate) fn requant_line<T: Narrow>(
        values: &[i32],
        bias: i32,
        mult: f32,
        zero_point: i32,
        out: &mut [T],
    ) {
        for (o, &v) in out.iter_mut().zip(values) {
            let q = round_to_i32(v.wrapping_add(bias) as f32 * mult).wrapping_add(zero_point);
            *o = T::narrow(q.max(T::LO).min(T::HI));
        }
    }
}
