//! LabelEncoder (ai.onnx.ml, opsets 1–4): maps every element through a key → value table, with a
//! default for keys not in it. Keys and values are strings, integers or floats, given as
//! `keys_*` / `values_*` lists (opset 2+) or tensors (opset 4: `keys_tensor`, `values_tensor`,
//! `default_tensor`); opset 1's `classes_strings` maps strings to their index and back.
//! Float keys match by value (-0 equals 0, NaN matches NaN). The table is hashed once, when the
//! node is built.

use std::collections::HashMap;

use strata_core::{DType, Element, Tensor};

use crate::support::inputs::required;
use crate::{
    Attributes, Fact, Kernel, KernelCapabilities, KernelIo, MakesOutputs, OpContext, OpError,
    OpResult, Operator,
};

const OP: &str = "LabelEncoder";

/// A hashable key: text, an integer, or a float's canonical bits.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Text(Box<str>),
    Int(i64),
    Float(u64),
}

fn float_key(x: f64) -> Key {
    let canonical = if x.is_nan() {
        f64::NAN
    } else if x == 0.0 {
        0.0
    } else {
        x
    };
    Key::Float(canonical.to_bits())
}

/// The values of the table (in key order) and the default, of one type.
#[derive(Debug, Clone)]
enum Values {
    Text(Vec<Box<str>>, Box<str>),
    I64(Vec<i64>, i64),
    I32(Vec<i32>, i32),
    I16(Vec<i16>, i16),
    F32(Vec<f32>, f32),
    F64(Vec<f64>, f64),
}

impl Values {
    fn dtype(&self) -> DType {
        match self {
            Values::Text(..) => DType::String,
            Values::I64(..) => DType::I64,
            Values::I32(..) => DType::I32,
            Values::I16(..) => DType::I16,
            Values::F32(..) => DType::F32,
            Values::F64(..) => DType::F64,
        }
    }

    fn len(&self) -> usize {
        match self {
            Values::Text(v, _) => v.len(),
            Values::I64(v, _) => v.len(),
            Values::I32(v, _) => v.len(),
            Values::I16(v, _) => v.len(),
            Values::F32(v, _) => v.len(),
            Values::F64(v, _) => v.len(),
        }
    }
}

/// One key dtype's table.
#[derive(Debug, Clone)]
struct Mapping {
    key_dtype: DType,
    index: HashMap<Key, usize>,
    values: Values,
}

impl Mapping {
    fn new(key_dtype: DType, keys: Vec<Key>, values: Values) -> OpResult<Mapping> {
        if keys.len() != values.len() {
            return Err(OpError::attribute(
                OP,
                "keys",
                format!("{} keys but {} values", keys.len(), values.len()),
            ));
        }
        // The first occurrence of a repeated key wins.
        let mut index = HashMap::with_capacity(keys.len());
        for (i, key) in keys.into_iter().enumerate() {
            index.entry(key).or_insert(i);
        }
        Ok(Mapping {
            key_dtype,
            index,
            values,
        })
    }
}

#[derive(Debug, Clone)]
pub struct LabelEncoder {
    /// One table per accepted input dtype (two for opset 1, which maps both ways).
    mappings: Vec<Mapping>,
}

impl LabelEncoder {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let mappings = if ctx.opset <= 1 {
            classes_mappings(ctx.attrs)?
        } else {
            vec![table_mapping(ctx.attrs)?]
        };
        Ok(Box::new(LabelEncoder { mappings }))
    }

    fn mapping(&self, dtype: DType) -> OpResult<&Mapping> {
        self.mappings
            .iter()
            .find(|m| m.key_dtype == dtype)
            .ok_or_else(|| OpError::DType {
                op: OP.to_string(),
                index: 0,
                expected: self
                    .mappings
                    .iter()
                    .map(|m| m.key_dtype.to_string())
                    .collect::<Vec<_>>()
                    .join(" or "),
                actual: dtype,
            })
    }
}

/// Opset 1: `classes_strings` maps a string to its index (default_int64) and an index to its
/// string (default_string).
fn classes_mappings(attrs: &Attributes) -> OpResult<Vec<Mapping>> {
    let classes = attrs.strings("classes_strings")?.unwrap_or_default();
    let default_int = attrs.int_or("default_int64", -1)?;
    let default_text = attrs.string_or("default_string", "_Unused")?;
    let n = classes.len() as i64;
    let text: Vec<Box<str>> = classes.into_iter().map(Box::from).collect();
    Ok(vec![
        Mapping::new(
            DType::String,
            text.iter().cloned().map(Key::Text).collect(),
            Values::I64((0..n).collect(), default_int),
        )?,
        Mapping::new(
            DType::I64,
            (0..n).map(Key::Int).collect(),
            Values::Text(text, default_text.into()),
        )?,
    ])
}

