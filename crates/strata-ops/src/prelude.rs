//! `use strata_ops::prelude::*;` brings the eager tensor operations into scope as methods on
//! `Tensor` (`a.add(&b)?`, `x.softmax(-1)?`, `y.relu_()?`), plus the free functions `cat`,
//! `stack` and `where_cond` and the argument structs `Conv2d` and `Pool2d`.

pub use crate::eager::{
    cat, stack, where_cond, Conv2d, EagerArith, EagerCompare, EagerConvert, EagerLinalg, EagerPool,
    EagerReduce, EagerSelect, EagerSoftmax, EagerUnary, Pool2d,
};
