//! FusedAttention: what the optimizer makes of scaled-dot-product attention as exporters write
//! it (MatMul of Q and Kᵀ, a scale, masks, Softmax, MatMul with V, with the head split and merge
//! around it). It runs as one kernel on per-head tiles (`kernels::sdpa`) and reads Q, K and V
//! where the projections wrote them: the head split (Reshape + Transpose) and merge (Transpose +
//! Reshape) become strides of the kernel.
//!
//! Inputs: 0 Q, 1 K, 2 V, then the inputs `steps` name: additive f32 masks and boolean
//! conditions, each broadcastable to the scores `[B, H, Sq, Sk]`, applied in order. ONNX
//! `Attention` runs through the same kernel when its inputs fit (see `attention_op`).

#[cfg(test)]
use strata_core::Tensor;
use strata_core::{DType, Device};

use crate::kernels::sdpa::{sdpa_f32, sdpa_slot_len, ScoreStep, Sdpa, View4};
use crate::support::scratch::scratch_as;
use crate::{Dim, Fact, Kernel, KernelIo, OpError, OpResult, Operator};

const OP: &str = "FusedAttention";

/// How an input holds the logical `[B, H, S, D]` operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OperandLayout {
    /// The input is rank 3 `[x0, x1, H·D]`, viewed as `[x0, x1, H, D]` (the head split's
    /// Reshape); `None`: the input is rank 4 as is.
    pub split_heads: Option<usize>,
    /// Logical axis `j` (of B, H, S, D) is axis `perm[j]` of the (split) input.
    pub perm: [usize; 4],
    /// With `split_heads`: the operand is columns `offset..offset + width` of a rank-3 input
    /// `[x0, x1, W]` holding more (Q, K and V side by side, as GPT-2's projection writes them
    /// before a Split); `None`: all of its last axis.
    pub columns: Option<Columns>,
}

/// A run of columns of the last axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Columns {
    pub offset: usize,
    pub width: usize,
}

impl OperandLayout {
    /// A rank-4 input that is already `[B, H, S, D]`.
    pub const HEADS: OperandLayout = OperandLayout {
        split_heads: None,
        perm: [0, 1, 2, 3],
        columns: None,
    };

    /// The operand's width when the input's last axis is `all` wide: its window's, which must
    /// lie inside; `all` without one.
    fn width(&self, all: usize) -> Option<usize> {
        match self.columns {
            Some(c) if c.offset.checked_add(c.width)? <= all => Some(c.width),
            Some(_) => None,
            None => Some(all),
        }
    }
}

/// Where the output `[B, H, Sq, Dv]` is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputLayout {
    /// `[B, H, Sq, Dv]`.
    Heads,
    /// `[B, Sq, H, Dv]` (the merge's Transpose).
    SeqHeads,
    /// `[B, Sq, H·Dv]` (the merge's Transpose and Reshape).
    Merged,
}

/// A step on the scores, after the scale.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MaskStep {
    /// Adds the f32 tensor at input `input`.
    Add { input: usize },
    /// Keeps a score where the boolean tensor at input `input` equals `keep_when`, else writes
    /// `fill`.
    Select {
        input: usize,
        keep_when: bool,
        fill: f32,
    },
}

impl MaskStep {
    fn input(&self) -> usize {
        match *self {
            MaskStep::Add { input } | MaskStep::Select { input, .. } => input,
        }
    }
}

/// Scaled-dot-product attention over layouts the optimizer found.
#[derive(Clone, Debug, PartialEq)]
pub struct FusedAttention {
    pub q: OperandLayout,
    pub k: OperandLayout,
    pub v: OperandLayout,
    pub out: OutputLayout,
    /// Multiplies Q·Kᵀ.
    pub scale: f32,
    /// At most two.
    pub steps: Vec<MaskStep>,
    /// Keys after the query's own index are masked out (ONNX Attention's `is_causal`, no past).
    pub causal: bool,
    /// A row that masks every key gives zeros (ONNX Attention), not NaN (Softmax).
    pub zero_empty_rows: bool,
    /// Scratch slots planned: the threads the plan runs with.
    pub slots: usize,
}

/// The width of a column window of an axis of `all` (known or not), if it lies inside.
fn window_dim<D: Clone + From<usize> + WindowExtent>(all: &D, window: Columns) -> Option<D> {
    match all.extent() {
        Some(n) if window.offset.checked_add(window.width)? > n => None,
        _ => Some(D::from(window.width)),
    }
}