/// Opsets 2–4: exactly one `keys_*` and one `values_*` attribute.
fn table_mapping(attrs: &Attributes) -> OpResult<Mapping> {
    let (key_dtype, keys) = read_keys(attrs)?;
    let values = read_values(attrs)?;
    Mapping::new(key_dtype, keys, values)
}

fn only_one<T>(what: &str, found: Vec<Option<T>>) -> OpResult<T> {
    let mut present: Vec<T> = found.into_iter().flatten().collect();
    match present.len() {
        1 => Ok(present.remove(0)),
        n => Err(OpError::attribute(
            OP,
            what,
            format!("exactly one {what}_* attribute must be given, found {n}"),
        )),
    }
}

fn read_keys(attrs: &Attributes) -> OpResult<(DType, Vec<Key>)> {
    let lists = vec![
        attrs.strings("keys_strings")?.map(|v| {
            (
                DType::String,
                v.into_iter().map(|s| Key::Text(s.into())).collect(),
            )
        }),
        attrs
            .ints("keys_int64s")?
            .map(|v| (DType::I64, v.into_iter().map(Key::Int).collect())),
        attrs.floats("keys_floats")?.map(|v| {
            (
                DType::F32,
                v.into_iter().map(|x| float_key(x as f64)).collect(),
            )
        }),
        attrs
            .tensor("keys_tensor")?
            .map(|t| tensor_keys(&t).map(|keys| (t.dtype(), keys)))
            .transpose()?,
    ];
    only_one("keys", lists)
}

fn tensor_keys(t: &Tensor) -> OpResult<Vec<Key>> {
    Ok(match t.dtype() {
        DType::String => t
            .strings()?
            .into_iter()
            .map(|s| Key::Text(s.into()))
            .collect(),
        DType::I64 => t.to_vec::<i64>()?.into_iter().map(Key::Int).collect(),
        DType::I32 => t
            .to_vec::<i32>()?
            .into_iter()
            .map(|x| Key::Int(x.into()))
            .collect(),
        DType::I16 => t
            .to_vec::<i16>()?
            .into_iter()
            .map(|x| Key::Int(x.into()))
            .collect(),
        DType::F32 => t
            .to_vec::<f32>()?
            .into_iter()
            .map(|x| float_key(x.into()))
            .collect(),
        DType::F64 => t.to_vec::<f64>()?.into_iter().map(float_key).collect(),
        other => {
            return Err(OpError::attribute(
                OP,
                "keys_tensor",
                format!("keys of type {other} are not supported"),
            ))
        }
    })
}

fn read_values(attrs: &Attributes) -> OpResult<Values> {
    let default_text = || attrs.string_or("default_string", "_Unused");
    let lists = vec![
        attrs
            .strings("values_strings")?
            .map(|v| -> OpResult<Values> {
                Ok(Values::Text(
                    v.into_iter().map(Box::from).collect(),
                    default_text()?.into(),
                ))
            })
            .transpose()?,
        attrs
            .ints("values_int64s")?
            .map(|v| -> OpResult<Values> { Ok(Values::I64(v, attrs.int_or("default_int64", -1)?)) })
            .transpose()?,
        attrs
            .floats("values_floats")?
            .map(|v| -> OpResult<Values> {
                Ok(Values::F32(v, attrs.float_or("default_float", -0.0)?))
            })
            .transpose()?,
        attrs
            .tensor("values_tensor")?
            .map(|t| tensor_values(&t, attrs.tensor("default_tensor")?))
            .transpose()?,
    ];
    only_one("values", lists)
}

/// `values_tensor` with `default_tensor` (one element of the same type) or the type's default.
fn tensor_values(t: &Tensor, default: Option<Tensor>) -> OpResult<Values> {
    if let Some(d) = &default {
        if d.dtype() != t.dtype() || d.numel() != 1 {
            return Err(OpError::attribute(
                OP,
                "default_tensor",
                format!(
                    "must hold one {} element, got {} {:?}",
                    t.dtype(),
                    d.dtype(),
                    d.dims()
                ),
            ));
        }
    }
    fn pick<T: Element + Copy>(
        t: &Tensor,
        d: &Option<Tensor>,
        fallback: T,
    ) -> OpResult<(Vec<T>, T)> {
        let default = match d {
            Some(d) => d.to_vec::<T>()?[0],
            None => fallback,
        };
        Ok((t.to_vec::<T>()?, default))
    }
    Ok(match t.dtype() {
        DType::String => {
            let default = match &default {
                Some(d) => d.strings()?[0].into(),
                None => "_Unused".into(),
            };
            Values::Text(t.strings()?.into_iter().map(Box::from).collect(), default)
        }
        DType::I64 => {
            let (v, d) = pick(t, &default, -1i64)?;
            Values::I64(v, d)
        }
        DType::I32 => {
            let (v, d) = pick(t, &default, -1i32)?;
            Values::I32(v, d)
        }
        DType::I16 => {
            let (v, d) = pick(t, &default, -1i16)?;
            Values::I16(v, d)
        }
        DType::F32 => {
            let (v, d) = pick(t, &default, -0.0f32)?;
            Values::F32(v, d)
        }
        DType::F64 => {
            let (v, d) = pick(t, &default, -0.0f64)?;
            Values::F64(v, d)
        }
        other => {
            return Err(OpError::attribute(
                OP,
                "values_tensor",
                format!("values of type {other} are not supported"),
            ))
        }
    })
}

