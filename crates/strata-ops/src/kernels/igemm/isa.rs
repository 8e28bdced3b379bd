//! Which integer microkernels this CPU (and OS, for AMX) can run.

#[cfg(target_arch = "x86_64")]
use super::amx;

/// The microkernels an integer product may run with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntIsa {
    /// Plain Rust.
    Portable,
    /// x86_64 AVX2 (`vpmaddwd` on widened operands).
    Avx2,
    /// x86_64 AVX-512 with VNNI (`vpdpbusd`).
    Avx512Vnni,
    /// x86_64 AMX-INT8 tiles (`tdpbusd`), granted by the OS.
    Amx,
}

impl IntIsa {
    /// The fastest one this CPU has.
    pub fn detect() -> IntIsa {
        [IntIsa::Amx, IntIsa::Avx512Vnni, IntIsa::Avx2]
            .into_iter()
            .find(|isa| isa.is_available())
            .unwrap_or(IntIsa::Portable)
    }

    /// Whether this CPU can run it (checked at run time).
    pub fn is_available(self) -> bool {
        match self {
            IntIsa::Portable => true,
            #[cfg(target_arch = "x86_64")]
            IntIsa::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            IntIsa::Avx512Vnni => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512vnni")
            }
            // AMX blocks write back through the VNNI path's epilogue, and short products fall
            // back to VNNI: both must be there.
            #[cfg(target_arch = "x86_64")]
            IntIsa::Amx => IntIsa::Avx512Vnni.is_available() && amx::available(),
            #[cfg(not(target_arch = "x86_64"))]
            IntIsa::Avx2 | IntIsa::Avx512Vnni | IntIsa::Amx => false,
        }
    }
}