/// An axis length, known or not.
trait WindowExtent {
    fn extent(&self) -> Option<usize>;
}

impl WindowExtent for Dim {
    fn extent(&self) -> Option<usize> {
        self.known()
    }
}

impl WindowExtent for usize {
    fn extent(&self) -> Option<usize> {
        Some(*self)
    }
}

fn split_dim(d: &Dim, h: usize) -> Option<Dim> {
    match d {
        Dim::Known(n) if h > 0 && n % h == 0 => Some(Dim::Known(n / h)),
        Dim::Known(_) => None,
        _ if h == 1 => Some(d.clone()),
        _ => Some(Dim::Unknown),
    }
}

fn split_usize(d: &usize, h: usize) -> Option<usize> {
    (h > 0 && d.is_multiple_of(h)).then(|| d / h)
}

/// Two dims that may be the same size: equal, or one unknown.
fn compatible(a: &Dim, b: &Dim) -> bool {
    match (a, b) {
        (Dim::Unknown, _) | (_, Dim::Unknown) => true,
        _ => a == b,
    }
}

/// The broadcast of batch-like dims (B or H) of Q, K and V.
fn broadcast_dim(op_dims: &[&Dim]) -> Option<Dim> {
    let mut out = Dim::Known(1);
    for d in op_dims {
        match (&out, d) {
            (_, Dim::Known(1)) => {}
            (Dim::Known(1), d) => out = (*d).clone(),
            (o, d) if compatible(o, d) => {}
            _ => return None,
        }
    }
    Some(out)
}

/// Whether a mask of `mask` dims broadcasts onto scores `[b, h, sq, sk]` without changing them.
fn mask_fits(mask: &[Dim], scores: &[Dim; 4]) -> bool {
    mask.len() <= 4
        && mask
            .iter()
            .rev()
            .zip(scores.iter().rev())
            .all(|(m, s)| *m == Dim::Known(1) || compatible(m, s))
}

impl FusedAttention {
    /// The logical `[B, H, S, D]` dims of an input with `dims` held in `layout`.
    fn logical<D: Clone + From<usize> + WindowExtent>(
        layout: &OperandLayout,
        dims: &[D],
        split: impl Fn(&D, usize) -> Option<D>,
    ) -> Option<[D; 4]> {
        let view: [D; 4] = match (layout.split_heads, dims) {
            (Some(h), [a, b, c]) => {
                let c = match layout.columns {
                    Some(window) => window_dim(c, window)?,
                    None => c.clone(),
                };
                [a.clone(), b.clone(), D::from(h), split(&c, h)?]
            }
            (None, [a, b, c, d]) => [a.clone(), b.clone(), c.clone(), d.clone()],
            _ => return None,
        };
        Some(layout.perm.map(|p| view[p].clone()))
    }

    /// Logical `[B, H, Sq, Sk, D, Dv]` dims from input facts, or why they do not fit.
    fn geometry(&self, inputs: &[&Fact]) -> OpResult<([Dim; 4], Dim)> {
        let fact = |i: usize| {
            inputs
                .get(i)
                .filter(|f| f.is_defined())
                .ok_or(OpError::MissingInput {
                    op: OP.into(),
                    index: i,
                })
        };
        let (q, k, v) = (fact(0)?, fact(1)?, fact(2)?);
        for (i, f) in [q, k, v].into_iter().enumerate() {
            if f.dtype != DType::F32 {
                return Err(OpError::DType {
                    op: OP.into(),
                    index: i,
                    expected: "float".into(),
                    actual: f.dtype,
                });
            }
        }
        let bad = || {
            OpError::shape(
                OP,
                format!(
                    "Q {:?}, K {:?}, V {:?} do not fit the attention layouts",
                    q.dims, k.dims, v.dims
                ),
            )
        };
        let lq = Self::logical(&self.q, &q.dims, split_dim).ok_or_else(bad)?;
        let lk = Self::logical(&self.k, &k.dims, split_dim).ok_or_else(bad)?;
        let lv = Self::logical(&self.v, &v.dims, split_dim).ok_or_else(bad)?;
        let b = broadcast_dim(&[&lq[0], &lk[0], &lv[0]]).ok_or_else(bad)?;
        let h = broadcast_dim(&[&lq[1], &lk[1], &lv[1]]).ok_or_else(bad)?;
        if !compatible(&lq[3], &lk[3]) || !compatible(&lk[2], &lv[2]) {
            return Err(bad());
        }
        let scores = [b, h, lq[2].clone(), lk[2].clone()];
        if self.steps.len() > 2 {
            return Err(OpError::shape(OP, "at most two mask steps"));
        }
        for step in &self.steps {
            let dtype = match step {
                MaskStep::Add { .. } => DType::F32,
                MaskStep::Select { .. } => DType::Bool,
            };
            let m = fact(step.input())?;
            if m.dtype != dtype || !mask_fits(&m.dims, &scores) {
                return Err(OpError::shape(
                    OP,
                    format!(
                        "mask {:?} {:?} does not fit scores {scores:?}",
                        m.dtype, m.dims
                    ),
                ));
            }
        }
        Ok((scores, lv[3].clone()))
    }

