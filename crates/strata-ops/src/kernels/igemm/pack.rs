//! Operand packing for the integer GEMM: A (activations) per register tile, from a strided
//! matrix ([`MatrixA`]; a convolution input is `super::im2col`'s); B (weights) whole,
//! in panels ([`PackedB`], once at plan time for constant weights).

use super::{padded_depth, NR, PANEL};
use crate::kernels::error::{KernelError, KernelResult};

const OP: &str = "IntegerGemm";

/// 8-bit operand values, signed or not.
#[derive(Clone, Copy, Debug)]
pub enum IntSlice<'a> {
    U8(&'a [u8]),
    I8(&'a [i8]),
}

impl<'a> IntSlice<'a> {
    pub fn len(&self) -> usize {
        match self {
            IntSlice::U8(s) => s.len(),
            IntSlice::I8(s) => s.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The values as raw bytes (two's complement for i8).
    pub fn bytes(&self) -> &'a [u8] {
        match self {
            IntSlice::U8(s) => s,
            IntSlice::I8(s) => bytemuck::cast_slice(s),
        }
    }

    /// Elements `start..start + len`.
    pub fn range(&self, start: usize, len: usize) -> IntSlice<'a> {
        match self {
            IntSlice::U8(s) => IntSlice::U8(&s[start..start + len]),
            IntSlice::I8(s) => IntSlice::I8(&s[start..start + len]),
        }
    }

    pub fn is_signed(&self) -> bool {
        matches!(self, IntSlice::I8(_))
    }

    /// Element `i` in A's unsigned domain: an i8 `v` becomes `v + 128`.
    #[inline(always)]
    fn a_at(&self, i: usize) -> u8 {
        match self {
            IntSlice::U8(s) => s[i],
            IntSlice::I8(s) => (s[i] as u8) ^ 0x80,
        }
    }

    /// Element `i` in B's signed domain: a u8 `v` becomes `v - 128`.
    #[inline(always)]
    fn b_at(&self, i: usize) -> i8 {
        match self {
            IntSlice::I8(s) => s[i],
            IntSlice::U8(s) => (s[i] ^ 0x80) as i8,
        }
    }

    /// What A's packing adds to every value (and so to its zero points).
    pub fn a_shift(&self) -> i32 {
        if self.is_signed() {
            128
        } else {
            0
        }
    }

    /// What B's packing adds to every value (and so to its zero points).
    pub fn b_shift(&self) -> i32 {
        if self.is_signed() {
            0
        } else {
            -128
        }
    }
}

/// Checks that a `rows x cols` operand with strides `(rs, cs)` lies inside a slice of `len`.
fn check_extent(
    operand: &'static str,
    rows: usize,
    cols: usize,
    (rs, cs): (usize, usize),
    len: usize,
) -> KernelResult<()> {
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    let last = (rows - 1)
        .checked_mul(rs)
        .and_then(|r| (cols - 1).checked_mul(cs).and_then(|c| r.checked_add(c)));
    match last {
        Some(last) if last < len => Ok(()),
        _ => Err(KernelError::InvalidLayout {
            op: OP,
            operand,
            rows,
            cols,
            strides: (rs as isize, cs as isize),
            reason: format!("reaches outside its {len} elements"),
        }),
    }
}

/// A source of A's rows, packed one register tile (`mr` rows) at a time.
pub trait PackA: Sync {
    /// Rows of A (M).
    fn rows(&self) -> usize;
    /// Columns of A (K).
    fn depth(&self) -> usize;
    /// What packing adds to every value (128 for an i8 source).
    fn shift(&self) -> i32;
    /// Packs rows `i0..i0 + rows` (`rows <= mr`) as one tile: row `i`'s depth `k` at
    /// `dst[(k / 4) * mr * 4 + i * 4 + k % 4]`, zero past the depth and past `rows`; `sums[i]`
    /// is the sum of row `i`'s packed values. `dst` holds `padded_depth * mr` bytes, `sums` `mr`.
    fn pack_tile(&self, i0: usize, rows: usize, mr: usize, dst: &mut [u8], sums: &mut [i32]);

    /// Packs rows `i0..i0 + rows` row-major (the AMX layout): row `i`'s depth `k` at
    /// `dst[i * stride + k]`, zero from the depth to `stride`; `sums[i]` is the sum of row `i`'s
    /// packed values. `stride >= padded_depth`; `dst` holds `rows * stride` bytes, `sums` `rows`.
    fn pack_rows(&self, i0: usize, rows: usize, stride: usize, dst: &mut [u8], sums: &mut [i32]) {
        pack_rows_by_tiles(self, i0, rows, stride, dst, sums);
    }

    /// Whether [`PackA::pack_rows`] is a plain copy (rather than one-row tiles, element by
    /// element): the AMX path is only worth it then.
    fn rows_are_contiguous(&self) -> bool {
        false
    }
}

/// [`PackA::pack_rows`] through `pack_tile`: a one-row tile is the row itself.
fn pack_rows_by_tiles<A: PackA + ?Sized>(
    a: &A,
    i0: usize,
    rows: usize,
    stride: usize,
    dst: &mut [u8],
    sums: &mut [i32],
) {
    let kp = padded_depth(a.depth()).unwrap_or(0);
    for (i, (row, sum)) in dst
        .chunks_exact_mut(stride)
        .zip(sums.iter_mut())
        .take(rows)
        .enumerate()
    {
        a.pack_tile(i0 + i, 1, 1, &mut row[..kp], std::slice::from_mut(sum));
        row[kp..].fill(0);
    }
}

#[inline(always)]
fn slot(k: usize, i: usize, mr: usize) -> usize {
    (k / 4) * mr * 4 + i * 4 + k % 4
}

/// A as a strided matrix: element `(i, k)` at `data[i * rs + k * cs]`.
#[derive(Clone, Copy, Debug)]
pub struct MatrixA<'a> {
    data: IntSlice<'a>,
    m: usize,
    k: usize,
    rs: usize,
    cs: usize,
}

impl<'a> MatrixA<'a> {
    pub fn new(
        data: IntSlice<'a>,
        m: usize,
        k: usize,
        strides: (usize, usize),
    ) -> KernelResult<Self> {
        check_extent("A", m, k, strides, data.len())?;
        Ok(MatrixA {
            data,
            m,
            k,
            rs: strides.0,
            cs: strides.1,
        })
    }
}

impl MatrixA<'_> {
    /// `(rs, cs)`: element `(i, k)` is at `i * rs + k * cs`.
    pub fn strides(&self) -> (usize, usize) {
        (self.rs, self.cs)
    }
}

