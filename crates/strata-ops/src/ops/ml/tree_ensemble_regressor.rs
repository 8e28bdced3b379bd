//! TreeEnsembleRegressor (ai.onnx.ml opsets 1 and 3): the older list form of a forest. Nodes are
//! named by (`nodes_treeids`, `nodes_nodeids`) with string `nodes_modes` (BRANCH_LEQ, BRANCH_LT,
//! BRANCH_GTE, BRANCH_GT, BRANCH_EQ, BRANCH_NEQ, LEAF); child ids name nodes of the same tree; a
//! tree's root is its first node; leaves get their (target, weight) contributions from the
//! `target_*` lists. Thresholds, weights and base values come as floats or, from opset 3, as
//! `*_as_tensor` attributes. X is f32, f64, int32 or int64 [N, F] (or [F], one row); Y is
//! f32 [N, n_targets]: leaves aggregated per target (SUM, AVERAGE over the trees, MIN, MAX),
//! plus `base_values`, then `post_transform` (NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO, PROBIT).
//!
//! A NaN feature follows `nodes_missing_value_tracks_true` whatever the comparison (the spec and
//! the ONNX reference; onnxruntime sends NaN down BRANCH_NEQ's true branch). MIN and MAX start
//! from the largest / smallest finite value of X's float type (f32 for integer X), as in the
//! ONNX reference, so a target no leaf reaches keeps it (f64's becomes ±inf in the f32 output). The trees compile
//! into the shared [`Forest`] walker.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use strata_core::{DType, Device, Tensor};

use super::post_transform::PostTransform;
use super::tree_ensemble::Aggregate;
use super::tree_forest::{BranchSpec, Comparison, Contribution, FeatureValue, Forest, Next};
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_plain;
use crate::support::scratch::scratch_as;
use crate::{
    Attr, Attributes, Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator,
};

const OP: &str = "TreeEnsembleRegressor";

#[derive(Debug)]
struct Model {
    forest: Forest,
    aggregate: Aggregate,
    /// Added per target after aggregation (empty: none).
    base_values: Vec<f64>,
    post_transform: PostTransform,
}

#[derive(Debug, Clone)]
pub struct TreeEnsembleRegressor {
    model: Arc<Model>,
}

fn required_attr<T>(name: &str, value: Option<T>) -> OpResult<T> {
    value.ok_or_else(|| OpError::attribute(OP, name, "is required"))
}

/// A list of floats given either as `name` (floats) or `name_as_tensor` (opset 3).
fn float_list(attrs: &Attributes, name: &str) -> OpResult<Option<Vec<f64>>> {
    let tensor_name = format!("{name}_as_tensor");
    match (attrs.floats(name)?, attrs.tensor(&tensor_name)?) {
        (Some(_), Some(_)) => Err(OpError::attribute(
            OP,
            name,
            format!("is given both as floats and as {tensor_name}"),
        )),
        (Some(v), None) => Ok(Some(v.into_iter().map(f64::from).collect())),
        (None, Some(t)) => match t.dtype() {
            DType::F32 => Ok(Some(
                t.to_vec::<f32>()?.into_iter().map(f64::from).collect(),
            )),
            DType::F64 => Ok(Some(t.to_vec::<f64>()?)),
            other => Err(OpError::attribute(
                OP,
                &tensor_name,
                format!("expected a float or double tensor, got {other}"),
            )),
        },
        (None, None) => Ok(None),
    }
}

fn strings<'a>(attrs: &'a Attributes, name: &str) -> OpResult<&'a [String]> {
    match attrs.get(name) {
        Some(Attr::Strings(v)) => Ok(v),
        Some(other) => Err(OpError::attribute(
            OP,
            name,
            format!("expected a list of strings, got {other:?}"),
        )),
        None => Err(OpError::attribute(OP, name, "is required")),
    }
}

fn check_len(name: &str, len: usize, expected: usize, of: &str) -> OpResult<()> {
    if len == expected {
        Ok(())
    } else {
        Err(OpError::attribute(
            OP,
            name,
            format!("has {len} entries for {expected} {of}"),
        ))
    }
}