    fn output_dims(&self, scores: &[Dim; 4], dv: &Dim) -> Vec<Dim> {
        let [b, h, sq, _] = scores.clone();
        match self.out {
            OutputLayout::Heads => vec![b, h, sq, dv.clone()],
            OutputLayout::SeqHeads => vec![b, sq, h, dv.clone()],
            OutputLayout::Merged => {
                let hd = match (h.known(), dv.known()) {
                    (Some(h), Some(d)) => Dim::Known(h * d),
                    _ => Dim::Unknown,
                };
                vec![b, sq, hd]
            }
        }
    }
}

impl Operator for FusedAttention {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let (scores, dv) = self.geometry(inputs)?;
        Ok(vec![Fact::new(DType::F32, self.output_dims(&scores, &dv))])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        crate::support::kernel_choice::cpu_only(OP, inputs[0].dtype, device)?;
        self.geometry(inputs)?;
        Ok(Box::new(FusedAttentionKernel { op: self.clone() }))
    }

    fn scratch_bytes(&self, inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        let (scores, dv) = self.geometry(inputs)?;
        let (Some(sq), Some(sk), Some(dv)) = (scores[2].known(), scores[3].known(), dv.known())
        else {
            return Err(OpError::shape(OP, "scratch needs known sequence lengths"));
        };
        sdpa_slot_len(sq, sk, dv)
            .checked_mul(self.slots.max(1) * std::mem::size_of::<f32>())
            .ok_or_else(|| OpError::shape(OP, "scratch size overflows"))
    }
}

#[derive(Debug)]
struct FusedAttentionKernel {
    op: FusedAttention,
}

/// Contiguous strides of `dims` (rank at most 4; no allocation, this runs every step).
fn strides_of(dims: &[usize]) -> [usize; 4] {
    let mut s = [1usize; 4];
    for i in (0..dims.len().min(4).saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// The logical `[B, H, S, D]` view of an input tensor's elements.
fn operand_view<'a>(
    layout: &OperandLayout,
    dims: &[usize],
    data: &'a [f32],
) -> OpResult<View4<'a, f32>> {
    let bad = || OpError::shape(OP, format!("input {dims:?} does not fit layout {layout:?}"));
    let (vd, vs, start): ([usize; 4], [usize; 4], usize) = match (layout.split_heads, dims) {
        (Some(h), &[a, b, all]) => {
            let c = layout.width(all).ok_or_else(bad)?;
            let d = split_usize(&c, h).ok_or_else(bad)?;
            let offset = layout.columns.map_or(0, |w| w.offset);
            ([a, b, h, d], [b * all, all, d, 1], offset)
        }
        (None, &[a, b, c, d]) => ([a, b, c, d], [b * c * d, c * d, d, 1], 0),
        _ => return Err(bad()),
    };
    Ok(View4 {
        data: data.get(start..).ok_or_else(bad)?,
        dims: layout.perm.map(|p| vd[p]),
        strides: layout.perm.map(|p| vs[p]),
    })
}

