//! TreeEnsemble (ai.onnx.ml opset 5): a forest in the tensor-attribute form (`nodes_*` parallel
//! arrays, `nodes_modes` a uint8 tensor of LEQ, LT, GTE, GT, EQ, NEQ, MEMBER with the sets in
//! `membership_values`, NaN-delimited in node order; `nodes_trueleafs` / `nodes_falseleafs` say
//! whether a branch index points at `leaf_*`), evaluated on X [N, F] of f32, f64 or f16. Each
//! row's leaves are aggregated per target (AVERAGE, SUM, MIN, MAX), post-transformed, and written
//! as Y [N, n_targets] in X's dtype. The trees are compiled into a [`Forest`] at build time.
//!
//! MIN and MAX start from the dtype's largest / smallest finite value, so a target no leaf
//! reaches keeps that value (as in the ONNX reference).

use std::sync::Arc;

use strata_core::{f16, DType, Device, Tensor};

use super::post_transform::PostTransform;
use super::tree_forest::{BranchSpec, Comparison, Contribution, Forest, Next, ScoreValue};
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_plain;
use crate::support::scratch::scratch_as;
use crate::{Attributes, Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "TreeEnsemble";

/// How the leaves reached by one row combine per target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Aggregate {
    Average,
    Sum,
    Min,
    Max,
}

#[derive(Debug)]
struct Model {
    forest: Forest,
    /// X's dtype, which the thresholds and weights were given in.
    dtype: DType,
    aggregate: Aggregate,
    post_transform: PostTransform,
}

#[derive(Debug, Clone)]
pub struct TreeEnsemble {
    model: Arc<Model>,
}

/// A float tensor attribute (f32, f64 or f16) as f64s, with its dtype.
fn float_tensor(attrs: &Attributes, name: &str) -> OpResult<Option<(DType, Vec<f64>)>> {
    let Some(t) = attrs.tensor(name)? else {
        return Ok(None);
    };
    let values = match t.dtype() {
        DType::F32 => t.to_vec::<f32>()?.into_iter().map(f64::from).collect(),
        DType::F64 => t.to_vec::<f64>()?,
        DType::F16 => t.to_vec::<f16>()?.into_iter().map(f16::to_f64).collect(),
        other => {
            return Err(OpError::attribute(
                OP,
                name,
                format!("expected a float, double or float16 tensor, got {other}"),
            ))
        }
    };
    Ok(Some((t.dtype(), values)))
}

fn required_attr<T>(name: &str, value: Option<T>) -> OpResult<T> {
    value.ok_or_else(|| OpError::attribute(OP, name, "is required"))
}

/// A required list attribute with one entry per node.
fn per_node(attrs: &Attributes, name: &str, nodes: usize) -> OpResult<Vec<i64>> {
    let v = required_attr(name, attrs.ints(name)?)?;
    check_len(name, v.len(), nodes)?;
    Ok(v)
}

fn check_len(name: &str, len: usize, nodes: usize) -> OpResult<()> {
    if len == nodes {
        Ok(())
    } else {
        Err(OpError::attribute(
            OP,
            name,
            format!("has {len} entries for {nodes} nodes"),
        ))
    }
}

fn to_index(name: &str, v: i64) -> OpResult<u32> {
    u32::try_from(v).map_err(|_| OpError::attribute(OP, name, format!("{v} is not a valid index")))
}

fn comparison(code: u8) -> OpResult<Comparison> {
    Ok(match code {
        0 => Comparison::Leq,
        1 => Comparison::Lt,
        2 => Comparison::Gte,
        3 => Comparison::Gt,
        4 => Comparison::Eq,
        5 => Comparison::Neq,
        6 => Comparison::Member,
        other => {
            return Err(OpError::attribute(
                OP,
                "nodes_modes",
                format!("{other} is not a mode 0 (LEQ) ..= 6 (MEMBER)"),
            ))
        }
    })
}

/// Splits `membership_values` into one set per NaN terminator.
fn membership_sets(values: &[f64]) -> OpResult<Vec<Vec<f64>>> {
    let mut sets = Vec::new();
    let mut current = Vec::new();
    for &v in values {
        if v.is_nan() {
            sets.push(std::mem::take(&mut current));
        } else {
            current.push(v);
        }
    }
    if !current.is_empty() {
        return Err(OpError::attribute(
            OP,
            "membership_values",
            "the last set is not terminated by NaN",
        ));
    }
    Ok(sets)
}