fn comparison(mode: &str) -> OpResult<Option<Comparison>> {
    Ok(Some(match mode {
        "BRANCH_LEQ" => Comparison::Leq,
        "BRANCH_LT" => Comparison::Lt,
        "BRANCH_GTE" => Comparison::Gte,
        "BRANCH_GT" => Comparison::Gt,
        "BRANCH_EQ" => Comparison::Eq,
        "BRANCH_NEQ" => Comparison::Neq,
        "LEAF" => return Ok(None),
        other => {
            return Err(OpError::attribute(
                OP,
                "nodes_modes",
                format!("{other:?} is not a BRANCH_* mode or LEAF"),
            ))
        }
    }))
}

impl TreeEnsembleRegressor {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let a = ctx.attrs;
        let ints = |name: &str| -> OpResult<Vec<i64>> { required_attr(name, a.ints(name)?) };
        let tree_ids = ints("nodes_treeids")?;
        let n = tree_ids.len();
        let node_ids = ints("nodes_nodeids")?;
        let features = ints("nodes_featureids")?;
        let true_ids = ints("nodes_truenodeids")?;
        let false_ids = ints("nodes_falsenodeids")?;
        let modes = strings(a, "nodes_modes")?;
        let values = float_list(a, "nodes_values")?.unwrap_or_else(|| vec![0.0; n]);
        let missing = a
            .ints("nodes_missing_value_tracks_true")?
            .unwrap_or_else(|| vec![0; n]);
        for (name, len) in [
            ("nodes_nodeids", node_ids.len()),
            ("nodes_featureids", features.len()),
            ("nodes_truenodeids", true_ids.len()),
            ("nodes_falsenodeids", false_ids.len()),
            ("nodes_modes", modes.len()),
            ("nodes_values", values.len()),
            ("nodes_missing_value_tracks_true", missing.len()),
        ] {
            check_len(name, len, n, "nodes")?;
        }

        // Positions by (tree, node) id; branch and leaf numbers by position.
        let mut position = HashMap::with_capacity(n);
        for (i, key) in tree_ids.iter().zip(&node_ids).enumerate() {
            if position.insert(key, i).is_some() {
                return Err(OpError::attribute(
                    OP,
                    "nodes_nodeids",
                    format!("node {} of tree {} appears twice", key.1, key.0),
                ));
            }
        }
        let comparisons = modes
            .iter()
            .map(|m| comparison(m))
            .collect::<OpResult<Vec<_>>>()?;
        let mut number = Vec::with_capacity(n);
        let (mut branches_seen, mut leaves_seen) = (0u32, 0u32);
        for c in &comparisons {
            number.push(match c {
                Some(_) => {
                    branches_seen += 1;
                    Next::Node(branches_seen - 1)
                }
                None => {
                    leaves_seen += 1;
                    Next::Leaf(leaves_seen - 1)
                }
            });
        }
        let resolve = |tree: i64, node: i64, what: &str| -> OpResult<Next> {
            position
                .get(&(&tree, &node))
                .map(|&i| number[i])
                .ok_or_else(|| {
                    OpError::attribute(OP, what, format!("tree {tree} has no node {node}"))
                })
        };

        let mut branches = Vec::with_capacity(branches_seen as usize);
        for i in 0..n {
            let Some(comparison) = comparisons[i] else {
                continue;
            };
            let feature = usize::try_from(features[i]).map_err(|_| {
                OpError::attribute(
                    OP,
                    "nodes_featureids",
                    format!("{} is negative", features[i]),
                )
            })?;
            branches.push(BranchSpec {
                feature,
                comparison,
                threshold: values[i],
                members: Vec::new(),
                nan_goes_true: missing[i] != 0,
                if_true: resolve(tree_ids[i], true_ids[i], "nodes_truenodeids")?,
                if_false: resolve(tree_ids[i], false_ids[i], "nodes_falsenodeids")?,
            });
        }

