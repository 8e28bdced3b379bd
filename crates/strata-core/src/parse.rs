//! Dtype and device names read from text (CLI flags, file formats, tests): case-insensitive,
//! with the ONNX and NumPy spellings of each dtype. Beside the types rather than in them, so that
//! `dtype` and `device` do not depend on the error type that names them.

use std::str::FromStr;

use crate::{CoreError, DType, Device, Result};

impl FromStr for DType {
    type Err = CoreError;

    fn from_str(text: &str) -> Result<Self> {
        let lower = text.trim().to_ascii_lowercase();
        DType::ALL
            .into_iter()
            .find(|d| d.name() == lower)
            .or(match lower.as_str() {
                "float32" | "float" => Some(DType::F32),
                "float16" | "half" => Some(DType::F16),
                "bfloat16" => Some(DType::BF16),
                "float64" | "double" => Some(DType::F64),
                "int8" => Some(DType::I8),
                "int16" => Some(DType::I16),
                "int32" => Some(DType::I32),
                "int64" => Some(DType::I64),
                "uint8" => Some(DType::U8),
                "uint16" => Some(DType::U16),
                "uint32" => Some(DType::U32),
                "uint64" => Some(DType::U64),
                "float8e4m3fn" => Some(DType::F8E4M3FN),
                "float8e4m3fnuz" => Some(DType::F8E4M3FNUZ),
                "float8e5m2" => Some(DType::F8E5M2),
                "float8e5m2fnuz" => Some(DType::F8E5M2FNUZ),
                "float8e8m0" => Some(DType::F8E8M0),
                "float4e2m1" => Some(DType::F4E2M1),
                "int4" => Some(DType::I4),
                "uint4" => Some(DType::U4),
                "int2" => Some(DType::I2),
                "uint2" => Some(DType::U2),
                "str" => Some(DType::String),
                _ => None,
            })
            .ok_or(CoreError::ParseDType {
                text: text.to_string(),
            })
    }
}

impl FromStr for Device {
    type Err = CoreError;

    /// Accepts `cpu`, `cuda` (ordinal 0) and `cuda:N`, case-insensitively.
    fn from_str(text: &str) -> Result<Self> {
        let err = || CoreError::ParseDevice {
            text: text.to_string(),
        };
        let lower = text.trim().to_ascii_lowercase();
        match lower.split_once(':') {
            None if lower == "cpu" => Ok(Device::Cpu),
            None if lower == "cuda" => Ok(Device::Cuda(0)),
            Some(("cuda", ordinal))
                if !ordinal.is_empty() && ordinal.bytes().all(|b| b.is_ascii_digit()) =>
            {
                ordinal.parse().map(Device::Cuda).map_err(|_| err())
            }
            _ => Err(err()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(d.to_string().parse::<DType>().unwrap(), d);
        }
        assert_eq!("float32".parse::<DType>().unwrap(), DType::F32);
        assert!("f128".parse::<DType>().is_err());
    }

    #[test]
    fn parse_and_display() {
        assert_eq!("cpu".parse::<Device>().unwrap(), Device::Cpu);
        assert_eq!("CUDA:3".parse::<Device>().unwrap(), Device::Cuda(3));
        assert_eq!("cuda".parse::<Device>().unwrap(), Device::Cuda(0));
        assert_eq!(Device::Cuda(1).to_string(), "cuda:1");
        assert_eq!(Device::Cpu.to_string(), "cpu");
        for bad in [
            "gpu",
            "cuda:",
            "cuda:-1",
            "cuda:x",
            "cpu:0",
            "cuda:99999999999",
            "",
        ] {
            assert!(bad.parse::<Device>().is_err(), "{bad} should not parse");
        }
    }
}
