//! Attention fusion: scaled-dot-product attention as exporters write it becomes one
//! `FusedAttention` node.
//!
//! The pattern is matched from each Softmax outward, by what the nodes compute (op types,
//! shapes, constant values, and the Softmax and Transpose semantics probed on small inputs),
//! never by names:
//!
//! ```text
//! Q' = [scale] Transpose(Reshape(Q, [B, S, H, D]))      K' and V' alike; K' may already be Kᵀ
//! S  = MatMul(Q', K'ᵀ)     (Kᵀ: the head split's own perm, or one more Transpose)
//! S  = S / c  or  S · c    (scalar constants; also on Q' or K' before the MatMul)
//! S  = S + mask            (f32, broadcastable onto S without widening it)
//! S  = Where(cond, S, fill) or Where(cond, fill, S)   (bool cond, scalar constant fill)
//! P  = Softmax(S) on the last axis
//! O  = MatMul(P, V'), then optionally Transpose [0, 2, 1, 3] and Reshape [B, S, H·Dv]
//! ```
//!
//! Single-head attention without a split works on rank-3 `[B, S, D]` operands (`S` is
//! `[B, Sq, Sk]`); it is read as a split into one head, so a mask with a batch axis of its own
//! (which the fused node would align with the heads) is left unfused.
//!
//! Every node on the score chain (S, P) must feed only the next one, so no intermediate the
//! graph still needs is skipped. The head split/merge nodes become strides of the fused node; a
//! split node that something else also reads stays for that reader. The fused node's inferred
//! output must equal the matched output's dims, so a layout this pass misread is never fused.

use std::sync::Arc;

use strata_core::{DType, MemoryKind, Tensor};
use strata_ops::eval::{run_operator, EvalOptions};
use strata_ops::ops::attention::{Columns, FusedAttention, MaskStep, OperandLayout, OutputLayout};
use strata_ops::{Dim, Fact, Operator};

use crate::graph::{NodeId, ValueSource};
use crate::optimize::epilogue::{value_facts, Fusion};
use crate::optimize::fuse::sole_consumer;
use crate::optimize::qkv_projection::pack_projections;
use crate::optimize::remove_dead_nodes;
use crate::{Graph, Result, ValueId};

/// Replaces every attention block found with a `FusedAttention` node whose kernel may use
/// `threads` threads; returns what was fused.
pub fn fuse_attention(graph: &mut Graph, threads: usize) -> Result<Vec<Fusion>> {
    let facts = value_facts(graph, threads);
    let consumers = graph.consumers();
    let found: Vec<Match> = (0..graph.nodes.len())
        .filter_map(|i| {
            Matcher {
                graph,
                facts: &facts,
                consumers: &consumers,
            }
            .at_softmax(i)
        })
        .collect();
    let mut fusions = Vec::new();
    let mut packed_any = false;
    for mut m in found {
        let mut absorbed: Vec<String> = m
            .nodes
            .iter()
            .map(|&i| {
                let n = &graph.nodes[i];
                format!("{} {}", n.op.op_type(), n.name)
            })
            .collect();
        m.op.slots = threads.max(1);
        // Three projections of one input: one product, read through windows.
        let layouts = [&m.op.q, &m.op.k, &m.op.v];
        if layouts
            .iter()
            .all(|l| l.split_heads.is_some() && l.columns.is_none())
        {
            if let [Some(q), Some(k), Some(v), ..] = m.inputs[..] {
                if let Some(packed) =
                    pack_projections(graph, &facts, &consumers, [q, k, v], &m.nodes)?
                {
                    absorbed.extend(packed.replaced);
                    m.inputs[..3].fill(Some(packed.value));
                    m.op.q.columns = Some(packed.windows[0]);
                    m.op.k.columns = Some(packed.windows[1]);
                    m.op.v.columns = Some(packed.windows[2]);
                    packed_any = true;
                }
            }
        }
        let node = &mut graph.nodes[m.last];
        node.op = Arc::new(m.op);
        node.inputs = m.inputs;
        fusions.push(Fusion {
            node: node.name.clone(),
            op_type: "FusedAttention".into(),
            absorbed,
        });
    }
    if packed_any {
        // The packed products were appended after their readers (dead-node removal walks the
        // graph in order).
        graph.sort()?;
    }
    if !fusions.is_empty() {
        remove_dead_nodes(graph);
    }
    Ok(fusions)
}