impl PackA for MatrixA<'_> {
    fn rows(&self) -> usize {
        self.m
    }

    fn rows_are_contiguous(&self) -> bool {
        self.cs == 1
    }

    fn pack_rows(&self, i0: usize, rows: usize, stride: usize, dst: &mut [u8], sums: &mut [i32]) {
        if self.cs != 1 {
            pack_rows_by_tiles(self, i0, rows, stride, dst, sums);
            return;
        }
        let bytes = self.data.bytes();
        let flip = if self.data.is_signed() { 0x80 } else { 0 };
        for (i, (row, sum)) in dst
            .chunks_exact_mut(stride)
            .zip(sums.iter_mut())
            .take(rows)
            .enumerate()
        {
            let start = (i0 + i) * self.rs;
            *sum = copy_row(&bytes[start..start + self.k], flip, row);
        }
    }

    fn depth(&self) -> usize {
        self.k
    }

    fn shift(&self) -> i32 {
        self.data.a_shift()
    }

    fn pack_tile(&self, i0: usize, rows: usize, mr: usize, dst: &mut [u8], sums: &mut [i32]) {
        dst.fill(0);
        sums.fill(0);
        if self.cs == 1 && self.rs != 0 && mr <= MAX_FAST_MR {
            pack_contiguous_depth(self, i0, rows, mr, dst, sums);
        } else if self.cs == 1 || self.rs == 0 {
            for (i, sum) in sums.iter_mut().enumerate().take(rows) {
                let base = (i0 + i) * self.rs;
                for k in 0..self.k {
                    let v = self.data.a_at(base + k * self.cs);
                    dst[slot(k, i, mr)] = v;
                    *sum += i32::from(v);
                }
            }
        } else if self.rs == 1 && mr <= MAX_FAST_MR {
            pack_contiguous_rows(self, i0, rows, mr, dst, sums);
        } else {
            // Column-strided (a transposed or channel-major source): walk the rows of a tile
            // together so each strided read serves neighbouring bytes.
            for k in 0..self.k {
                let base = i0 * self.rs + k * self.cs;
                for (i, sum) in sums.iter_mut().enumerate().take(rows) {
                    let v = self.data.a_at(base + i * self.rs);
                    dst[slot(k, i, mr)] = v;
                    *sum += i32::from(v);
                }
            }
        }
    }
}

