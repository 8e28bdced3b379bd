//! GGML tensor type ids and the strata dtypes they map to.

use strata_core::DType;

/// What a GGML type id in a tensor info means to us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgmlType {
    /// A type strata reads.
    Supported(DType),
    /// A type GGML defines that strata has no kernels for (named in the error).
    Unsupported(&'static str),
}

/// The GGML type with id `id`, or `None` for an id GGML does not define.
pub fn ggml_type(id: u32) -> Option<GgmlType> {
    use GgmlType::{Supported as S, Unsupported as U};
    Some(match id {
        0 => S(DType::F32),
        1 => S(DType::F16),
        2 => S(DType::Q4_0),
        3 => S(DType::Q4_1),
        6 => S(DType::Q5_0),
        7 => S(DType::Q5_1),
        8 => S(DType::Q8_0),
        9 => U("q8_1"),
        10 => U("q2_k"),
        11 => U("q3_k"),
        12 => S(DType::Q4_K),
        13 => S(DType::Q5_K),
        14 => S(DType::Q6_K),
        15 => U("q8_k"),
        16 => U("iq2_xxs"),
        17 => U("iq2_xs"),
        18 => U("iq3_xxs"),
        19 => U("iq1_s"),
        20 => U("iq4_nl"),
        21 => U("iq3_s"),
        22 => U("iq2_s"),
        23 => U("iq4_xs"),
        24 => S(DType::I8),
        25 => S(DType::I16),
        26 => S(DType::I32),
        27 => S(DType::I64),
        28 => S(DType::F64),
        29 => U("iq1_m"),
        30 => S(DType::BF16),
        34 => U("tq1_0"),
        35 => U("tq2_0"),
        39 => U("mxfp4"),
        _ => return None,
    })
}

/// The GGML type id of `dtype`, for the writer; `None` for dtypes GGUF cannot hold.
pub fn ggml_type_id(dtype: DType) -> Option<u32> {
    (0..40).find(|&id| ggml_type(id) == Some(GgmlType::Supported(dtype)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_core::dtype::block::GGUF_WEIGHT_TYPES;

    #[test]
    fn ids_round_trip_for_every_supported_type() {
        for dtype in GGUF_WEIGHT_TYPES {
            let id = ggml_type_id(dtype).unwrap();
            assert_eq!(ggml_type(id), Some(GgmlType::Supported(dtype)));
        }
        assert_eq!(ggml_type_id(DType::Q8_0), Some(8));
        assert_eq!(ggml_type_id(DType::Q4_K), Some(12));
        assert_eq!(ggml_type_id(DType::Bool), None);
        assert_eq!(ggml_type(11), Some(GgmlType::Unsupported("q3_k")));
        assert_eq!(ggml_type(4), None, "ids 4 and 5 were removed from GGML");
    }
}