/// One attention block found.
struct Match {
    /// The node the fused one replaces (it keeps that node's name and output).
    last: usize,
    op: FusedAttention,
    inputs: Vec<Option<ValueId>>,
    /// Every node matched, in graph order (listed by `strata inspect`).
    nodes: Vec<usize>,
}

struct Matcher<'a> {
    graph: &'a Graph,
    facts: &'a [Fact],
    consumers: &'a [Vec<NodeId>],
}

/// A Q, K or V operand traced back to where it was computed.
struct Operand {
    source: ValueId,
    layout: OperandLayout,
    scale: f32,
    nodes: Vec<usize>,
}

impl Matcher<'_> {
    fn fact(&self, v: ValueId) -> Option<&Fact> {
        self.facts.get(v.0).filter(|f| f.is_defined())
    }

    fn producer(&self, v: ValueId) -> Option<usize> {
        match self.graph.values[v.0].source {
            ValueSource::Node(NodeId(n), 0) => Some(n),
            _ => None,
        }
    }

    fn op_type(&self, node: usize) -> &str {
        self.graph.nodes[node].op.op_type()
    }

    /// The node's inputs when it has exactly `N`, all present, and one output.
    fn inputs<const N: usize>(&self, node: usize) -> Option<[ValueId; N]> {
        let n = &self.graph.nodes[node];
        if n.outputs.len() != 1 || n.inputs.len() != N {
            return None;
        }
        let v: Vec<ValueId> = n.inputs.iter().copied().collect::<Option<_>>()?;
        v.try_into().ok()
    }

    /// The value of a constant f32 scalar (any shape of one element).
    fn scalar(&self, v: ValueId) -> Option<f32> {
        let t = self.fact(v)?.value.as_ref()?;
        if t.dtype() != DType::F32 || t.numel() != 1 {
            return None;
        }
        t.to_vec::<f32>().ok()?.first().copied()
    }

    /// `x · c` for a node computing `x / c`, `x · c` or `c · x` with a scalar constant `c`:
    /// returns (x, factor).
    fn scaling(&self, node: usize) -> Option<(ValueId, f32)> {
        let [a, b] = self.inputs::<2>(node)?;
        let factor = match self.op_type(node) {
            "Div" => 1.0 / self.scalar(b)?,
            "Mul" => match (self.scalar(a), self.scalar(b)) {
                (_, Some(c)) => c,
                (Some(c), None) => return self.same_dims(b, node).then_some((b, c)),
                _ => return None,
            },
            _ => return None,
        };
        (factor.is_finite() && self.same_dims(a, node)).then_some((a, factor))
    }

    /// Whether `node`'s output has the dims of `input` (a scalar operand broadcasts nothing).
    fn same_dims(&self, input: ValueId, node: usize) -> bool {
        let out = self.graph.nodes[node].outputs[0];
        match (self.fact(input), self.fact(out)) {
            (Some(a), Some(b)) => a.dims == b.dims && a.dtype == b.dtype,
            _ => false,
        }
    }

    /// The sole consumer of `v`, if it has one.
    fn next(&self, v: ValueId) -> Option<usize> {
        sole_consumer(self.graph, self.consumers, v)
    }

    fn at_softmax(&self, softmax: usize) -> Option<Match> {
        if self.op_type(softmax) != "Softmax" {
            return None;
        }
        let [s] = self.inputs::<1>(softmax)?;
        let s_fact = self.fact(s)?;
        // Rank 4: [B, H, Sq, Sk] scores of split heads; rank 3: [B, Sq, Sk] of one head.
        let rank = s_fact.rank();
        if s_fact.dtype != DType::F32 || !(3..=4).contains(&rank) {
            return None;
        }
        if !softmax_is_last_axis(self.graph.nodes[softmax].op.as_ref(), rank) {
            return None;
        }
        let p = self.graph.nodes[softmax].outputs[0];
        // P · V.
        let pv = self.next(p)?;
        let [p_in, v_in] = self.inputs::<2>(pv)?;
        if self.op_type(pv) != "MatMul" || p_in != p || v_in == p {
            return None;
        }
        let mut nodes = vec![softmax, pv];
        // The score chain, walked back from the Softmax: masks, then scales, then Q·Kᵀ.
        // (step, the tensor it reads), walked last-first.
        let mut steps: Vec<(MaskStep, ValueId)> = Vec::new();
        let (mut mask, mut cond) = (false, false);
        let mut scale = 1.0f32;
        let mut at = s;
        let qk = loop {
            let node = self.producer(at)?;
            // Nothing else may read an intermediate score tensor.
            self.next(at)?;
            nodes.push(node);
            match self.op_type(node) {
                "MatMul" => break node,
                "Add" if scale == 1.0 && !mask => {
                    let [a, b] = self.inputs::<2>(node)?;
                    let (chain, m) = if self.chain_side(a, b, node)? {
                        (a, b)
                    } else {
                        (b, a)
                    };
                    let mf = self.fact(m)?;
                    if mf.dtype != DType::F32
                        || !self.same_dims(chain, node)
                        || !aligns_with_heads(mf, rank)
                    {
                        return None;
                    }
                    mask = true;
                    steps.push((MaskStep::Add { input: 0 }, m));
                    at = chain;
                }
                "Where" if scale == 1.0 && !cond => {
                    let [c, x, y] = self.inputs::<3>(node)?;
                    let (chain, fill, keep_when) = match (self.scalar(x), self.scalar(y)) {
                        (None, Some(f)) => (x, f, true),
                        (Some(f), None) => (y, f, false),
                        _ => return None,
                    };
                    let cf = self.fact(c)?;
                    if cf.dtype != DType::Bool
                        || !self.same_dims(chain, node)
                        || !aligns_with_heads(cf, rank)
                    {
                        return None;
                    }
                    cond = true;
                    steps.push((
                        MaskStep::Select {
                            input: 0,
                            keep_when,
                            fill,
                        },
                        c,
                    ));
                    at = chain;
                }
                "Div" | "Mul" => {
                    let (x, factor) = self.scaling(node)?;
                    scale *= factor;
                    at = x;
                }
                _ => return None,
            }
        };
        // Walking back met the steps last-first.
        steps.reverse();
        let [q_in, k_in] = self.inputs::<2>(qk)?;
        let (q, k, v) = if rank == 4 {
            // The MatMul's operands are [B, H, Sq, D] and [B, H, D, Sk]: logical K swaps the
            // last two.
            (
                self.operand(q_in, [0, 1, 2, 3])?,
                self.operand(k_in, [0, 1, 3, 2])?,
                self.operand(v_in, [0, 1, 2, 3])?,
            )
        } else {
            // [B, Sq, D] and [B, D, Sk]: one head.
            (
                self.single_head_operand(q_in, [0, 1, 2])?,
                self.single_head_operand(k_in, [0, 2, 1])?,
                self.single_head_operand(v_in, [0, 1, 2])?,
            )
        };
        // The merge after P · V (one head's [B, Sq, Dv] is already merged).
        let mut last = pv;
        let mut out = if rank == 4 {
            OutputLayout::Heads
        } else {
            OutputLayout::Merged
        };
        if rank == 3 {
            // Nothing to merge.
        } else if let Some(t) = self.next(self.graph.nodes[pv].outputs[0]) {
            if self.op_type(t) == "Transpose"
                && self.permutation(t, 4) == Some([0, 2, 1, 3].to_vec())
            {
                last = t;
                out = OutputLayout::SeqHeads;
                nodes.push(t);
                if let Some(r) = self.next(self.graph.nodes[t].outputs[0]) {
                    if self.merges_heads(t, r) {
                        last = r;
                        out = OutputLayout::Merged;
                        nodes.push(r);
                    }
                }
            }
        }
        let mut inputs = vec![Some(q.source), Some(k.source), Some(v.source)];
        let steps = steps
            .into_iter()
            .map(|(step, tensor)| {
                let input = inputs.len();
                inputs.push(Some(tensor));
                match step {
                    MaskStep::Add { .. } => MaskStep::Add { input },
                    MaskStep::Select {
                        keep_when, fill, ..
                    } => MaskStep::Select {
                        input,
                        keep_when,
                        fill,
                    },
                }
            })
            .collect();
        let op = FusedAttention {
            q: q.layout,
            k: k.layout,
            v: v.layout,
            out,
            scale: scale * q.scale * k.scale * v.scale,
            steps,
            causal: false,
            zero_empty_rows: false,
            slots: 1,
        };
        if !op.scale.is_finite() {
            return None;
        }
        // The fused node must produce what the matched nodes did.
        let absent = Fact::absent();
        let in_facts: Vec<&Fact> = inputs
            .iter()
            .map(|v| v.and_then(|v| self.fact(v)).unwrap_or(&absent))
            .collect();
        let inferred = op.infer(&in_facts).ok()?;
        let want = self.fact(self.graph.nodes[last].outputs[0])?;
        if inferred[0].dims != want.dims || want.dtype != DType::F32 {
            return None;
        }
        nodes.extend(q.nodes);
        nodes.extend(k.nodes);
        nodes.extend(v.nodes);
        nodes.sort_unstable();
        nodes.dedup();
        Some(Match {
            last,
            op,
            inputs,
            nodes,
        })
    }

    /// For a binary node on the score chain: `true` when input `a` is the chain (the value
    /// produced by a node of the chain), `false` when `b` is. The chain side is the operand
    /// that is not broadcast and whose producer is a MatMul, scale or mask step.
    fn chain_side(&self, a: ValueId, b: ValueId, node: usize) -> Option<bool> {
        match (self.same_dims(a, node), self.same_dims(b, node)) {
            (true, false) => Some(true),
            (false, true) => Some(false),
            // Both full size (a [B, H, S, S] mask): the chain is the one computed from Q·Kᵀ.
            (true, true) => Some(self.leads_to_matmul(a) || !self.leads_to_matmul(b)),
            _ => None,
        }
    }

    /// Whether `v` is computed from a MatMul through at most a few scales and mask steps
    /// (following each node's first non-constant input).
    fn leads_to_matmul(&self, mut v: ValueId) -> bool {
        for _ in 0..4 {
            let Some(node) = self.producer(v) else {
                return false;
            };
            match self.op_type(node) {
                "MatMul" => return true,
                "Div" | "Mul" | "Add" | "Where" => {
                    let inputs = &self.graph.nodes[node].inputs;
                    let skip = usize::from(self.op_type(node) == "Where");
                    let next = inputs
                        .iter()
                        .skip(skip)
                        .flatten()
                        .find(|x| self.fact(**x).is_some_and(|f| f.value.is_none()));
                    match next {
                        Some(x) => v = *x,
                        None => return false,
                    }
                }
                _ => return false,
            }
        }
        false
    }

    /// Walks `value` back through Transposes (permuting `axes`, of rank `R`: `axes[j]` is the
    /// axis holding logical axis j) and scalar scales (multiplied together), up to the first
    /// other producer: returns that value, the axes there, the scale and the nodes walked.
    fn through_transposes_and_scales<const R: usize>(
        &self,
        value: ValueId,
        mut axes: [usize; R],
    ) -> Option<(ValueId, [usize; R], f32, Vec<usize>)> {
        let mut at = value;
        let mut scale = 1.0f32;
        let mut nodes = Vec::new();
        while let Some(node) = self.producer(at) {
            match self.op_type(node) {
                "Transpose" => {
                    let [x] = self.inputs::<1>(node)?;
                    let Some(perm) = self.permutation(node, R) else {
                        break;
                    };
                    axes = axes.map(|j| perm[j]);
                    at = x;
                }
                "Div" | "Mul" => {
                    let Some((x, factor)) = self.scaling(node) else {
                        break;
                    };
                    scale *= factor;
                    at = x;
                }
                _ => break,
            }
            nodes.push(node);
        }
        Some((at, axes, scale, nodes))
    }

    /// Traces a MatMul operand back through scalar scales, Transposes and the head split's
    /// Reshape. `axes[j]` is the operand axis holding logical axis j (of B, H, S, D).
    fn operand(&self, value: ValueId, axes: [usize; 4]) -> Option<Operand> {
        let f = self.fact(value)?;
        if f.dtype != DType::F32 || f.rank() != 4 {
            return None;
        }
        let (mut at, axes, mut scale, mut nodes) =
            self.through_transposes_and_scales(value, axes)?;
        let mut split = None;
        let reshape = self.producer(at).filter(|&n| self.op_type(n) == "Reshape");
        if let Some((node, (x, heads))) = reshape.and_then(|n| Some((n, self.head_split(n)?))) {
            split = Some(heads);
            at = x;
            nodes.push(node);
            // Scales before the split still count.
            while let Some(p) = self.producer(at) {
                match self.scaling(p) {
                    Some((x, factor)) if matches!(self.op_type(p), "Div" | "Mul") => {
                        scale *= factor;
                        nodes.push(p);
                        at = x;
                    }
                    _ => break,
                }
            }
        }
        if split.is_none() && self.fact(at)?.rank() != 4 {
            return None;
        }
        // Split heads cut from a wider projection (GPT-2's Q, K and V side by side, then a
        // Split): read the window of the projection itself, so the Split copies nothing.
        let mut columns = None;
        if split.is_some() {
            if let Some((whole, window)) = self.last_axis_split(at) {
                at = whole;
                columns = Some(window);
            }
        }
        Some(Operand {
            source: at,
            layout: OperandLayout {
                split_heads: split,
                perm: axes,
                columns,
            },
            scale,
            nodes,
        })
    }

    /// A rank-3 MatMul operand of single-head attention traced back through Transposes and
    /// scalar scales to a `[x0, x1, D]` value, read as the head split `[x0, x1, 1, D]` would
    /// be. `axes[j]` is the operand axis holding logical axis j (of B, S, D); D must end on the
    /// last axis.
    fn single_head_operand(&self, value: ValueId, axes: [usize; 3]) -> Option<Operand> {
        let f = self.fact(value)?;
        if f.dtype != DType::F32 || f.rank() != 3 {
            return None;
        }
        let (source, axes, scale, nodes) = self.through_transposes_and_scales(value, axes)?;
        if axes[2] != 2 {
            return None;
        }
        Some(Operand {
            source,
            layout: OperandLayout {
                split_heads: Some(1),
                // B and S where the traced value holds them, H the split's axis 2 of size 1.
                perm: [axes[0], 2, axes[1], 3],
                columns: None,
            },
            scale,
            nodes,
        })
    }

    /// When `v` is output `i` of a Split of a rank-3 `[x0, x1, W]` along its last axis (told
    /// by the facts: every output keeps x0 and x1 and their widths add up to W), the Split's
    /// input and the window of columns `v` is.
    fn last_axis_split(&self, v: ValueId) -> Option<(ValueId, Columns)> {
        let ValueSource::Node(NodeId(node), _) = self.graph.values[v.0].source else {
            return None;
        };
        if self.op_type(node) != "Split" {
            return None;
        }
        let n = &self.graph.nodes[node];
        let whole = (*n.inputs.first()?)?;
        let dims = self.fact(whole)?.concrete()?;
        let &[x0, x1, all] = dims.as_slice() else {
            return None;
        };
        let (mut offset, mut window) = (0, None);
        for &out in &n.outputs {
            let d = self.fact(out)?.concrete()?;
            let &[y0, y1, width] = d.as_slice() else {
                return None;
            };
            if (y0, y1) != (x0, x1) {
                return None;
            }
            if out == v {
                window = Some(Columns { offset, width });
            }
            offset += width;
        }
        (offset == all).then_some(())?;
        Some((whole, window?))
    }

    /// The head split: Reshape of `[x0, x1, H·D]` into `[x0, x1, H, D]` with H and D known.
    /// Returns the reshaped value and H.
    fn head_split(&self, node: usize) -> Option<(ValueId, usize)> {
        let [x, _shape] = self.inputs::<2>(node)?;
        let (xf, yf) = (self.fact(x)?, self.fact(self.graph.nodes[node].outputs[0])?);
        match (&xf.dims[..], &yf.dims[..]) {
            ([a, b, Dim::Known(c)], [a2, b2, Dim::Known(h), Dim::Known(d)])
                if same(a, a2) && same(b, b2) && h * d == *c && *h > 0 =>
            {
                Some((x, *h))
            }
            _ => None,
        }
    }

    /// Whether Reshape `r` turns Transpose `t`'s `[B, S, H, Dv]` into `[B, S, H·Dv]`.
    fn merges_heads(&self, t: usize, r: usize) -> bool {
        if self.op_type(r) != "Reshape" || self.inputs::<2>(r).is_none() {
            return false;
        }
        let (Some(tf), Some(rf)) = (
            self.fact(self.graph.nodes[t].outputs[0]),
            self.fact(self.graph.nodes[r].outputs[0]),
        ) else {
            return false;
        };
        match (&tf.dims[..], &rf.dims[..]) {
            ([b, s, Dim::Known(h), Dim::Known(d)], [b2, s2, Dim::Known(hd)]) => {
                same(b, b2) && same(s, s2) && h * d == *hd
            }
            _ => false,
        }
    }

    /// The permutation a Transpose node applies to a rank-`rank` input, read from what it infers
    /// for distinct dims (output axis i is input axis perm[i]).
    fn permutation(&self, node: usize, rank: usize) -> Option<Vec<usize>> {
        permutation_of(self.graph.nodes[node].op.as_ref(), rank)
    }
}