impl Operator for LabelEncoder {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required(OP, inputs, 0)?;
        let mapping = self.mapping(x.dtype)?;
        Ok(vec![Fact::new(mapping.values.dtype(), x.dims.clone())])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        _device: strata_core::Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = inputs.first().map_or(DType::F32, |f| f.dtype);
        Ok(Box::new(EncodeKernel(self.mapping(dtype)?.clone())))
    }
}

#[derive(Debug)]
struct EncodeKernel(Mapping);

impl EncodeKernel {
    /// For each input element, the index of its key in the table, if there.
    fn lookups(&self, x: &Tensor) -> OpResult<Vec<Option<usize>>> {
        let index = &self.0.index;
        let find = |key: Key| index.get(&key).copied();
        if x.dtype() != self.0.key_dtype {
            return Err(OpError::DType {
                op: OP.to_string(),
                index: 0,
                expected: self.0.key_dtype.to_string(),
                actual: x.dtype(),
            });
        }
        Ok(match x.dtype() {
            DType::String => x
                .strings()?
                .into_iter()
                .map(|s| find(Key::Text(s.into())))
                .collect(),
            DType::I64 => x
                .to_vec::<i64>()?
                .into_iter()
                .map(|v| find(Key::Int(v)))
                .collect(),
            DType::I32 => x
                .to_vec::<i32>()?
                .into_iter()
                .map(|v| find(Key::Int(v.into())))
                .collect(),
            DType::I16 => x
                .to_vec::<i16>()?
                .into_iter()
                .map(|v| find(Key::Int(v.into())))
                .collect(),
            DType::F32 => x
                .to_vec::<f32>()?
                .into_iter()
                .map(|v| find(float_key(v.into())))
                .collect(),
            DType::F64 => x
                .to_vec::<f64>()?
                .into_iter()
                .map(|v| find(float_key(v)))
                .collect(),
            other => return Err(OpError::no_kernel(OP, other, strata_core::Device::Cpu)),
        })
    }
}

fn fill<T: Element + Copy>(
    out: &Tensor,
    picks: &[Option<usize>],
    values: &[T],
    default: T,
) -> OpResult<()> {
    let mut w = out.write::<T>()?;
    let data = w
        .as_mut_slice()
        .ok_or_else(|| OpError::kernel(OP, "output is not contiguous"))?;
    for (o, pick) in data.iter_mut().zip(picks) {
        *o = pick.map_or(default, |i| values[i]);
    }
    Ok(())
}

impl Kernel for EncodeKernel {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let picks = self.lookups(io.input(0))?;
        let out = io.output(0);
        match &self.0.values {
            Values::I64(v, d) => fill(out, &picks, v, *d),
            Values::I32(v, d) => fill(out, &picks, v, *d),
            Values::I16(v, d) => fill(out, &picks, v, *d),
            Values::F32(v, d) => fill(out, &picks, v, *d),
            Values::F64(v, d) => fill(out, &picks, v, *d),
            Values::Text(..) => Err(OpError::kernel(
                OP,
                "text outputs are made by `MakesOutputs`",
            )),
        }
    }

    fn capabilities(&self) -> KernelCapabilities<'_> {
        KernelCapabilities {
            makes_outputs: matches!(self.0.values, Values::Text(..)).then_some(self as _),
            ..Default::default()
        }
    }
}

