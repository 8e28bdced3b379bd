//! GELU written out as element-wise ops becomes one com.microsoft `Gelu` (erf form),
//! `FastGelu` (tanh form) or `QuickGelu` (sigmoid form) node, which a MatMul before it then
//! takes as a GEMM epilogue.
//!
//! Forms matched, with the gate `g` computed from `x`:
//! - erf: `g = 1 + erf(x / √2)` (or `x · (1/√2)`, either operand order);
//! - tanh: `g = 1 + tanh(√(2/π) · (x + 0.044715 · x³))`, the cube as `Pow(x, 3)` or two Muls,
//!   or the inner term as `x · (1 + 0.044715 · x²)`;
//!
//! then `y = x · g · 0.5` in any association (`(x·g)·0.5`, `(x·0.5)·g`, `x·(g·0.5)`);
//! - sigmoid: `y = x · sigmoid(α · x)` (QuickGelu, α = 1.702 as CLIP exports it; any finite scalar
//!   constant α, either operand order; `x · sigmoid(x)`, SiLU, is α = 1).
//!
//! Every intermediate must be read only inside the pattern, and constants must match to a
//! relative 1e-3 (1e-4 for √2).

use strata_ops::{Attr, Attributes};

use crate::optimize::epilogue::{value_facts, Fusion};
use crate::optimize::fuse::remove_nodes;
use crate::optimize::pattern::{describe, operator, replace, View};
use crate::{Graph, Result, ValueId};

const SQRT_2: f64 = std::f64::consts::SQRT_2;
const FRAC_1_SQRT_2: f64 = std::f64::consts::FRAC_1_SQRT_2;
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
const CUBIC: f64 = 0.044715;

/// Which GELU a match computes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Form {
    Erf,
    Tanh,
    Sigmoid { alpha: f32 },
}

/// One match: the input, the nodes it spans (the last writes the result) and its form.
struct Match {
    x: ValueId,
    nodes: Vec<usize>,
    form: Form,
}

/// Fuses every GELU pattern; returns what was fused.
pub fn fuse_gelu(graph: &mut Graph, threads: usize) -> Result<Vec<Fusion>> {
    let facts = value_facts(graph, threads);
    let consumers = graph.consumers();
    let mut found = Vec::new();
    {
        let view = View {
            graph,
            facts: &facts,
            consumers: &consumers,
        };
        for node in 0..graph.nodes.len() {
            let m = match graph.nodes[node].op.op_type() {
                "Erf" => match_erf(&view, node),
                "Tanh" => match_tanh(&view, node),
                "Sigmoid" => match_sigmoid(&view, node),
                _ => None,
            };
            if let Some(m) = m {
                found.push(m);
            }
        }
    }
    let mut dropped = Vec::new();
    let mut fusions = Vec::new();
    for m in found {
        if m.nodes.iter().any(|n| dropped.contains(n)) {
            continue;
        }
        let last = *m.nodes.last().expect("a match spans nodes");
        let output = graph.nodes[last].outputs[0];
        let (op_type, attrs) = match m.form {
            Form::Erf => ("Gelu", Attributes::new("Gelu")),
            Form::Tanh => ("FastGelu", Attributes::new("FastGelu")),
            Form::Sigmoid { alpha } => (
                "QuickGelu",
                Attributes::new("QuickGelu").with("alpha", Attr::Float(alpha)),
            ),
        };
        let op = operator(op_type, "com.microsoft", 1, attrs, 1, 1)?;
        let absorbed = m.nodes.iter().map(|&n| describe(graph, n)).collect();
        let name = graph.nodes[last].name.clone();
        replace(
            graph,
            last,
            op,
            vec![Some(m.x)],
            output,
            &m.nodes,
            &mut dropped,
        );
        fusions.push(Fusion {
            node: name,
            op_type: op_type.to_string(),
            absorbed,
        });
    }
    remove_nodes(graph, &dropped);
    graph.sort()?;
    Ok(fusions)
}

