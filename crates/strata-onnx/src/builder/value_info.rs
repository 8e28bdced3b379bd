//! Graph inputs and outputs for the model builder: names with an element type and a shape of
//! fixed and symbolic dims.

use strata_core::DType;

use crate::proto::tensor_shape_proto::{dimension, Dimension};
use crate::proto::type_proto::{self, Value};
use crate::proto::{TensorShapeProto, TypeProto, ValueInfoProto};

/// One dimension of a graph input or output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dim<'a> {
    /// A known size.
    Fixed(usize),
    /// A named size shared by every dim with the same name (`"N"`, `"seq_len"`).
    Sym(&'a str),
    /// A size nothing is known about.
    Unknown,
}

impl From<usize> for Dim<'_> {
    fn from(size: usize) -> Self {
        Dim::Fixed(size)
    }
}

/// `ValueInfoProto` for a tensor of ONNX element type `elem_type` with `dims` (`None`: rank
/// unknown).
pub(crate) fn tensor_value_info(
    name: &str,
    elem_type: i32,
    dims: Option<&[Dim<'_>]>,
) -> ValueInfoProto {
    let shape = dims.map(|dims| TensorShapeProto {
        dim: dims
            .iter()
            .map(|dim| Dimension {
                value: match *dim {
                    Dim::Fixed(size) => Some(dimension::Value::DimValue(size as i64)),
                    Dim::Sym(param) => Some(dimension::Value::DimParam(param.to_string())),
                    Dim::Unknown => None,
                },
                denotation: None,
            })
            .collect(),
    });
    let tensor = type_proto::Tensor {
        elem_type: Some(elem_type),
        shape,
    };
    ValueInfoProto {
        name: Some(name.to_string()),
        r#type: Some(TypeProto {
            value: Some(Value::TensorType(tensor)),
            denotation: None,
        }),
        ..Default::default()
    }
}

/// Fixed dims, as `Dim`s.
pub(crate) fn fixed(dims: &[i64]) -> Vec<Dim<'static>> {
    dims.iter()
        .map(|&d| Dim::Fixed(d.max(0) as usize))
        .collect()
}

/// `dtype`'s ONNX code, or a builder error message.
pub(crate) fn elem_type(name: &str, dtype: DType) -> Result<i32, String> {
    crate::data_type::dtype_to_onnx(dtype)
        .ok_or_else(|| format!("'{name}': ONNX has no element type for {dtype}"))
}
