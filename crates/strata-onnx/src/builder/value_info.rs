//! Graph inputs and outputs for the model builder: names with an element type and a shape of
//! known and symbolic dims (strata-ops' `Dim`, the one dim type).

use strata_core::DType;
use strata_ops::Dim;

use crate::proto::tensor_shape_proto::{dimension, Dimension};
use crate::proto::type_proto::{self, Value};
use crate::proto::{TensorShapeProto, TypeProto, ValueInfoProto};

/// `ValueInfoProto` for a tensor of ONNX element type `elem_type` with `dims` (`None`: rank
/// unknown).
pub(crate) fn tensor_value_info(
    name: &str,
    elem_type: i32,
    dims: Option<&[Dim]>,
) -> ValueInfoProto {
    let shape = dims.map(|dims| TensorShapeProto {
        dim: dims
            .iter()
            .map(|dim| Dimension {
                value: match dim {
                    Dim::Known(size) => Some(dimension::Value::DimValue(*size as i64)),
                    Dim::Sym(param) => Some(dimension::Value::DimParam(param.clone())),
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
pub(crate) fn fixed(dims: &[i64]) -> Vec<Dim> {
    dims.iter()
        .map(|&d| Dim::Known(d.max(0) as usize))
        .collect()
}

/// `dtype`'s ONNX code, or a builder error message.
pub(crate) fn elem_type(name: &str, dtype: DType) -> Result<i32, String> {
    crate::data_type::dtype_to_onnx(dtype)
        .ok_or_else(|| format!("'{name}': ONNX has no element type for {dtype}"))
}