/// `x / √2` or `x · (1/√2)` feeding the Erf: returns x and the node.
fn erf_argument(v: &View<'_>, erf: usize) -> Option<(ValueId, usize)> {
    let arg = v.graph.nodes[erf].inputs.first().copied().flatten()?;
    if let Some(div) = v.producer(arg, "Div") {
        let (x, c) = v.pair(div)?;
        return v.is_const(c, SQRT_2, 1e-4).then_some((x, div));
    }
    let mul = v.producer(arg, "Mul")?;
    let (a, b) = v.pair(mul)?;
    if v.is_const(b, FRAC_1_SQRT_2, 1e-4) {
        Some((a, mul))
    } else if v.is_const(a, FRAC_1_SQRT_2, 1e-4) {
        Some((b, mul))
    } else {
        None
    }
}

fn match_erf(v: &View<'_>, erf: usize) -> Option<Match> {
    let (x, scale) = erf_argument(v, erf)?;
    if !v.read_only_by(v.out(scale), &[erf]) {
        return None;
    }
    let mut nodes = vec![scale, erf];
    let tail = gate_and_product(v, x, v.out(erf))?;
    nodes.extend(tail);
    Some(Match {
        x,
        nodes,
        form: Form::Erf,
    })
}

fn match_tanh(v: &View<'_>, tanh: usize) -> Option<Match> {
    let arg = v.graph.nodes[tanh].inputs.first().copied().flatten()?;
    // √(2/π) · inner, either order.
    let scale = v.producer(arg, "Mul")?;
    let (a, b) = v.pair(scale)?;
    let inner = if v.is_const(b, SQRT_2_OVER_PI, 1e-3) {
        a
    } else if v.is_const(a, SQRT_2_OVER_PI, 1e-3) {
        b
    } else {
        return None;
    };
    if !v.read_only_by(arg, &[tanh]) {
        return None;
    }
    let (x, inner_nodes) = cubic_inner(v, inner)?;
    if !v.read_only_by(inner, &[scale]) {
        return None;
    }
    let mut nodes = inner_nodes;
    nodes.extend([scale, tanh]);
    let tail = gate_and_product(v, x, v.out(tanh))?;
    nodes.extend(tail);
    Some(Match {
        x,
        nodes,
        form: Form::Tanh,
    })
}

/// `y = x · sigmoid(α · x)` around the Sigmoid node `sigmoid` (α a finite scalar constant, 1
/// when the Sigmoid reads x itself). The result must have x's dims: a constant that broadcasts
/// x wider is not this pattern.
fn match_sigmoid(v: &View<'_>, sigmoid: usize) -> Option<Match> {
    let arg = v.graph.nodes[sigmoid].inputs.first().copied().flatten()?;
    let s = v.out(sigmoid);
    let last = v.sole_reader(s, "Mul")?;
    let x = v.other(last, s)?;
    let mut nodes = Vec::new();
    let alpha = if arg == x {
        1.0
    } else {
        let scale = v.producer(arg, "Mul")?;
        let (a, b) = v.pair(scale)?;
        let c = if a == x {
            b
        } else if b == x {
            a
        } else {
            return None;
        };
        if !v.read_only_by(arg, &[sigmoid]) {
            return None;
        }
        nodes.push(scale);
        v.scalar(c)? as f32
    };
    let (xf, yf) = (v.fact(x)?, v.fact(v.out(last))?);
    if !alpha.is_finite() || !xf.dtype.is_float() || xf.dims != yf.dims || xf.dtype != yf.dtype {
        return None;
    }
    nodes.extend([sigmoid, last]);
    Some(Match {
        x,
        nodes,
        form: Form::Sigmoid { alpha },
    })
}

/// `x + 0.044715 · x³` or `x · (1 + 0.044715 · x²)`: returns x and the nodes, in order.
fn cubic_inner(v: &View<'_>, inner: ValueId) -> Option<(ValueId, Vec<usize>)> {
    if let Some(add) = v.producer(inner, "Add") {
        let (a, b) = v.pair(add)?;
        // One operand is x, the other 0.044715 · x³.
        for (x, term) in [(a, b), (b, a)] {
            if let Some(mut nodes) = scaled_power(v, term, x, 3) {
                nodes.push(add);
                return Some((x, nodes));
            }
        }
        return None;
    }
    let mul = v.producer(inner, "Mul")?;
    let (a, b) = v.pair(mul)?;
    for (x, factor) in [(a, b), (b, a)] {
        let Some(add) = v.producer(factor, "Add") else {
            continue;
        };
        let Some(term) = v.other(add, one_operand(v, add)?) else {
            continue;
        };
        if let Some(mut nodes) = scaled_power(v, term, x, 2) {
            if v.read_only_by(factor, &[mul]) {
                nodes.extend([add, mul]);
                return Some((x, nodes));
            }
        }
    }
    None
}