/// Whether a mask of `fact` broadcast onto scores of rank `rank` means the same broadcast onto
/// the fused node's `[B, H, Sq, Sk]`: always for rank-4 scores; for one head's `[B, Sq, Sk]`
/// only when the mask has no batch axis of its own (rank 2, or a leading 1), since the fused
/// node aligns a rank-3 mask's first axis with H.
fn aligns_with_heads(fact: &Fact, rank: usize) -> bool {
    match (rank, fact.rank()) {
        (4, r) => r <= 4,
        (3, r) if r <= 2 => true,
        (3, 3) => fact.dims[0] == Dim::Known(1),
        _ => false,
    }
}

/// Two dims known to be equal (unknown dims are not).
fn same(a: &Dim, b: &Dim) -> bool {
    a == b && *a != Dim::Unknown
}

/// See [`Matcher::permutation`].
pub(super) fn permutation_of(op: &dyn Operator, rank: usize) -> Option<Vec<usize>> {
    let dims: Vec<usize> = (0..rank).map(|i| i + 2).collect();
    let out = op.infer(&[&Fact::known(DType::F32, &dims)]).ok()?;
    let out = out.first()?.concrete()?;
    if out.len() != rank {
        return None;
    }
    out.iter()
        .map(|d| d.checked_sub(2).filter(|&i| i < rank))
        .collect()
}