/// `view` broadcast to `dims` along axes where it has extent 1 (stride 0 there).
fn broadcast<T>(mut view: View4<'_, T>, dims: [usize; 4]) -> OpResult<View4<'_, T>> {
    for j in 0..4 {
        if view.dims[j] != dims[j] {
            if view.dims[j] != 1 {
                return Err(OpError::shape(
                    OP,
                    format!("{:?} does not broadcast to {dims:?}", view.dims),
                ));
            }
            view.dims[j] = dims[j];
            view.strides[j] = 0;
        }
    }
    Ok(view)
}

/// A mask tensor right-aligned onto the scores `dims`.
fn mask_view<'a, T>(
    tensor_dims: &[usize],
    data: &'a [T],
    dims: [usize; 4],
) -> OpResult<View4<'a, T>> {
    if tensor_dims.len() > 4 {
        return Err(OpError::shape(
            OP,
            format!("mask {tensor_dims:?} has rank above 4"),
        ));
    }
    let pad = 4 - tensor_dims.len();
    let st = strides_of(tensor_dims);
    let mut view = View4 {
        data,
        dims: [1; 4],
        strides: [0; 4],
    };
    for (i, (&d, &s)) in tensor_dims.iter().zip(&st).enumerate() {
        view.dims[pad + i] = d;
        view.strides[pad + i] = s;
    }
    broadcast(view, dims)
}

impl Kernel for FusedAttentionKernel {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let op = &self.op;
        let not_contiguous = || OpError::kernel(OP, "an input or output is not contiguous");
        let (tq, tk, tv, ty) = (io.input(0), io.input(1), io.input(2), io.output(0));
        let (rq, rk, rv) = (tq.read::<f32>()?, tk.read::<f32>()?, tv.read::<f32>()?);
        let q = operand_view(&op.q, tq.dims(), rq.as_slice().ok_or_else(not_contiguous)?)?;
        let k = operand_view(&op.k, tk.dims(), rk.as_slice().ok_or_else(not_contiguous)?)?;
        let v = operand_view(&op.v, tv.dims(), rv.as_slice().ok_or_else(not_contiguous)?)?;
        let b = q.dims[0].max(k.dims[0]).max(v.dims[0]);
        let h = q.dims[1].max(k.dims[1]).max(v.dims[1]);
        let (sq, sk, d, dv) = (q.dims[2], k.dims[2], q.dims[3], v.dims[3]);
        let q = broadcast(q, [b, h, sq, d])?;
        let k = broadcast(k, [b, h, sk, d])?;
        let v = broadcast(v, [b, h, sk, dv])?;
        let scores = [b, h, sq, sk];
        // Guards for the (at most two) mask inputs, then their views.
        let read_f32 = |step: Option<&MaskStep>| match step {
            Some(MaskStep::Add { input }) => io.input(*input).read::<f32>().map(Some),
            _ => Ok(None),
        };
        let read_u8 = |step: Option<&MaskStep>| match step {
            Some(MaskStep::Select { input, .. }) => io.input(*input).read::<u8>().map(Some),
            _ => Ok(None),
        };
        let (f0, f1) = (read_f32(op.steps.first())?, read_f32(op.steps.get(1))?);
        let (c0, c1) = (read_u8(op.steps.first())?, read_u8(op.steps.get(1))?);
        let mut steps = [None, None];
        for (i, step) in op.steps.iter().enumerate().take(2) {
            let dims = io.input(step.input()).dims();
            steps[i] = Some(match *step {
                MaskStep::Add { .. } => {
                    let r = [&f0, &f1][i]
                        .as_ref()
                        .ok_or_else(|| OpError::kernel(OP, "mask"))?;
                    ScoreStep::Add(mask_view(
                        dims,
                        r.as_slice().ok_or_else(not_contiguous)?,
                        scores,
                    )?)
                }
                MaskStep::Select {
                    keep_when, fill, ..
                } => {
                    let r = [&c0, &c1][i]
                        .as_ref()
                        .ok_or_else(|| OpError::kernel(OP, "condition"))?;
                    ScoreStep::Select {
                        cond: mask_view(dims, r.as_slice().ok_or_else(not_contiguous)?, scores)?,
                        keep_when,
                        fill,
                    }
                }
            });
        }
        let steps_buf: [ScoreStep<'_>; 2];
        let steps: &[ScoreStep<'_>] = match steps {
            [None, _] => &[],
            [Some(a), None] => {
                steps_buf = [a, a];
                &steps_buf[..1]
            }
            [Some(a), Some(b)] => {
                steps_buf = [a, b];
                &steps_buf[..]
            }
        };
        // Arrays, not Vecs: a kernel allocates nothing while running.
        let (out_dims, rank) = match op.out {
            OutputLayout::Heads => ([b, h, sq, dv], 4),
            OutputLayout::SeqHeads => ([b, sq, h, dv], 4),
            OutputLayout::Merged => ([b, sq, h * dv, 0], 3),
        };
        let out_dims = &out_dims[..rank];
        if ty.dims() != out_dims {
            return Err(OpError::shape(
                OP,
                format!("output is {:?}, expected {out_dims:?}", ty.dims()),
            ));
        }
        let out_strides = match op.out {
            OutputLayout::Heads => [h * sq * dv, sq * dv, dv, 1],
            OutputLayout::SeqHeads | OutputLayout::Merged => [sq * h * dv, dv, h * dv, 1],
        };
        let mut wy = ty.write::<f32>()?;
        let y = wy.as_mut_slice().ok_or_else(not_contiguous)?;
        let mut guard = match io.scratch {
            Some(s) => Some(s.write_bytes(OP)?),
            None => None,
        };
        let scratch: &mut [f32] = match &mut guard {
            Some(g) => scratch_as(OP, g.bytes())?,
            None => &mut [],
        };
        let problem = Sdpa {
            q,
            k,
            v,
            scale: op.scale,
            steps,
            causal: op.causal,
            zero_empty_rows: op.zero_empty_rows,
        };
        sdpa_f32(
            &problem,
            y,
            out_strides,
            scratch,
            op.slots.max(1),
            io.threads,
        )?;
        Ok(())
    }
}

