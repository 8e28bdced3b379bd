//! Operator implementations, one file per operator family.

pub mod batchnorm;
pub mod batchnorm_training;
pub mod concat;
pub mod constant;
pub mod conv;
pub mod elementwise;
pub mod flatten;
pub mod gather;
pub mod gemm;
pub mod identity;
pub mod matmul;
pub mod nonzero;
pub mod pool;
pub mod reshape;
pub mod shape;
pub mod softmax;
pub mod squeeze;
pub mod transpose;
pub mod unary;

// Reductions and shape manipulation.
pub(crate) mod accumulate;
pub mod argminmax;
pub(crate) mod axes;
pub mod compress;
pub mod constant_of_shape;
pub(crate) mod copy_runs;
pub mod cumsum;
pub mod depth_space;
pub mod expand;
pub mod eyelike;
pub mod gather_elements;
pub mod gather_nd;
pub mod onehot;
pub mod pad;
pub mod range;
pub mod reduce;
pub(crate) mod scalar;
pub mod scatter;
pub(crate) mod scratch;
pub mod size;
pub mod slice;
pub mod split;
pub mod tile;
pub mod topk;
pub mod trilu;

// Element-wise family (elementwise.rs and unary.rs above hold the shared plumbing).
pub mod activation;
pub mod bitcast;
pub mod bitwise;
pub mod broadcast;
pub mod cast;
pub mod clip;
pub mod compare;
pub(crate) mod erf;
pub(crate) mod f16_bits;
pub(crate) mod fast_math;
pub mod float_class;
pub mod logical;
pub mod pow;
#[cfg(test)]
pub(crate) mod test_util;
pub mod variadic;
pub mod where_op;

// Families that own a folder each.
pub mod attention;
pub mod dropout;
pub mod linalg;
pub mod loss;
pub mod ml;
pub mod ngram;
pub mod normalization;
pub mod quant;
pub mod recurrent;
pub mod resample;
pub mod selection;
pub mod signal;
pub mod spatial;
pub mod text;