/// Whether a Softmax node normalizes each row of the last axis of a rank-`rank` input (opset 13's
/// `axis = -1`, or an older opset's axis that flattens only the last axis), found by running it
/// on a small input.
fn softmax_is_last_axis(op: &dyn Operator, rank: usize) -> bool {
    let mut dims = vec![2usize; rank];
    dims[rank - 1] = 3;
    let n: usize = dims.iter().product();
    let values: Vec<f32> = (0..n).map(|i| ((i * 7) % 11) as f32 * 0.25).collect();
    let Ok(x) = Tensor::from_slice(&values, &dims) else {
        return false;
    };
    let options = EvalOptions {
        device: strata_core::Device::Cpu,
        kind: MemoryKind::Workspace,
        threads: 1,
        detach_views: false,
    };
    let Ok(out) = run_operator(op, None, &[&x], 1, &options) else {
        return false;
    };
    let Some(y) = out.first().and_then(|t| t.to_vec::<f32>().ok()) else {
        return false;
    };
    values.chunks(3).zip(y.chunks(3)).all(|(x, y)| {
        let m = x.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let z: f32 = x.iter().map(|v| (v - m).exp()).sum();
        x.iter()
            .zip(y)
            .all(|(v, y)| ((v - m).exp() / z - y).abs() < 1e-5)
    }) && y.len() == n
}