impl TreeEnsemble {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let a = ctx.attrs;
        let (dtype, splits) = required_attr("nodes_splits", float_tensor(a, "nodes_splits")?)?;
        let nodes = splits.len();
        let features = per_node(a, "nodes_featureids", nodes)?;
        let modes_tensor = required_attr("nodes_modes", a.tensor("nodes_modes")?)?;
        if modes_tensor.dtype() != DType::U8 {
            return Err(OpError::attribute(
                OP,
                "nodes_modes",
                format!("expected a uint8 tensor, got {}", modes_tensor.dtype()),
            ));
        }
        let modes = modes_tensor.to_vec::<u8>()?;
        check_len("nodes_modes", modes.len(), nodes)?;
        let true_ids = per_node(a, "nodes_truenodeids", nodes)?;
        let false_ids = per_node(a, "nodes_falsenodeids", nodes)?;
        let true_leafs = per_node(a, "nodes_trueleafs", nodes)?;
        let false_leafs = per_node(a, "nodes_falseleafs", nodes)?;
        let missing = match a.ints("nodes_missing_value_tracks_true")? {
            Some(v) => {
                check_len("nodes_missing_value_tracks_true", v.len(), nodes)?;
                v
            }
            None => vec![0; nodes],
        };
        let target_ids = required_attr("leaf_targetids", a.ints("leaf_targetids")?)?;
        let (weights_dtype, weights) =
            required_attr("leaf_weights", float_tensor(a, "leaf_weights")?)?;
        if weights.len() != target_ids.len() {
            return Err(OpError::attribute(
                OP,
                "leaf_weights",
                format!(
                    "has {} entries, leaf_targetids {}",
                    weights.len(),
                    target_ids.len()
                ),
            ));
        }
        let membership = match float_tensor(a, "membership_values")? {
            Some((t, values)) => {
                if t != dtype {
                    return Err(OpError::attribute(
                        OP,
                        "membership_values",
                        format!("is {t}, nodes_splits {dtype}"),
                    ));
                }
                membership_sets(&values)?
            }
            None => Vec::new(),
        };
        if weights_dtype != dtype {
            return Err(OpError::attribute(
                OP,
                "leaf_weights",
                format!("is {weights_dtype}, nodes_splits {dtype}"),
            ));
        }

        let next = |is_leaf: i64, id: i64, name: &str| -> OpResult<Next> {
            let id = to_index(name, id)?;
            Ok(if is_leaf != 0 {
                Next::Leaf(id)
            } else {
                Next::Node(id)
            })
        };
        let mut sets = membership.into_iter();
        let mut branches = Vec::with_capacity(nodes);
        for i in 0..nodes {
            let comparison = comparison(modes[i])?;
            let members = if comparison == Comparison::Member {
                sets.next().ok_or_else(|| {
                    OpError::attribute(OP, "membership_values", "has fewer sets than MEMBER nodes")
                })?
            } else {
                Vec::new()
            };
            branches.push(BranchSpec {
                feature: to_index("nodes_featureids", features[i])? as usize,
                comparison,
                threshold: splits[i],
                members,
                // NaN != threshold holds, so NEQ sends NaN down its true branch (reference).
                nan_goes_true: missing[i] != 0 || comparison == Comparison::Neq,
                if_true: next(true_leafs[i], true_ids[i], "nodes_truenodeids")?,
                if_false: next(false_leafs[i], false_ids[i], "nodes_falsenodeids")?,
            });
        }
        if sets.next().is_some() {
            return Err(OpError::attribute(
                OP,
                "membership_values",
                "has more sets than MEMBER nodes",
            ));
        }

        let targets = match a.int("n_targets")? {
            Some(n) => usize::try_from(n)
                .map_err(|_| OpError::attribute(OP, "n_targets", format!("{n} is negative")))?,
            None => target_ids
                .iter()
                .map(|&t| t.saturating_add(1).max(0))
                .max()
                .unwrap_or(0) as usize,
        };
        let leaves = target_ids
            .iter()
            .zip(&weights)
            .map(|(&t, &weight)| {
                Ok(vec![Contribution {
                    target: to_index("leaf_targetids", t)?,
                    weight,
                }])
            })
            .collect::<OpResult<Vec<_>>>()?;