        let targets = usize::try_from(a.int_or("n_targets", 1)?)
            .map_err(|_| OpError::attribute(OP, "n_targets", "is negative"))?;
        let target_trees = ints("target_treeids")?;
        let target_nodes = ints("target_nodeids")?;
        let target_ids = ints("target_ids")?;
        let weights = required_attr("target_weights", float_list(a, "target_weights")?)?;
        let k = target_trees.len();
        check_len("target_nodeids", target_nodes.len(), k, "target_treeids")?;
        check_len("target_ids", target_ids.len(), k, "target_treeids")?;
        check_len("target_weights", weights.len(), k, "target_treeids")?;
        let mut leaves = vec![Vec::new(); leaves_seen as usize];
        for j in 0..k {
            let leaf = match resolve(target_trees[j], target_nodes[j], "target_nodeids")? {
                Next::Leaf(l) => l,
                Next::Node(_) => {
                    return Err(OpError::attribute(
                        OP,
                        "target_nodeids",
                        format!(
                            "node {} of tree {} is a branch, not a LEAF",
                            target_nodes[j], target_trees[j]
                        ),
                    ))
                }
            };
            let target = u32::try_from(target_ids[j]).map_err(|_| {
                OpError::attribute(OP, "target_ids", format!("{} is negative", target_ids[j]))
            })?;
            leaves[leaf as usize].push(Contribution {
                target,
                weight: weights[j],
            });
        }

        // Trees in id order; each tree's root is its first node.
        let mut roots = BTreeMap::new();
        for (i, &t) in tree_ids.iter().enumerate() {
            roots.entry(t).or_insert(number[i]);
        }
        let roots: Vec<Next> = roots.into_values().collect();

        let base_values = float_list(a, "base_values")?.unwrap_or_default();
        if !base_values.is_empty() {
            check_len("base_values", base_values.len(), targets, "targets")?;
        }
        let aggregate = match a.string_or("aggregate_function", "SUM")?.as_str() {
            "AVERAGE" => Aggregate::Average,
            "SUM" => Aggregate::Sum,
            "MIN" => Aggregate::Min,
            "MAX" => Aggregate::Max,
            other => {
                return Err(OpError::attribute(
                    OP,
                    "aggregate_function",
                    format!("{other:?} is not AVERAGE, SUM, MIN or MAX"),
                ))
            }
        };
        let post_transform = PostTransform::from_name(OP, &a.string_or("post_transform", "NONE")?)?;
        let forest = Forest::new(OP, &branches, &leaves, &roots, targets)?;
        Ok(Box::new(TreeEnsembleRegressor {
            model: Arc::new(Model {
                forest,
                aggregate,
                base_values,
                post_transform,
            }),
        }))
    }
}

fn check_dtype(dtype: DType) -> OpResult<()> {
    match dtype {
        DType::F32 | DType::F64 | DType::I32 | DType::I64 => Ok(()),
        _ => Err(OpError::DType {
            op: OP.into(),
            index: 0,
            expected: "float, double, int32 or int64".into(),
            actual: dtype,
        }),
    }
}

/// Rows and features of X: [N, F], or [F] as one row.
fn rows_and_features(dims: &[usize]) -> OpResult<(usize, usize)> {
    match *dims {
        [f] => Ok((1, f)),
        [n, f] => Ok((n, f)),
        _ => Err(OpError::shape(
            OP,
            format!("X must be [N, F] or [F], got {dims:?}"),
        )),
    }
}

impl Operator for TreeEnsembleRegressor {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required(OP, inputs, 0)?;
        check_dtype(x.dtype)?;
        let (n, f) = match x.dims.as_slice() {
            [f] => (Dim::Known(1), f),
            [n, f] => (n.clone(), f),
            other => {
                return Err(OpError::shape(
                    OP,
                    format!("X must be [N, F] or [F], got {other:?}"),
                ))
            }
        };
        self.model.forest.check_features(OP, f.known())?;
        Ok(vec![Fact::new(
            DType::F32,
            vec![n, Dim::Known(self.model.forest.targets())],
        )])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let x = required(OP, inputs, 0)?;
        check_dtype(x.dtype)?;
        cpu_plain(OP, x.dtype, device)?;
        Ok(Box::new(self.clone()))
    }

    /// One row of f64 scores.
    fn scratch_bytes(&self, _inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        self.model.forest.score_scratch_bytes(OP)
    }
}