/// Runs `op` on `inputs` outside a plan (tests).
#[cfg(test)]
fn run(op: &FusedAttention, inputs: &[Tensor]) -> OpResult<Tensor> {
    use crate::eval::{run_operator, EvalOptions};
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let mut out = run_operator(
        op,
        None,
        &refs,
        1,
        &EvalOptions {
            device: Device::Cpu,
            kind: strata_core::MemoryKind::Workspace,
            threads: 1,
            detach_views: false,
        },
    )?;
    Ok(out.remove(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::rng::Rng;

    fn tensor(dims: &[usize], seed: u64) -> Tensor {
        let n = dims.iter().product();
        Tensor::from_slice(&Rng::new(seed).vec(n), dims).unwrap()
    }

    /// softmax(scale·QKᵀ + mask)·V on `[B, H, S, D]` tensors, plainly.
    fn plain(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        mask: Option<&[f32]>,
        dims: [usize; 4],
        scale: f32,
    ) -> Vec<f32> {
        let [b, h, s, d] = dims;
        let mut out = vec![0.0; b * h * s * d];
        for bh in 0..b * h {
            for i in 0..s {
                let row: Vec<f32> = (0..s)
                    .map(|j| {
                        let dot: f32 = (0..d)
                            .map(|x| q[(bh * s + i) * d + x] * k[(bh * s + j) * d + x])
                            .sum();
                        dot * scale + mask.map_or(0.0, |m| m[(bh / h) * s + j])
                    })
                    .collect();
                let m = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                let e: Vec<f32> = row.iter().map(|x| (x - m).exp()).collect();
                let z: f32 = e.iter().sum();
                for x in 0..d {
                    out[(bh * s + i) * d + x] =
                        (0..s).map(|j| e[j] / z * v[(bh * s + j) * d + x]).sum();
                }
            }
        }
        out
    }

    #[test]
    fn packed_inputs_with_a_key_padding_mask_give_the_merged_output() {
        let (b, s, h, d) = (2, 5, 3, 4);
        let layout = |perm| OperandLayout {
            split_heads: Some(h),
            perm,
            columns: None,
        };
        let op = FusedAttention {
            q: layout([0, 2, 1, 3]),
            k: layout([0, 2, 1, 3]),
            v: layout([0, 2, 1, 3]),
            out: OutputLayout::Merged,
            scale: 0.5,
            steps: vec![MaskStep::Add { input: 3 }],
            causal: false,
            zero_empty_rows: false,
            slots: 1,
        };
        let (q, k, v) = (
            tensor(&[b, s, h * d], 1),
            tensor(&[b, s, h * d], 2),
            tensor(&[b, s, h * d], 3),
        );
        let mask = tensor(&[b, 1, 1, s], 4);
        let y = run(&op, &[q.clone(), k.clone(), v.clone(), mask.clone()]).unwrap();
        assert_eq!(y.dims(), &[b, s, h * d]);
        // Reference on head-major copies.
        let heads = |t: &Tensor| {
            let x = t.to_vec::<f32>().unwrap();
            let mut o = vec![0.0; x.len()];
            for bi in 0..b {
                for si in 0..s {
                    for hi in 0..h {
                        for di in 0..d {
                            o[((bi * h + hi) * s + si) * d + di] =
                                x[(bi * s + si) * h * d + hi * d + di];
                        }
                    }
                }
            }
            o
        };
        let want = plain(
            &heads(&q),
            &heads(&k),
            &heads(&v),
            Some(&mask.to_vec::<f32>().unwrap()),
            [b, h, s, d],
            0.5,
        );
        let got = heads(&y);
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-5, "{g} vs {w}");
        }
    }

    /// Q, K and V as column windows of one `[B, S, 3·H·D]` input (GPT-2's projection before its
    /// Split) give what the three separate inputs give; a window past the input's end is an
    /// error.
    #[test]
    fn column_windows_of_one_input_read_q_k_and_v() {
        let (b, s, h, d) = (2, 5, 3, 4);
        let hd = h * d;
        let layout = |columns| OperandLayout {
            split_heads: Some(h),
            perm: [0, 2, 1, 3],
            columns,
        };
        let op = |windows: [Option<Columns>; 3]| FusedAttention {
            q: layout(windows[0]),
            k: layout(windows[1]),
            v: layout(windows[2]),
            out: OutputLayout::Merged,
            scale: 0.5,
            steps: vec![],
            causal: true,
            zero_empty_rows: false,
            slots: 1,
        };
        let packed = tensor(&[b, s, 3 * hd], 5);
        let all = packed.to_vec::<f32>().unwrap();
        let part = |i: usize| {
            let x: Vec<f32> = all
                .chunks(3 * hd)
                .flat_map(|row| row[i * hd..(i + 1) * hd].to_vec())
                .collect();
            Tensor::from_slice(&x, &[b, s, hd]).unwrap()
        };
        let separate = run(&op([None; 3]), &[part(0), part(1), part(2)]).unwrap();
        let window = |i: usize| {
            Some(Columns {
                offset: i * hd,
                width: hd,
            })
        };
        let windows = op([window(0), window(1), window(2)]);
        let packed3 = [packed.clone(), packed.clone(), packed.clone()];
        let got = run(&windows, &packed3).unwrap();
        assert_eq!(got.dims(), &[b, s, hd]);
        assert_eq!(
            got.to_vec::<f32>().unwrap(),
            separate.to_vec::<f32>().unwrap()
        );
        // K and V swapped: a different answer, so the offsets are really read.
        let swapped = run(&op([window(0), window(2), window(1)]), &packed3).unwrap();
        assert_ne!(
            swapped.to_vec::<f32>().unwrap(),
            separate.to_vec::<f32>().unwrap()
        );
        let past_the_end = Some(Columns {
            offset: 2 * hd + 1,
            width: hd,
        });
        assert!(run(&op([window(0), window(1), past_the_end]), &packed3).is_err());
    }

    #[test]
    fn facts_that_do_not_fit_are_errors() {
        let op = FusedAttention {
            q: OperandLayout::HEADS,
            k: OperandLayout::HEADS,
            v: OperandLayout::HEADS,
            out: OutputLayout::Heads,
            scale: 1.0,
            steps: vec![MaskStep::Add { input: 3 }],
            causal: false,
            zero_empty_rows: false,
            slots: 1,
        };
        let f = |dims: &[usize]| Fact::known(DType::F32, dims);
        let (q, k) = (f(&[1, 2, 3, 4]), f(&[1, 2, 5, 4]));
        let ok = op.infer(&[&q, &k, &k, &f(&[1, 1, 1, 5])]).unwrap();
        assert_eq!(ok[0].concrete(), Some(vec![1, 2, 3, 4]));
        // Head dims differ, a mask that would widen the scores, a boolean additive mask.
        assert!(op.infer(&[&q, &f(&[1, 2, 5, 3]), &k]).is_err());
        assert!(op.infer(&[&q, &k, &k, &f(&[2, 1, 1, 5])]).is_err());
        assert!(op.infer(&[&q, &k, &k, &f(&[1, 1, 3, 5, 1])]).is_err());
        assert!(op.infer(&[&q, &k, &k, &f(&[1, 1, 4, 5])]).is_err());
        assert!(op
            .infer(&[&q, &k, &k, &Fact::known(DType::Bool, &[5])])
            .is_err());
    }
}