/// Text outputs have no planned memory: the kernel makes them.
impl MakesOutputs for EncodeKernel {
    fn make_outputs(&self, inputs: &[&Tensor], _threads: usize) -> OpResult<Vec<Tensor>> {
        let Values::Text(values, default) = &self.0.values else {
            return Err(OpError::kernel(
                OP,
                "numeric outputs are written into planned memory",
            ));
        };
        let x = inputs
            .first()
            .copied()
            .ok_or_else(|| OpError::MissingInput {
                op: OP.to_string(),
                index: 0,
            })?;
        let picks = self.lookups(x)?;
        let text = picks.iter().map(|p| p.map_or(&**default, |i| &*values[i]));
        Ok(vec![Tensor::from_strings(x.dims(), text)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Attr;
    use strata_core::{Device, MemoryKind};

    fn build(opset: i64, attrs: Attributes) -> OpResult<Box<dyn Operator>> {
        LabelEncoder::build(&OpContext {
            op_type: OP,
            domain: "ai.onnx.ml",
            opset,
            attrs: &attrs,
            num_inputs: 1,
            num_outputs: 1,
        })
    }

    fn strings(v: &[&str]) -> Attr {
        Attr::Strings(v.iter().map(|s| s.to_string()).collect())
    }

    /// Runs the op on `x` the way the runtime would: text through `MakesOutputs`, numbers
    /// into a planned output.
    fn run(op: &dyn Operator, x: &Tensor) -> Tensor {
        let fx = Fact::constant(x.clone());
        let out_fact = op.infer(&[&fx]).unwrap().remove(0);
        let kernel = op.kernel(&[&fx], &[&out_fact], Device::Cpu).unwrap();
        if let Some(maker) = kernel.capabilities().makes_outputs {
            return maker.make_outputs(&[x], 1).unwrap().remove(0);
        }
        let out =
            Tensor::empty(x.dims(), out_fact.dtype, Device::Cpu, MemoryKind::Default).unwrap();
        kernel
            .run(&KernelIo {
                inputs: &[x],
                outputs: &[&out],
                scratch: None,
                in_place: None,
                threads: 1,
            })
            .unwrap();
        out
    }

    #[test]
    fn strings_to_ints_with_default() {
        let attrs = Attributes::new(OP)
            .with("keys_strings", strings(&["a", "b", "c"]))
            .with("values_int64s", Attr::Ints(vec![0, 1, 2]))
            .with("default_int64", Attr::Int(42));
        let op = build(4, attrs).unwrap();
        let x = Tensor::from_strings(&[4], ["b", "z", "a", "c"]).unwrap();
        assert_eq!(run(op.as_ref(), &x).to_vec::<i64>().unwrap(), [1, 42, 0, 2]);
    }

    #[test]
    fn floats_to_strings_match_by_value() {
        let attrs = Attributes::new(OP)
            .with("keys_floats", Attr::Floats(vec![0.0, f32::NAN, 1.5]))
            .with(
                "values_strings",
                strings(&["zero", "nan", "one and a half"]),
            );
        let op = build(2, attrs).unwrap();
        let x = Tensor::from_slice(&[-0.0f32, f32::NAN, 1.5, 2.0], &[2, 2]).unwrap();
        let out = run(op.as_ref(), &x);
        assert_eq!(out.dims(), [2, 2]);
        assert_eq!(
            out.strings().unwrap(),
            ["zero", "nan", "one and a half", "_Unused"]
        );
    }

    #[test]
    fn tensors_and_opset_1_classes() {
        let attrs = Attributes::new(OP)
            .with(
                "keys_tensor",
                Attr::Tensor(Tensor::from_strings(&[2], ["x", "y"]).unwrap()),
            )
            .with(
                "values_tensor",
                Attr::Tensor(Tensor::from_slice(&[7i32, 8], &[2]).unwrap()),
            )
            .with(
                "default_tensor",
                Attr::Tensor(Tensor::from_slice(&[-5i32], &[1]).unwrap()),
            );
        let op = build(4, attrs).unwrap();
        let x = Tensor::from_strings(&[3], ["y", "x", "w"]).unwrap();
        assert_eq!(run(op.as_ref(), &x).to_vec::<i32>().unwrap(), [8, 7, -5]);

        let classes = Attributes::new(OP).with("classes_strings", strings(&["p", "q"]));
        let op = build(1, classes).unwrap();
        let ids = Tensor::from_slice(&[1i64, 5], &[2]).unwrap();
        assert_eq!(run(op.as_ref(), &ids).strings().unwrap(), ["q", "_Unused"]);
        let names = Tensor::from_strings(&[2], ["p", "r"]).unwrap();
        assert_eq!(run(op.as_ref(), &names).to_vec::<i64>().unwrap(), [0, -1]);
    }

    #[test]
    fn malformed_tables_and_inputs_are_errors() {
        let short = Attributes::new(OP)
            .with("keys_strings", strings(&["a", "b"]))
            .with("values_int64s", Attr::Ints(vec![0]));
        assert!(build(2, short)
            .unwrap_err()
            .to_string()
            .contains("2 keys but 1 values"));
        let two = Attributes::new(OP)
            .with("keys_strings", strings(&["a"]))
            .with("keys_int64s", Attr::Ints(vec![0]))
            .with("values_int64s", Attr::Ints(vec![0]));
        assert!(build(2, two).is_err());
        let ok = Attributes::new(OP)
            .with("keys_strings", strings(&["a"]))
            .with("values_int64s", Attr::Ints(vec![0]));
        let op = build(2, ok).unwrap();
        assert!(matches!(
            op.infer(&[&Fact::known(DType::F32, &[1])]),
            Err(OpError::DType { .. })
        ));
    }
}