impl Model {
    fn evaluate<T: FeatureValue>(
        &self,
        x: &Tensor,
        features: usize,
        out: &mut [f32],
        scores: &mut [f64],
        largest: f64,
    ) -> OpResult<()> {
        let r = x.read::<T>()?;
        let src = r
            .as_slice()
            .ok_or_else(|| OpError::kernel(OP, "X is not contiguous"))?;
        let targets = self.forest.targets();
        if targets == 0 {
            return Ok(());
        }
        let start = match self.aggregate {
            Aggregate::Average | Aggregate::Sum => 0.0,
            Aggregate::Min => largest,
            Aggregate::Max => -largest,
        };
        for (row, out_row) in out.chunks_exact_mut(targets).enumerate() {
            let features_row = &src[row * features..(row + 1) * features];
            scores.fill(start);
            for tree in 0..self.forest.trees() {
                for c in self.forest.leaf_for(tree, features_row) {
                    let s = &mut scores[c.target as usize];
                    *s = match self.aggregate {
                        Aggregate::Average | Aggregate::Sum => *s + c.weight,
                        Aggregate::Min => s.min(c.weight),
                        Aggregate::Max => s.max(c.weight),
                    };
                }
            }
            if self.aggregate == Aggregate::Average && self.forest.trees() > 0 {
                let trees = self.forest.trees() as f64;
                scores.iter_mut().for_each(|s| *s /= trees);
            }
            for (s, b) in scores.iter_mut().zip(&self.base_values) {
                *s += b;
            }
            self.post_transform.apply(scores);
            for (o, &s) in out_row.iter_mut().zip(scores.iter()) {
                *o = s as f32;
            }
        }
        Ok(())
    }
}