        let roots = required_attr("tree_roots", a.ints("tree_roots")?)?
            .into_iter()
            .map(|r| {
                let root = to_index("tree_roots", r)?;
                let b = branches.get(root as usize).ok_or_else(|| {
                    OpError::attribute(
                        OP,
                        "tree_roots",
                        format!("{r} is outside the {nodes} nodes"),
                    )
                })?;
                // A tree that is a single leaf: both branches of its root name that leaf.
                Ok(match (b.if_true, b.if_false) {
                    (Next::Leaf(t), Next::Leaf(f)) if t == f => Next::Leaf(t),
                    _ => Next::Node(root),
                })
            })
            .collect::<OpResult<Vec<_>>>()?;

        let aggregate = match a.int_or("aggregate_function", 1)? {
            0 => Aggregate::Average,
            1 => Aggregate::Sum,
            2 => Aggregate::Min,
            3 => Aggregate::Max,
            other => {
                return Err(OpError::attribute(
                    OP,
                    "aggregate_function",
                    format!("{other} is not 0 (AVERAGE), 1 (SUM), 2 (MIN) or 3 (MAX)"),
                ))
            }
        };
        let post_transform = PostTransform::from_code(OP, a.int_or("post_transform", 0)?)?;
        let forest = Forest::new(OP, &branches, &leaves, &roots, targets)?;
        Ok(Box::new(TreeEnsemble {
            model: Arc::new(Model {
                forest,
                dtype,
                aggregate,
                post_transform,
            }),
        }))
    }
}

impl Operator for TreeEnsemble {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required(OP, inputs, 0)?;
        let m = &self.model;
        if x.dtype != m.dtype {
            return Err(OpError::DType {
                op: OP.into(),
                index: 0,
                expected: format!("{} (the dtype of nodes_splits)", m.dtype),
                actual: x.dtype,
            });
        }
        let n = match x.dims.as_slice() {
            [n, f] => {
                m.forest.check_features(OP, f.known())?;
                n.clone()
            }
            other => {
                return Err(OpError::shape(
                    OP,
                    format!("X must be [N, F], got {other:?}"),
                ))
            }
        };
        Ok(vec![Fact::new(
            m.dtype,
            vec![n, Dim::Known(m.forest.targets())],
        )])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_plain(OP, required(OP, inputs, 0)?.dtype, device)?;
        Ok(Box::new(self.clone()))
    }

    /// One row of f64 scores.
    fn scratch_bytes(&self, _inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        self.model.forest.score_scratch_bytes(OP)
    }
}

impl Model {
    fn evaluate<T: ScoreValue>(&self, x: &Tensor, y: &Tensor, scores: &mut [f64]) -> OpResult<()> {
        let r = x.read::<T>()?;
        let src = r
            .as_slice()
            .ok_or_else(|| OpError::kernel(OP, "X is not contiguous"))?;
        let mut w = y.write::<T>()?;
        let dst = w
            .as_mut_slice()
            .ok_or_else(|| OpError::kernel(OP, "output is not contiguous"))?;
        let features = x.dims()[1];
        let targets = self.forest.targets();
        if targets == 0 {
            return Ok(());
        }
        let start = match self.aggregate {
            Aggregate::Average | Aggregate::Sum => 0.0,
            Aggregate::Min => T::MAX,
            Aggregate::Max => -T::MAX,
        };
        let rows = dst.chunks_exact_mut(targets);
        for (row, out) in rows.enumerate() {
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
            self.post_transform.apply(scores);
            for (o, &s) in out.iter_mut().zip(scores.iter()) {
                *o = T::from_f64(s);
            }
        }
        Ok(())
    }
}

