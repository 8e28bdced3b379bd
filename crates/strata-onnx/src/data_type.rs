//! ONNX `TensorProto.DataType` codes ↔ strata dtypes.

use strata_core::DType;

use crate::proto::tensor_proto::DataType;

/// The strata dtype for an ONNX data type code; `None` for types strata cannot hold (complex,
/// float6, unknown codes).
pub fn dtype_from_onnx(data_type: i32) -> Option<DType> {
    let dtype = match DataType::try_from(data_type).ok()? {
        DataType::Float => DType::F32,
        DataType::Float16 => DType::F16,
        DataType::Bfloat16 => DType::BF16,
        DataType::Double => DType::F64,
        DataType::Int8 => DType::I8,
        DataType::Int16 => DType::I16,
        DataType::Int32 => DType::I32,
        DataType::Int64 => DType::I64,
        DataType::Uint8 => DType::U8,
        DataType::Uint16 => DType::U16,
        DataType::Uint32 => DType::U32,
        DataType::Uint64 => DType::U64,
        DataType::Bool => DType::Bool,
        DataType::Float8e4m3fn => DType::F8E4M3FN,
        DataType::Float8e4m3fnuz => DType::F8E4M3FNUZ,
        DataType::Float8e5m2 => DType::F8E5M2,
        DataType::Float8e5m2fnuz => DType::F8E5M2FNUZ,
        DataType::Float8e8m0 => DType::F8E8M0,
        DataType::Float4e2m1 => DType::F4E2M1,
        DataType::Int4 => DType::I4,
        DataType::Uint4 => DType::U4,
        DataType::Int2 => DType::I2,
        DataType::Uint2 => DType::U2,
        DataType::String => DType::String,
        _ => return None,
    };
    Some(dtype)
}

/// The ONNX data type code for a strata dtype; `None` for the block-quantized types, which
/// ONNX has no element type for.
pub fn dtype_to_onnx(dtype: DType) -> Option<i32> {
    let data_type = match dtype {
        DType::F32 => DataType::Float,
        DType::F16 => DataType::Float16,
        DType::BF16 => DataType::Bfloat16,
        DType::F64 => DataType::Double,
        DType::I8 => DataType::Int8,
        DType::I16 => DataType::Int16,
        DType::I32 => DataType::Int32,
        DType::I64 => DataType::Int64,
        DType::U8 => DataType::Uint8,
        DType::U16 => DataType::Uint16,
        DType::U32 => DataType::Uint32,
        DType::U64 => DataType::Uint64,
        DType::Bool => DataType::Bool,
        DType::F8E4M3FN => DataType::Float8e4m3fn,
        DType::F8E4M3FNUZ => DataType::Float8e4m3fnuz,
        DType::F8E5M2 => DataType::Float8e5m2,
        DType::F8E5M2FNUZ => DataType::Float8e5m2fnuz,
        DType::F8E8M0 => DataType::Float8e8m0,
        DType::F4E2M1 => DataType::Float4e2m1,
        DType::I4 => DataType::Int4,
        DType::U4 => DataType::Uint4,
        DType::I2 => DataType::Int2,
        DType::U2 => DataType::Uint2,
        DType::String => DataType::String,
        DType::Q8_0
        | DType::Q4_0
        | DType::Q4_1
        | DType::Q5_0
        | DType::Q5_1
        | DType::Q4_K
        | DType::Q5_K
        | DType::Q6_K => return None,
    };
    Some(data_type as i32)
}

/// The ONNX spelling of a data type code (`FLOAT`, `STRING`, ...), for error messages.
pub fn data_type_name(data_type: i32) -> &'static str {
    DataType::try_from(data_type).map_or("unknown", |d| d.as_str_name())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_plain_dtype_round_trips_and_others_are_refused() {
        for dtype in DType::ALL {
            match dtype_to_onnx(dtype) {
                Some(code) => assert_eq!(dtype_from_onnx(code), Some(dtype)),
                None => assert!(dtype.is_quantized()),
            }
        }
        assert_eq!(
            dtype_from_onnx(DataType::String as i32),
            Some(DType::String)
        );
        assert_eq!(
            dtype_from_onnx(DataType::Float8e4m3fn as i32),
            Some(DType::F8E4M3FN)
        );
        assert_eq!(dtype_from_onnx(DataType::Int2 as i32), Some(DType::I2));
        assert_eq!(dtype_from_onnx(DataType::Complex64 as i32), None);
        assert_eq!(dtype_from_onnx(0), None);
        assert_eq!(dtype_from_onnx(9999), None);
        assert_eq!(data_type_name(1), "FLOAT");
        assert_eq!(data_type_name(9999), "unknown");
    }
}
