//! The element trait the kernels are generic over. Implemented for `f32` and `f64`; adding a type
//! (e.g. `half::f16`, which `gemm` also supports) means one more `impl` here.

use std::fmt::Debug;
use std::ops::{Add, AddAssign, Div, Mul, Sub};

/// A floating-point element type the kernels can compute in.
pub trait Float:
    Copy
    + Debug
    + PartialOrd
    + Send
    + Sync
    + 'static
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + AddAssign
{
    const ZERO: Self;
    const ONE: Self;
    /// The most negative finite value (what an all-padding max window yields, as in onnxruntime).
    const LOWEST: Self;

    fn from_f32(v: f32) -> Self;
    fn from_usize(v: usize) -> Self;
    fn of_f64(v: f64) -> Self;
    fn as_f64(self) -> f64;
    /// The error function; branch-free for f32, so loops over it vectorize.
    fn erf(self) -> Self;
    /// tanh, branch-free for f32 (a few ulp, see `support::fast_math`).
    fn fast_tanh(self) -> Self;
    fn abs(self) -> Self;
    fn sqrt(self) -> Self;
    fn exp(self) -> Self;
    fn tanh(self) -> Self;
    fn powi(self, n: i32) -> Self;
    fn powf(self, p: Self) -> Self;
    fn is_nan(self) -> bool;
}

macro_rules! impl_float {
    ($t:ty) => {
        impl Float for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const LOWEST: Self = <$t>::MIN;

            #[inline(always)]
            fn from_f32(v: f32) -> Self {
                v as $t
            }
            #[inline(always)]
            fn from_usize(v: usize) -> Self {
                v as $t
            }
            #[inline(always)]
            fn of_f64(v: f64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn as_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn erf(self) -> Self {
                erf_of(self)
            }
            #[inline(always)]
            fn fast_tanh(self) -> Self {
                fast_tanh_of(self)
            }
            #[inline(always)]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline(always)]
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            #[inline(always)]
            fn tanh(self) -> Self {
                <$t>::tanh(self)
            }
            #[inline(always)]
            fn powi(self, n: i32) -> Self {
                <$t>::powi(self, n)
            }
            #[inline(always)]
            fn powf(self, p: Self) -> Self {
                <$t>::powf(self, p)
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
        }
    };
}

impl_float!(f32);
impl_float!(f64);

/// Per-type error function and fast tanh: the vectorizable f32 approximations, f64's reference.
trait FastMath: Sized {
    fn erf_impl(self) -> Self;
    fn tanh_impl(self) -> Self;
}

impl FastMath for f32 {
    #[inline(always)]
    fn erf_impl(self) -> Self {
        crate::support::fast_math::erf(self)
    }
    #[inline(always)]
    fn tanh_impl(self) -> Self {
        crate::support::fast_math::tanh(self)
    }
}

impl FastMath for f64 {
    #[inline(always)]
    fn erf_impl(self) -> Self {
        crate::support::erf::erf(self)
    }
    #[inline(always)]
    fn tanh_impl(self) -> Self {
        self.tanh()
    }
}

#[inline(always)]
fn erf_of<T: FastMath>(x: T) -> T {
    x.erf_impl()
}

#[inline(always)]
fn fast_tanh_of<T: FastMath>(x: T) -> T {
    x.tanh_impl()
}