/// The operand of a two-input node that is the constant 1.
fn one_operand(v: &View<'_>, node: usize) -> Option<ValueId> {
    let (a, b) = v.pair(node)?;
    [a, b].into_iter().find(|&c| v.is_const(c, 1.0, 1e-6))
}

/// `term = 0.044715 · x^power` (either order), the power as `Pow(x, p)` or a chain of Muls of
/// x; every intermediate read only here. Returns the nodes in order.
fn scaled_power(v: &View<'_>, term: ValueId, x: ValueId, power: u32) -> Option<Vec<usize>> {
    let mul = v.producer(term, "Mul")?;
    let (a, b) = v.pair(mul)?;
    let p = if v.is_const(b, CUBIC, 1e-3) {
        a
    } else if v.is_const(a, CUBIC, 1e-3) {
        b
    } else {
        return None;
    };
    if !v.read_only_by(term, &[consumer_of(v, term)?]) {
        return None;
    }
    let mut nodes = power_of(v, p, x, power)?;
    if !v.read_only_by(p, &[mul]) {
        return None;
    }
    nodes.push(mul);
    Some(nodes)
}

fn consumer_of(v: &View<'_>, value: ValueId) -> Option<usize> {
    match v.consumers[value.0].as_slice() {
        [only] => Some(only.0),
        _ => None,
    }
}

/// `value = x^power` as `Pow(x, power)`, `x · x` (power 2) or `(x · x) · x` in either order
/// (power 3). Returns the nodes in order.
fn power_of(v: &View<'_>, value: ValueId, x: ValueId, power: u32) -> Option<Vec<usize>> {
    if let Some(pow) = v.producer(value, "Pow") {
        let (base, e) = v.pair(pow)?;
        return (base == x && v.is_const(e, f64::from(power), 0.0)).then(|| vec![pow]);
    }
    let mul = v.producer(value, "Mul")?;
    let (a, b) = v.pair(mul)?;
    match power {
        2 => (a == x && b == x).then(|| vec![mul]),
        3 => {
            let square = if a == x {
                b
            } else if b == x {
                a
            } else {
                return None;
            };
            let mut nodes = power_of(v, square, x, 2)?;
            if !v.read_only_by(square, &[mul]) {
                return None;
            }
            nodes.push(mul);
            Some(nodes)
        }
        _ => None,
    }
}

/// From the Erf/Tanh output `t`: `g = t + 1`, then `y = x · g · 0.5` in any association.
/// Returns the nodes after the Erf/Tanh, the last writing y.
fn gate_and_product(v: &View<'_>, x: ValueId, t: ValueId) -> Option<Vec<usize>> {
    let add = v.sole_reader(t, "Add")?;
    if !v.with_const(add, t, 1.0, 1e-6) {
        return None;
    }
    let g = v.out(add);
    let mul = v.sole_reader(g, "Mul")?;
    let other = v.other(mul, g)?;
    let half = |node: usize, value: ValueId| v.with_const(node, value, 0.5, 1e-6);
    if other == x {
        // (x · g) · 0.5
        let m = v.out(mul);
        let last = v.sole_reader(m, "Mul")?;
        return half(last, m).then(|| vec![add, mul, last]);
    }
    if half(mul, g) {
        // x · (g · 0.5)
        let h = v.out(mul);
        let last = v.sole_reader(h, "Mul")?;
        return (v.other(last, h)? == x).then(|| vec![add, mul, last]);
    }
    // (x · 0.5) · g
    let xh = v.producer(other, "Mul")?;
    let ok =
        v.other(xh, x).is_some_and(|c| v.is_const(c, 0.5, 1e-6)) && v.read_only_by(other, &[mul]);
    ok.then(|| vec![xh, add, mul])
}