impl Kernel for TreeEnsemble {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let m = &*self.model;
        let (x, y) = (io.input(0), io.output(0));
        let targets = m.forest.targets();
        let [n, f] = *x.dims() else {
            return Err(OpError::kernel(
                OP,
                format!("X must be [N, F], got {:?}", x.dims()),
            ));
        };
        m.forest.check_features(OP, Some(f))?;
        if x.dtype() != m.dtype || y.dtype() != m.dtype || y.dims() != [n, targets] {
            return Err(OpError::kernel(
                OP,
                format!(
                    "X {} {:?} and Y {} {:?} do not fit {} targets of {}",
                    x.dtype(),
                    x.dims(),
                    y.dtype(),
                    y.dims(),
                    targets,
                    m.dtype
                ),
            ));
        }
        let scratch = io
            .scratch
            .ok_or_else(|| OpError::kernel(OP, "no scratch space was planned"))?;
        let mut s = scratch.write_bytes(OP)?;
        let scores = scratch_as::<f64>(OP, s.bytes())?;
        let scores = scores
            .get_mut(..targets)
            .ok_or_else(|| OpError::kernel(OP, "scratch is too small"))?;
        match m.dtype {
            DType::F32 => m.evaluate::<f32>(x, y, scores),
            DType::F64 => m.evaluate::<f64>(x, y, scores),
            DType::F16 => m.evaluate::<f16>(x, y, scores),
            other => Err(OpError::no_kernel(OP, other, Device::Cpu)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Attr;

    fn tensor_attr<T: strata_core::Element>(v: &[T]) -> Attr {
        Attr::Tensor(Tensor::from_slice(v, &[v.len()]).unwrap())
    }

    /// Tree 0: x0 < 0 ? leaf 0 (target 0, 2) : leaf 1 (target 0, 4); tree 1: the single leaf 2
    /// (target 0, 10). Target 1 is never reached.
    fn two_trees(aggregate: i64, post_transform: i64) -> Attributes {
        Attributes::new(OP)
            .with("nodes_splits", tensor_attr(&[0.0f32, 0.0]))
            .with("nodes_featureids", Attr::Ints(vec![0, 0]))
            .with("nodes_modes", tensor_attr(&[1u8, 0]))
            .with("nodes_truenodeids", Attr::Ints(vec![0, 2]))
            .with("nodes_falsenodeids", Attr::Ints(vec![1, 2]))
            .with("nodes_trueleafs", Attr::Ints(vec![1, 1]))
            .with("nodes_falseleafs", Attr::Ints(vec![1, 1]))
            .with("leaf_targetids", Attr::Ints(vec![0, 0, 0]))
            .with("leaf_weights", tensor_attr(&[2.0f32, 4.0, 10.0]))
            .with("tree_roots", Attr::Ints(vec![0, 1]))
            .with("n_targets", Attr::Int(2))
            .with("aggregate_function", Attr::Int(aggregate))
            .with("post_transform", Attr::Int(post_transform))
    }

    fn build(a: &Attributes) -> OpResult<Box<dyn Operator>> {
        TreeEnsemble::build(&OpContext {
            op_type: OP,
            domain: "ai.onnx.ml",
            opset: 5,
            attrs: a,
            num_inputs: 1,
            num_outputs: 1,
        })
    }

    fn run(a: &Attributes, x: &Tensor) -> OpResult<Tensor> {
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
        Ok(y)
    }

    #[test]
    fn single_tree_leq_walk() {
        let a = Attributes::new(OP)
            .with("nodes_splits", tensor_attr(&[3.5f64, 1.2, 4.2]))
            .with("nodes_featureids", Attr::Ints(vec![0, 0, 0]))
            .with("nodes_modes", tensor_attr(&[0u8, 0, 0]))
            .with("nodes_truenodeids", Attr::Ints(vec![1, 0, 1]))
            .with("nodes_falsenodeids", Attr::Ints(vec![2, 2, 3]))
            .with("nodes_trueleafs", Attr::Ints(vec![0, 1, 1]))
            .with("nodes_falseleafs", Attr::Ints(vec![0, 1, 1]))
            .with("leaf_targetids", Attr::Ints(vec![0, 1, 0, 1]))
            .with("leaf_weights", tensor_attr(&[5.23f64, 12.12, -12.23, 7.21]))
            .with("tree_roots", Attr::Ints(vec![0]));
        // n_targets defaults to one past the largest leaf target.
        let x =
            Tensor::from_slice(&[1.2f64, 3.4, -0.12, 1.66, 4.14, 1.77, 9.0, 0.0], &[4, 2]).unwrap();
        let y = run(&a, &x).unwrap();
        assert_eq!(y.dims(), &[4, 2]);
        assert_eq!(
            y.to_vec::<f64>().unwrap(),
            vec![5.23, 0.0, 5.23, 0.0, 0.0, 12.12, 0.0, 7.21]
        );
    }

    #[test]
    fn aggregates_and_post_transform() {
        let x = Tensor::from_slice(&[-1.0f32, 1.0], &[2, 1]).unwrap();
        let y = |agg, post| {
            run(&two_trees(agg, post), &x)
                .unwrap()
                .to_vec::<f32>()
                .unwrap()
        };
        assert_eq!(y(1, 0), vec![12.0, 0.0, 14.0, 0.0]);
        assert_eq!(y(0, 0), vec![6.0, 0.0, 7.0, 0.0]);
        assert_eq!(y(2, 0), vec![2.0, f32::MAX, 4.0, f32::MAX]);
        assert_eq!(y(3, 0), vec![10.0, -f32::MAX, 10.0, -f32::MAX]);
        let logistic = y(1, 2);
        assert!((logistic[0] - 1.0 / (1.0 + (-12.0f32).exp())).abs() < 1e-7);
        assert_eq!(logistic[1], 0.5);
        // f16 input with f16 attributes.
        let h = |v: &[f32]| v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>();
        let a = two_trees(1, 0)
            .with("nodes_splits", tensor_attr(&h(&[0.0, 0.0])))
            .with("leaf_weights", tensor_attr(&h(&[2.0, 4.0, 10.0])));
        let xh = Tensor::from_slice(&h(&[1.0]), &[1, 1]).unwrap();
        assert_eq!(
            run(&a, &xh).unwrap().to_vec::<f16>().unwrap(),
            h(&[14.0, 0.0])
        );
    }

    #[test]
    fn set_membership_in_node_order() {
        // Node 0: x0 in {1, 2} ? leaf 0 : node 1; node 1: x0 in {3} ? leaf 1 : leaf 2.
        let a = Attributes::new(OP)
            .with("nodes_splits", tensor_attr(&[f32::NAN, f32::NAN]))
            .with("nodes_featureids", Attr::Ints(vec![0, 0]))
            .with("nodes_modes", tensor_attr(&[6u8, 6]))
            .with("nodes_truenodeids", Attr::Ints(vec![0, 1]))
            .with("nodes_falsenodeids", Attr::Ints(vec![1, 2]))
            .with("nodes_trueleafs", Attr::Ints(vec![1, 1]))
            .with("nodes_falseleafs", Attr::Ints(vec![0, 1]))
            .with(
                "membership_values",
                tensor_attr(&[2.0f32, 1.0, f32::NAN, 3.0, f32::NAN]),
            )
            .with("leaf_targetids", Attr::Ints(vec![0, 1, 2]))
            .with("leaf_weights", tensor_attr(&[1.0f32, 1.0, 1.0]))
            .with("tree_roots", Attr::Ints(vec![0]));
        let x = Tensor::from_slice(&[1.0f32, 3.0, 4.0, f32::NAN], &[4, 1]).unwrap();
        assert_eq!(
            run(&a, &x).unwrap().to_vec::<f32>().unwrap(),
            vec![1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0]
        );
        let unterminated = a
            .clone()
            .with("membership_values", tensor_attr(&[2.0f32, f32::NAN, 3.0]));
        assert!(build(&unterminated)
            .unwrap_err()
            .to_string()
            .contains("NaN"));
        let too_few = a.with("membership_values", tensor_attr(&[2.0f32, f32::NAN]));
        assert!(build(&too_few)
            .unwrap_err()
            .to_string()
            .contains("fewer sets"));
    }

    #[test]
    fn bad_models_and_inputs_are_errors() {
        let bad_mode = two_trees(1, 0).with("nodes_modes", tensor_attr(&[9u8, 0]));
        assert!(build(&bad_mode)
            .unwrap_err()
            .to_string()
            .contains("nodes_modes"));
        let short = two_trees(1, 0).with("nodes_featureids", Attr::Ints(vec![0]));
        assert!(build(&short)
            .unwrap_err()
            .to_string()
            .contains("nodes_featureids"));
        let bad_target = two_trees(1, 0).with("n_targets", Attr::Int(0));
        assert!(build(&bad_target)
            .unwrap_err()
            .to_string()
            .contains("leaf_targetids"));
        let mixed = two_trees(1, 0).with("leaf_weights", tensor_attr(&[2.0f64, 4.0, 10.0]));
        assert!(build(&mixed)
            .unwrap_err()
            .to_string()
            .contains("leaf_weights"));
        assert!(build(&two_trees(4, 0)).is_err());
        assert!(build(&two_trees(1, 5)).is_err());
        let a = two_trees(1, 0);
        let wrong_dtype = Tensor::from_slice(&[1.0f64], &[1, 1]).unwrap();
        assert!(matches!(
            run(&a, &wrong_dtype).unwrap_err(),
            OpError::DType { .. }
        ));
        let no_features = Tensor::from_slice::<f32>(&[], &[2, 0]).unwrap();
        assert!(run(&a, &no_features)
            .unwrap_err()
            .to_string()
            .contains("features"));
        let rank1 = Tensor::from_slice(&[1.0f32], &[1]).unwrap();
        assert!(run(&a, &rank1).is_err());
    }
}
