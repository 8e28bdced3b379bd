//! Devices (C2): where memory lives and kernels run.

use std::fmt;
use std::str::FromStr;

use crate::{CoreError, Result};

/// A compute device. Parses from and prints as `cpu` or `cuda:N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Device {
    #[default]
    Cpu,
    Cuda(u32),
}

impl Device {
    pub const fn is_cpu(self) -> bool {
        matches!(self, Device::Cpu)
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(ordinal) => write!(f, "cuda:{ordinal}"),
        }
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
