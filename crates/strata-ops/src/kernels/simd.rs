//! Compiling one plain-Rust loop nest several times, for the vector instruction sets this CPU
//! may have, and picking the widest at run time.
//!
//! The build targets baseline x86_64 (SSE2), so loops the compiler vectorizes get 4-lane f32
//! vectors unless the function is compiled with `#[target_feature]`. [`multiversion!`] wraps a
//! function body in AVX-512F and AVX2+FMA copies and dispatches on the cached CPU
//! feature check; other targets call the body as is.

/// `multiversion! { fn name<T: Bound>(arg: Type, ...) { body } }` defines `name`, whose body
/// (inlined into each copy) is compiled for AVX-512F and for AVX2+FMA; a call runs the copy
/// for the widest the CPU has, else the build target's.
macro_rules! multiversion {
    (
        $(#[$meta:meta])*
        $vis:vis fn $name:ident<$t:ident: $bound:path>($($arg:ident: $ty:ty),* $(,)?) $body:block
    ) => {
        $(#[$meta])*
        #[allow(clippy::too_many_arguments)]
        $vis fn $name<$t: $bound>($($arg: $ty),*) {
            #[inline(always)]
            #[allow(clippy::too_many_arguments)]
            fn body<$t: $bound>($($arg: $ty),*) $body

            #[cfg(target_arch = "x86_64")]
            {
                /// # Safety
                /// Only called once AVX-512F was detected.
                #[target_feature(enable = "avx512f")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn avx512<$t: $bound>($($arg: $ty),*) {
                    body($($arg),*)
                }
                /// # Safety
                /// Only called once AVX2 and FMA were detected.
                #[target_feature(enable = "avx2,fma")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn avx2<$t: $bound>($($arg: $ty),*) {
                    body($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: AVX-512F was detected on this CPU just now.
                    return unsafe { avx512($($arg),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    // SAFETY: AVX2 and FMA were detected on this CPU just now.
                    return unsafe { avx2($($arg),*) };
                }
            }
            body($($arg),*)
        }
    };
}

pub(crate) use multiversion;