/// Copies `src` XOR `flip` into the front of `dst`, zeroes the rest, and returns the sum of
/// the copied values.
fn copy_row(src: &[u8], flip: u8, dst: &mut [u8]) -> i32 {
    let mut sum = 0i32;
    copy_row_lanes((), src, flip, dst, &mut sum);
    sum
}

crate::kernels::simd::multiversion! {
    /// [`copy_row`]'s loops, vectorized (`T` is unused: the macro wants a type parameter).
    fn copy_row_lanes<T: Copy>(_unit: T, src: &[u8], flip: u8, dst: &mut [u8], sum: &mut i32) {
        let (head, rest) = dst.split_at_mut(src.len());
        // Per-lane u32 sums of 64-byte blocks: no overflow below 2^24 blocks.
        let mut lanes = [0u32; 64];
        let mut blocks_src = src.chunks_exact(64);
        let mut blocks_dst = head.chunks_exact_mut(64);
        for (d, s) in (&mut blocks_dst).zip(&mut blocks_src) {
            for ((o, &v), l) in d.iter_mut().zip(s).zip(lanes.iter_mut()) {
                let x = v ^ flip;
                *o = x;
                *l += u32::from(x);
            }
        }
        let mut total: u32 = lanes.iter().sum();
        for (o, &v) in blocks_dst.into_remainder().iter_mut().zip(blocks_src.remainder()) {
            let x = v ^ flip;
            *o = x;
            total += u32::from(x);
        }
        rest.fill(0);
        *sum = total as i32;
    }
}

/// Tile heights [`pack_contiguous_rows`] handles.
const MAX_FAST_MR: usize = 8;

/// [`MatrixA::pack_tile`] for a source whose tile rows are adjacent bytes (`rs == 1`: a
/// channel-major convolution input, where A's rows are pixels and its columns channels): each
/// depth's `rows` bytes are one slice, copied into their slots without per-element indexing,
/// and the row sums come from the packed tile in one vectorizable pass. `dst` and `sums` are
/// zeroed by the caller.
fn pack_contiguous_rows(
    a: &MatrixA<'_>,
    i0: usize,
    rows: usize,
    mr: usize,
    dst: &mut [u8],
    sums: &mut [i32],
) {
    let bytes = a.data.bytes();
    let flip = if a.data.is_signed() { 0x80 } else { 0 };
    let base = i0;
    #[cfg(target_arch = "x86_64")]
    let done = if rows == 8 && mr == 8 {
        pack_eight_rows_sse2(bytes, base, a.cs, a.k, flip, dst)
    } else {
        0
    };
    #[cfg(not(target_arch = "x86_64"))]
    let done = 0;
    for (g, out) in dst.chunks_exact_mut(mr * 4).enumerate().skip(done) {
        for t in 0..4 {
            let k = g * 4 + t;
            if k >= a.k {
                break;
            }
            let start = base + k * a.cs;
            let src = &bytes[start..start + rows];
            for (slot, &v) in out.chunks_exact_mut(4).zip(src) {
                slot[t] = v ^ flip;
            }
        }
    }
    tile_row_sums(dst, rows, mr, sums);
}

