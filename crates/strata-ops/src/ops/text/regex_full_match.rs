//! RegexFullMatch (opset 20): whether each string matches `pattern` as a whole. The pattern is
//! RE2 syntax, which the `regex` crate implements (both guarantee linear-time matching); it is
//! compiled once, when the node is built.

use regex::Regex;
use strata_core::DType;

use super::common::{text_fact, text_input};
use crate::{Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "RegexFullMatch";

#[derive(Debug)]
pub struct RegexFullMatch {
    regex: Regex,
}

impl RegexFullMatch {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let pattern = ctx
            .attrs
            .string("pattern")?
            .ok_or_else(|| OpError::attribute(OP, "pattern", "is required"))?;
        Ok(Box::new(RegexFullMatch {
            regex: full_match(&pattern)?,
        }))
    }
}

/// `pattern` anchored at both ends.
fn full_match(pattern: &str) -> OpResult<Regex> {
    Regex::new(&format!("^(?:{pattern})$"))
        .map_err(|err| OpError::attribute(OP, "pattern", format!("{pattern:?} is invalid: {err}")))
}

impl Operator for RegexFullMatch {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = text_fact(OP, inputs, 0)?;
        Ok(vec![Fact::new(DType::Bool, x.dims.clone())])
    }

    fn kernel(
        &self,
        _inputs: &[&Fact],
        _outputs: &[&Fact],
        _device: strata_core::Device,
    ) -> OpResult<Box<dyn Kernel>> {
        Ok(Box::new(MatchKernel {
            regex: self.regex.clone(),
        }))
    }
}

#[derive(Debug)]
struct MatchKernel {
    regex: Regex,
}

impl Kernel for MatchKernel {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let x = text_input(OP, io.inputs, 0)?;
        let mut out = io.output(0).write::<u8>()?;
        let out = out
            .as_mut_slice()
            .ok_or_else(|| OpError::kernel(OP, "output is not contiguous"))?;
        for (o, s) in out.iter_mut().zip(x.strings()?) {
            *o = self.regex.is_match(s) as u8;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Attributes;
    use strata_core::Tensor;
    use strata_core::{Device, MemoryKind};

    fn run(pattern: &str, x: &Tensor) -> Vec<bool> {
        let op = RegexFullMatch {
            regex: full_match(pattern).unwrap(),
        };
        let fx = Fact::constant(x.clone());
        let out_fact = op.infer(&[&fx]).unwrap().remove(0);
        let out = Tensor::empty(x.dims(), DType::Bool, Device::Cpu, MemoryKind::Default).unwrap();
        let kernel = op.kernel(&[&fx], &[&out_fact], Device::Cpu).unwrap();
        kernel
            .run(&KernelIo {
                inputs: &[x],
                outputs: &[&out],
                scratch: None,
                in_place: None,
                threads: 1,
            })
            .unwrap();
        out.to_bools().unwrap()
    }

    #[test]
    fn matches_whole_strings_only() {
        let x = Tensor::from_strings(&[3], ["www.google.com", "google.com", "xwww.a.com"]).unwrap();
        assert_eq!(run(r"www\.[\w.-]+\.\bcom\b", &x), [true, false, false]);
        // An alternation is anchored as a whole, not per branch.
        let y = Tensor::from_strings(&[2], ["ab", "b"]).unwrap();
        assert_eq!(run("a|ab", &y), [true, false]);
    }

    #[test]
    fn bad_patterns_and_inputs_are_errors() {
        let attrs = Attributes::new(OP).with("pattern", crate::Attr::String("(".into()));
        let ctx = OpContext {
            op_type: OP,
            domain: "",
            opset: 20,
            attrs: &attrs,
            num_inputs: 1,
            num_outputs: 1,
        };
        let err = RegexFullMatch::build(&ctx).unwrap_err().to_string();
        assert!(err.contains("pattern"), "{err}");
        let op = RegexFullMatch {
            regex: full_match("a").unwrap(),
        };
        assert!(op.infer(&[&Fact::known(DType::F32, &[2])]).is_err());
    }
}