impl Kernel for TreeEnsembleRegressor {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let m = &*self.model;
        let (x, y) = (io.input(0), io.output(0));
        let targets = m.forest.targets();
        let (n, f) = rows_and_features(x.dims())?;
        m.forest.check_features(OP, Some(f))?;
        if y.dtype() != DType::F32 || y.dims() != [n, targets] {
            return Err(OpError::kernel(
                OP,
                format!(
                    "Y {} {:?} does not fit X {:?} and {targets} targets",
                    y.dtype(),
                    y.dims(),
                    x.dims()
                ),
            ));
        }
        let mut w = y.write::<f32>()?;
        let out = w
            .as_mut_slice()
            .ok_or_else(|| OpError::kernel(OP, "output is not contiguous"))?;
        let scratch = io
            .scratch
            .ok_or_else(|| OpError::kernel(OP, "no scratch space was planned"))?;
        let mut s = scratch.write_bytes(OP)?;
        let scores = scratch_as::<f64>(OP, s.bytes())?;
        let scores = scores
            .get_mut(..targets)
            .ok_or_else(|| OpError::kernel(OP, "scratch is too small"))?;
        let f32_max = f64::from(f32::MAX);
        match x.dtype() {
            DType::F32 => m.evaluate::<f32>(x, f, out, scores, f32_max),
            DType::F64 => m.evaluate::<f64>(x, f, out, scores, f64::MAX),
            DType::I32 => m.evaluate::<i32>(x, f, out, scores, f32_max),
            DType::I64 => m.evaluate::<i64>(x, f, out, scores, f32_max),
            other => check_dtype(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strs(v: &[&str]) -> Attr {
        Attr::Strings(v.iter().map(|s| s.to_string()).collect())
    }

    /// Tree 0: x0 <= 1 ? leaf 1 (t0 += 1, t1 += 10) : leaf 2 (t0 += 2); tree 1: one leaf
    /// (t1 += 5). Node ids are not positions.
    fn model(aggregate: &str) -> Attributes {
        Attributes::new(OP)
            .with("nodes_treeids", Attr::Ints(vec![0, 0, 0, 1]))
            .with("nodes_nodeids", Attr::Ints(vec![0, 2, 1, 0]))
            .with("nodes_featureids", Attr::Ints(vec![0, 0, 0, 0]))
            .with("nodes_modes", strs(&["BRANCH_LEQ", "LEAF", "LEAF", "LEAF"]))
            .with("nodes_values", Attr::Floats(vec![1.0, 0.0, 0.0, 0.0]))
            .with("nodes_truenodeids", Attr::Ints(vec![1, 0, 0, 0]))
            .with("nodes_falsenodeids", Attr::Ints(vec![2, 0, 0, 0]))
            .with(
                "nodes_missing_value_tracks_true",
                Attr::Ints(vec![1, 0, 0, 0]),
            )
            .with("target_treeids", Attr::Ints(vec![0, 0, 0, 1]))
            .with("target_nodeids", Attr::Ints(vec![1, 1, 2, 0]))
            .with("target_ids", Attr::Ints(vec![0, 1, 0, 1]))
            .with("target_weights", Attr::Floats(vec![1.0, 10.0, 2.0, 5.0]))
            .with("n_targets", Attr::Int(2))
            .with("aggregate_function", Attr::String(aggregate.into()))
    }

    fn build(a: &Attributes) -> OpResult<Box<dyn Operator>> {
        TreeEnsembleRegressor::build(&OpContext {
            op_type: OP,
            domain: "ai.onnx.ml",
            opset: 3,
            attrs: a,
            num_inputs: 1,
            num_outputs: 1,
        })
    }

    fn run(a: &Attributes, x: &Tensor) -> OpResult<Vec<f32>> {
        let op = build(a)?;
        let fx = Fact::constant(x.clone());
        let fy = op.infer(&[&fx])?.remove(0);
        let y = Tensor::zeros(&fy.concrete().unwrap(), fy.dtype)?;
        let scratch = Tensor::zeros(&[op.scratch_bytes(&[&fx], &[&fy])?], DType::U8)?;
        op.kernel(&[&fx], &[&fy], Device::Cpu)?.run(&KernelIo {
            inputs: &[x],
            outputs: &[&y],
            scratch: Some(&scratch),
            in_place: None,
            threads: 1,
        })?;
        Ok(y.to_vec::<f32>()?)
    }

    #[test]
    fn walks_node_ids_and_aggregates_leaf_targets() {
        let x = Tensor::from_slice(&[0.5f32, 3.0, f32::NAN], &[3, 1]).unwrap();
        // NaN tracks true here.
        assert_eq!(
            run(&model("SUM"), &x).unwrap(),
            vec![1.0, 15.0, 2.0, 5.0, 1.0, 15.0]
        );
        assert_eq!(
            run(&model("AVERAGE"), &x).unwrap(),
            vec![0.5, 7.5, 1.0, 2.5, 0.5, 7.5]
        );
        let base = model("SUM").with("base_values", Attr::Floats(vec![100.0, 0.5]));
        let xi = Tensor::from_slice(&[2i64], &[1]).unwrap();
        assert_eq!(run(&base, &xi).unwrap(), vec![102.0, 5.5]);
        let min = run(&model("MIN"), &xi).unwrap();
        assert_eq!(min, vec![2.0, 5.0]);
        // No leaf contributes to target 2.
        let unreached = model("MAX").with("n_targets", Attr::Int(3));
        let xd = Tensor::from_slice(&[2.0f64], &[1, 1]).unwrap();
        assert_eq!(
            run(&unreached, &xd).unwrap(),
            vec![2.0, 5.0, f32::NEG_INFINITY]
        );
        let xf = Tensor::from_slice(&[2.0f32], &[1, 1]).unwrap();
        assert_eq!(run(&unreached, &xf).unwrap(), vec![2.0, 5.0, -f32::MAX]);
        let logistic = model("SUM").with("post_transform", Attr::String("LOGISTIC".into()));
        let y = run(&logistic, &xi).unwrap();
        assert!((y[0] - 1.0 / (1.0 + (-2.0f32).exp())).abs() < 1e-6, "{y:?}");
    }

    #[test]
    fn bad_models_are_errors() {
        let dangling = model("SUM").with("nodes_falsenodeids", Attr::Ints(vec![7, 0, 0, 0]));
        assert!(build(&dangling)
            .unwrap_err()
            .to_string()
            .contains("no node 7"));
        let mode = model("SUM").with("nodes_modes", strs(&["BRANCH_X", "LEAF", "LEAF", "LEAF"]));
        assert!(build(&mode)
            .unwrap_err()
            .to_string()
            .contains("nodes_modes"));
        let on_branch = model("SUM").with("target_nodeids", Attr::Ints(vec![0, 1, 2, 0]));
        assert!(build(&on_branch)
            .unwrap_err()
            .to_string()
            .contains("branch"));
        let target = model("SUM").with("n_targets", Attr::Int(1));
        assert!(build(&target).unwrap_err().to_string().contains("target"));
        assert!(build(&model("MEDIAN")).is_err());
        let x = Tensor::from_slice(&[1u8], &[1, 1]).unwrap();
        assert!(matches!(
            run(&model("SUM"), &x).unwrap_err(),
            OpError::DType { .. }
        ));
    }
}