/// The whole groups of four depths of an 8-row tile whose rows are adjacent bytes, packed with
/// SSE2 (x86_64's baseline): the four 8-byte depth runs of a group are interleaved byte-wise
/// into the group's 32 slots. Returns how many groups it packed (none when the last run would
/// read past `bytes`).
#[cfg(target_arch = "x86_64")]
fn pack_eight_rows_sse2(
    bytes: &[u8],
    base: usize,
    cs: usize,
    k: usize,
    flip: u8,
    dst: &mut [u8],
) -> usize {
    use std::arch::x86_64::*;
    let groups = k / 4;
    let fits = groups == 0
        || (4 * groups - 1)
            .checked_mul(cs)
            .and_then(|v| v.checked_add(base + 8))
            .is_some_and(|end| end <= bytes.len());
    if !fits || dst.len() < groups * 32 {
        return 0;
    }
    // SAFETY: SSE2 is part of x86_64. Every load reads the 8 bytes at base + k·cs for k <
    // 4·groups, inside `bytes` (checked above); every store writes 16 bytes inside the first
    // groups · 32 bytes of `dst` (checked above). Loads and stores are unaligned.
    unsafe {
        let f = _mm_set1_epi8(flip as i8);
        let src = bytes.as_ptr();
        let out = dst.as_mut_ptr();
        for g in 0..groups {
            let load = |t: usize| _mm_loadl_epi64(src.add(base + (4 * g + t) * cs).cast());
            let ab = _mm_unpacklo_epi8(load(0), load(1));
            let cd = _mm_unpacklo_epi8(load(2), load(3));
            // Rows 0..4 then 4..8, each as its four depths' bytes.
            let lo = _mm_xor_si128(_mm_unpacklo_epi16(ab, cd), f);
            let hi = _mm_xor_si128(_mm_unpackhi_epi16(ab, cd), f);
            _mm_storeu_si128(out.add(g * 32).cast(), lo);
            _mm_storeu_si128(out.add(g * 32 + 16).cast(), hi);
        }
    }
    groups
}

/// [`MatrixA::pack_tile`] for a source whose rows are contiguous (`cs == 1`, a row-major A):
/// each row's groups of four bytes are copied whole into their slots. `dst` and `sums` are
/// zeroed by the caller.
fn pack_contiguous_depth(
    a: &MatrixA<'_>,
    i0: usize,
    rows: usize,
    mr: usize,
    dst: &mut [u8],
    sums: &mut [i32],
) {
    let bytes = a.data.bytes();
    let flip = if a.data.is_signed() { 0x80 } else { 0 };
    for i in 0..rows {
        let start = (i0 + i) * a.rs;
        let src = &bytes[start..start + a.k];
        for (group, out) in src.chunks(4).zip(dst.chunks_exact_mut(mr * 4)) {
            for (d, &v) in out[i * 4..i * 4 + group.len()].iter_mut().zip(group) {
                *d = v ^ flip;
            }
        }
    }
    tile_row_sums(dst, rows, mr, sums);
}

/// The sums of the first `rows` rows of a packed tile.
fn tile_row_sums(dst: &[u8], rows: usize, mr: usize, sums: &mut [i32]) {
    // Per-slot sums over the depth groups (at most 255 · groups each, no overflow for any
    // realistic depth: u32), then each row's four slots.
    let mut acc = [0u32; MAX_FAST_MR * 4];
    let acc = &mut acc[..mr * 4];
    for group in dst.chunks_exact(mr * 4) {
        for (s, &v) in acc.iter_mut().zip(group) {
            *s += u32::from(v);
        }
    }
    for (sum, slots) in sums.iter_mut().zip(acc.chunks_exact(4)).take(rows) {
        *sum = slots.iter().sum::<u32>() as i32;
    }
}

/// B packed for the microkernels, borrowed: panels of [`PANEL`] columns (an even number of
/// them), each `padded_depth(k) * PANEL` bytes with column `j`'s depth `k` at `(k / 4) * 64 + j
/// * 4 + k % 4`; plus each column's sum.
#[derive(Clone, Copy, Debug)]
pub struct PackedBRef<'a> {
    pub(super) data: &'a [i8],
    pub(super) col_sums: &'a [i32],
    pub(super) k: usize,
    pub(super) n: usize,
    pub(super) shift: i32,
}

impl PackedBRef<'_> {
    pub fn depth(&self) -> usize {
        self.k
    }

    pub fn cols(&self) -> usize {
        self.n
    }

    /// What packing added to every value (−128 for a u8 source).
    pub fn shift(&self) -> i32 {
        self.shift
    }
}

/// B packed once and owned (constant weights, packed at plan time).
#[derive(Clone, Debug)]
pub struct PackedB {
    data: Vec<i8>,
    col_sums: Vec<i32>,
    k: usize,
    n: usize,
    shift: i32,
}

impl PackedB {
    /// Bytes of packed B for a `k x n` operand (`None` on overflow).
    pub fn packed_len(k: usize, n: usize) -> Option<usize> {
        let panels = n.checked_add(NR - 1)? / NR * 2;
        padded_depth(k)?.checked_mul(PANEL)?.checked_mul(panels)
    }

    /// Packs `k x n` B, element `(p, j)` at `b[p * rs + j * cs]`.
    pub fn new(b: IntSlice<'_>, k: usize, n: usize, strides: (usize, usize)) -> KernelResult<Self> {
        let len = Self::packed_len(k, n).ok_or(KernelError::SizeOverflow {
            op: OP,
            what: "packed B",
        })?;
        let mut data = vec![0i8; len];
        let mut col_sums = vec![0i32; n];
        let view = pack_b_into(b, k, n, strides, &mut data, &mut col_sums)?;
        let shift = view.shift;
        Ok(PackedB {
            data,
            col_sums,
            k,
            n,
            shift,
        })
    }

    pub fn view(&self) -> PackedBRef<'_> {
        PackedBRef {
            data: &self.data,
            col_sums: &self.col_sums,
            k: self.k,
            n: self.n,
            shift: self.shift,
        }
    }
}

/// Packs `k x n` B (element `(p, j)` at `b[p * rs + j * cs]`) into `data` (at least
/// [`PackedB::packed_len`] bytes) and `col_sums` (at least `n`), without allocating.
pub fn pack_b_into<'d>(
    b: IntSlice<'_>,
    k: usize,
    n: usize,
    strides: (usize, usize),
    data: &'d mut [i8],
    col_sums: &'d mut [i32],
) -> KernelResult<PackedBRef<'d>> {
    check_extent("B", k, n, strides, b.len())?;
    let len = PackedB::packed_len(k, n).ok_or(KernelError::SizeOverflow {
        op: OP,
        what: "packed B",
    })?;
    if data.len() < len || col_sums.len() < n {
        return Err(KernelError::BufferLength {
            op: OP,
            buffer: "packed B",
            expected: len,
            actual: data.len().min(if col_sums.len() < n { 0 } else { len }),
        });
    }
    let (data, col_sums) = (&mut data[..len], &mut col_sums[..n]);
    data.fill(0);
    let kp = padded_depth(k).unwrap_or(0);
    let (rs, cs) = strides;
    let at = |p: usize, j: usize| {
        (j / PANEL) * kp * PANEL + (p / 4) * PANEL * 4 + (j % PANEL) * 4 + p % 4
    };
    for (j, sum) in col_sums.iter_mut().enumerate() {
        let mut s = 0i32;
        for p in 0..k {
            let v = b.b_at(p * rs + j * cs);
            data[at(p, j)] = v;
            s += i32::from(v);
        }
        *sum = s;
    }
    Ok(PackedBRef {
        data,
        col_sums,
        k,
        n,
        shift: b.b_shift(),
    })
}
