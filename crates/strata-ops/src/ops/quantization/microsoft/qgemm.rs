//! com.microsoft QGemm: `Y = alpha · (A − a_zero)(B − b_zero) + C` on 8-bit operands, with
//! `transA`/`transB`, as onnxruntime computes it: the exact i32 product plus the int32 bias C
//! (broadcast from `()`, `(N)`, `(1, N)`, `(M, 1)` or `(M, N)`), then scaled by
//! `alpha · a_scale · b_scale[j]` (per tensor or per column of B). With `y_zero_point` the
//! result is divided by `y_scale`, rounded half to even, offset and saturated to its 8-bit type;
//! without it the output is f32 (divided by `y_scale` when that is given, as onnxruntime does).
//! Runs on the integer GEMM (`kernels::igemm`), B packed at plan time when it is a constant;
//! a per-row or full C takes an int32 pass through scratch first.

use std::sync::Arc;

use strata_core::{DType, Device, Tensor};

use crate::kernels::igemm::{
    igemm, pack_b_into, round_half_even, Dest, Epilogue, MatrixA, OutMat, PackedB, Requant,
};
use crate::ops::quantization::int_params::{
    carve_f32, packed_b_words, scales_into, with_dest, with_int_slice, words_to_bytes,
    zero_points_into,
};
use crate::ops::quantization::integer_operands::check_operand;
use crate::ops::quantization::values::scratch;
use crate::support::inputs::{optional, required};
use crate::support::kernel_choice::cpu_only;
use crate::support::scratch::{carve, scratch_as};
use crate::{Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "QGemm";

#[derive(Debug, Clone)]
pub struct QGemm {
    alpha: f32,
    trans_a: bool,
    trans_b: bool,
    /// B packed at plan time, when it is a constant.
    packed: Option<Arc<PackedB>>,
}

impl QGemm {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let a = ctx.attrs;
        Ok(Box::new(QGemm {
            alpha: a.float_or("alpha", 1.0)?,
            trans_a: a.int_or("transA", 0)? != 0,
            trans_b: a.int_or("transB", 0)? != 0,
            packed: None,
        }))
    }

    /// The operator with these attributes (B not packed yet).
    pub fn with_attrs(alpha: f32, trans_a: bool, trans_b: bool) -> QGemm {
        QGemm {
            alpha,
            trans_a,
            trans_b,
            packed: None,
        }
    }

    /// (M, K, N) from A's and B's dims.
    fn mkn(&self, a: &[usize], b: &[usize]) -> OpResult<(usize, usize, usize)> {
        let (&[a0, a1], &[b0, b1]) = (a, b) else {
            return Err(OpError::shape(
                OP,
                format!("A {a:?} and B {b:?} must be matrices"),
            ));
        };
        let (m, k) = if self.trans_a { (a1, a0) } else { (a0, a1) };
        let (kb, n) = if self.trans_b { (b1, b0) } else { (b0, b1) };
        if k != kb {
            return Err(OpError::shape(
                OP,
                format!("A {a:?} and B {b:?} have different inner dims"),
            ));
        }
        Ok((m, k, n))
    }

    /// B's element strides `(along K, along N)`.
    fn b_strides(&self, k: usize, n: usize) -> (usize, usize) {
        if self.trans_b {
            (1, k)
        } else {
            (n, 1)
        }
    }
}

/// How C spreads over the `M x N` output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BiasForm {
    None,
    Scalar,
    Column,
    Row,
    Full,
}

fn bias_form(dims: Option<&[usize]>, m: usize, n: usize) -> OpResult<BiasForm> {
    let Some(d) = dims else {
        return Ok(BiasForm::None);
    };
    let numel: usize = d.iter().product();
    Ok(match *d {
        _ if numel == 1 && d.len() <= 2 => BiasForm::Scalar,
        [c] if c == n => BiasForm::Column,
        [1, c] if c == n => BiasForm::Column,
        [r, 1] if r == m => BiasForm::Row,
        [r, c] if r == m && c == n => BiasForm::Full,
        _ => {
            return Err(OpError::shape(
                OP,
                format!("C {d:?} does not broadcast to ({m}, {n})"),
            ))
        }
    })
}

/// Scratch words of one run.
fn scratch_words(m: usize, k: usize, n: usize, prepacked: bool, form: BiasForm) -> Option<usize> {
    let pack = if prepacked { 0 } else { packed_b_words(k, n)? };
    let int_pass = if matches!(form, BiasForm::Row | BiasForm::Full) {
        m.checked_mul(n)?
    } else {
        0
    };
    // Scales and zero points of B and the multipliers (n each), the bias row (n), scalars.
    pack.checked_add(int_pass)?
        .checked_add(n.checked_mul(4)?)?
        .checked_add(16)
}

impl Operator for QGemm {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let a = required(OP, inputs, 0)?;
        let b = required(OP, inputs, 3)?;
        for index in [1, 2, 4] {
            required(OP, inputs, index)?;
        }
        check_operand(OP, a, 0, optional(inputs, 2), 2)?;
        check_operand(OP, b, 3, optional(inputs, 5), 5)?;
        if let Some(c) = optional(inputs, 6).filter(|c| c.dtype != DType::I32) {
            return Err(OpError::DType {
                op: OP.into(),
                index: 6,
                expected: "int32".into(),
                actual: c.dtype,
            });
        }
        if a.rank() != 2 || b.rank() != 2 {
            return Err(OpError::shape(
                OP,
                format!("A {:?} and B {:?} must be matrices", a.dims, b.dims),
            ));
        }
        let dtype = match optional(inputs, 8) {
            Some(zp) if matches!(zp.dtype, DType::U8 | DType::I8) => {
                if optional(inputs, 7).is_none() {
                    return Err(OpError::shape(OP, "y_zero_point needs y_scale"));
                }
                zp.dtype
            }
            Some(zp) => {
                return Err(OpError::DType {
                    op: OP.into(),
                    index: 8,
                    expected: "uint8 or int8".into(),
                    actual: zp.dtype,
                })
            }
            None => DType::F32,
        };
        let pick = |f: &Fact, t: bool| -> (Dim, Dim) {
            if t {
                (f.dims[1].clone(), f.dims[0].clone())
            } else {
                (f.dims[0].clone(), f.dims[1].clone())
            }
        };
        let (m, ka) = pick(a, self.trans_a);
        let (kb, n) = pick(b, self.trans_b);
        if let (Some(x), Some(y)) = (ka.known(), kb.known()) {
            if x != y {
                return Err(OpError::shape(
                    OP,
                    format!(
                        "A {:?} and B {:?} have different inner dims",
                        a.dims, b.dims
                    ),
                ));
            }
        }
        if let (Some(mm), Some(nn)) = (m.known(), n.known()) {
            let c = optional(inputs, 6).and_then(|c| c.concrete());
            bias_form(c.as_deref(), mm, nn)?;
        }
        Ok(vec![Fact::new(dtype, vec![m, n])])
    }

    fn scratch_bytes(&self, inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        let (Some(a), Some(b)) = (inputs[0].concrete(), required(OP, inputs, 3)?.concrete()) else {
            return Ok(0);
        };
        let (m, k, n) = self.mkn(&a, &b)?;
        let c = optional(inputs, 6).map(|c| c.concrete());
        let form = match c {
            Some(None) => BiasForm::Full,
            Some(Some(d)) => bias_form(Some(&d), m, n)?,
            None => BiasForm::None,
        };
        let prepacked = inputs[3].value.is_some();
        words_to_bytes(OP, scratch_words(m, k, n, prepacked, form))
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let b = required(OP, inputs, 3)?;
        cpu_only(OP, required(OP, inputs, 0)?.dtype, device)?;
        let packed = match &b.value {
            Some(v) if v.rank() == 2 => {
                let (k, n) = if self.trans_b {
                    (v.dims()[1], v.dims()[0])
                } else {
                    (v.dims()[0], v.dims()[1])
                };
                let strides = self.b_strides(k, n);
                let p = with_int_slice(OP, v, |s| Ok(PackedB::new(s, k, n, strides)?))?;
                Some(Arc::new(p))
            }
            _ => None,
        };
        Ok(Box::new(QGemm {
            packed,
            ..self.clone()
        }))
    }
}

impl Kernel for QGemm {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (a_t, b_t, c_t, out) = (io.input(0), io.input(3), io.input(6), io.output(0));
        let (m, k, n) = self.mkn(a_t.dims(), b_t.dims())?;
        let form = bias_form(c_t.is_defined().then(|| c_t.dims()), m, n)?;
        if out.numel() != m * n {
            return Err(OpError::kernel(OP, "output is not M x N"));
        }
        let mut guard = scratch(OP, io)?;
        let mut work: &mut [i32] = scratch_as(OP, guard.bytes())?;
        let a_scale = scales_into(OP, "a_scale", io.input(1), 1, &mut work)?[0];
        let a_zero = zero_points_into(OP, "a_zero_point", io.input(2), 1, &mut work)?;
        let b_scale = scales_into(OP, "b_scale", io.input(4), n, &mut work)?;
        let b_zero = zero_points_into(OP, "b_zero_point", io.input(5), n, &mut work)?;
        let y_scale = match io.input(7) {
            t if t.is_defined() => Some(scales_into(OP, "y_scale", t, 1, &mut work)?[0]),
            _ => None,
        };
        let y_zero = match io.input(8) {
            t if t.is_defined() => Some(zero_points_into(OP, "y_zero_point", t, 1, &mut work)?[0]),
            _ => None,
        };
        // onnxruntime's output scales: alpha · a_scale · b_scale[j], then / y_scale.
        let mult = carve_f32(OP, &mut work, b_scale.len())?;
        for (d, &bs) in mult.iter_mut().zip(b_scale) {
            let product = self.alpha * a_scale * bs;
            *d = y_scale.map_or(product, |y| product / y);
        }
        let mult: &[f32] = mult;
        let c_read = if c_t.is_defined() {
            Some(c_t.read::<i32>()?)
        } else {
            None
        };
        let c_vals: &[i32] = match &c_read {
            Some(r) => r
                .as_slice()
                .ok_or_else(|| OpError::kernel(OP, "C is not contiguous"))?,
            None => &[],
        };
        let bias_row: Option<&[i32]> = match form {
            BiasForm::Scalar => {
                let row = carve(OP, &mut work, n)?;
                row.fill(c_vals[0]);
                Some(row)
            }
            BiasForm::Column => Some(c_vals),
            _ => None,
        };
        let int_pass = matches!(form, BiasForm::Row | BiasForm::Full);
        let acc = if int_pass {
            Some(carve(OP, &mut work, m * n)?)
        } else {
            None
        };
        let epilogue = Epilogue {
            bias_i32: bias_row,
            scale: Some(Requant {
                col: mult,
                row: None,
            }),
            zero_point: y_zero.unwrap_or(0),
            bias_f32: None,
        };
        let a_strides = if self.trans_a { (1, m) } else { (k, 1) };
        let b_strides = self.b_strides(k, n);
        with_int_slice(OP, a_t, |a_vals| {
            let a_mat = MatrixA::new(a_vals, m, k, a_strides)?;
            with_int_slice(OP, b_t, |b_vals| {
                let b_view = match &self.packed {
                    Some(p) if p.view().depth() == k && p.view().cols() == n => p.view(),
                    _ => {
                        let words = packed_b_words(k, n)
                            .ok_or_else(|| OpError::shape(OP, "B is too large"))?;
                        let buf = carve(OP, &mut work, words)?;
                        let (bytes, sums) = buf.split_at_mut(words - n);
                        pack_b_into(
                            b_vals,
                            k,
                            n,
                            b_strides,
                            bytemuck::cast_slice_mut::<i32, i8>(bytes),
                            sums,
                        )?
                    }
                };
                match acc {
                    None => with_dest(OP, out, |dest| {
                        let c = OutMat { dest, rs: n, cs: 1 };
                        Ok(igemm(
                            &a_mat, a_zero, b_view, b_zero, c, &epilogue, io.threads,
                        )?)
                    }),
                    Some(acc) => {
                        let c = OutMat {
                            dest: Dest::I32(acc),
                            rs: n,
                            cs: 1,
                        };
                        igemm(
                            &a_mat,
                            a_zero,
                            b_view,
                            b_zero,
                            c,
                            &Epilogue::default(),
                            io.threads,
                        )?;
                        add_bias_and_store(acc, c_vals, form, n, mult, y_zero, out)
                    }
                }
            })
        })
    }
}

/// Adds a per-row or full C to the int32 sums and converts them as the GEMM's write-back does.
fn add_bias_and_store(
    acc: &[i32],
    c: &[i32],
    form: BiasForm,
    n: usize,
    mult: &[f32],
    y_zero: Option<i32>,
    out: &Tensor,
) -> OpResult<()> {
    let bias = |index: usize| match form {
        BiasForm::Row => c[index / n],
        _ => c[index],
    };
    let scale = |index: usize| {
        if mult.len() == 1 {
            mult[0]
        } else {
            mult[index % n]
        }
    };
    let real = |index: usize, v: i32| v.wrapping_add(bias(index)) as f32 * scale(index);
    let quantize =
        |x: f32, lo: f32, hi: f32| (round_half_even(x) + y_zero.unwrap_or(0) as f32).clamp(lo, hi);
    with_dest(OP, out, |dest| {
        match dest {
            Dest::F32(d) => {
                for (i, (o, &v)) in d.iter_mut().zip(acc).enumerate() {
                    *o = real(i, v);
                }
            }
            Dest::U8(d) => {
                for (i, (o, &v)) in d.iter_mut().zip(acc).enumerate() {
                    *o = quantize(real(i, v), 0.0, 255.0) as u8;
                }
            }
            Dest::I8(d) => {
                for (i, (o, &v)) in d.iter_mut().zip(acc).enumerate() {
                    *o = quantize(real(i, v), -128.0, 127.0) as i8;
                }
            }
            Dest::I32(_) => return Err(OpError::kernel(OP, "output cannot be int32")),
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use strata_core::Tensor;

    use crate::support::rng::Rng;
    use crate::support::test_util::OpRun;
    use crate::{Attr, OpError};

    /// Naive QGemm: exact i64 sums, f32 scaling as onnxruntime, half-to-even rounding.
    #[allow(clippy::too_many_arguments)]
    fn reference(
        a: &[i32],
        b: &[i32],
        (m, k, n): (usize, usize, usize),
        za: i32,
        zb: &[i32],
        mult: &[f32],
        c: &dyn Fn(usize, usize) -> i32,
        y_zero: Option<(i32, i32, i32)>,
    ) -> Vec<f32> {
        let mut out = vec![];
        for i in 0..m {
            for j in 0..n {
                let zbj = if zb.len() == 1 { zb[0] } else { zb[j] };
                let s: i64 = (0..k)
                    .map(|p| i64::from(a[i * k + p] - za) * i64::from(b[p * n + j] - zbj))
                    .sum();
                let acc = (s as i32).wrapping_add(c(i, j));
                let mj = if mult.len() == 1 { mult[0] } else { mult[j] };
                let v = acc as f32 * mj;
                out.push(match y_zero {
                    Some((z, lo, hi)) => {
                        (v.round_ties_even() + z as f32).clamp(lo as f32, hi as f32)
                    }
                    None => v,
                });
            }
        }
        out
    }

    fn t<T: strata_core::Element>(v: &[T], dims: &[usize]) -> Tensor {
        Tensor::from_slice(v, dims).unwrap()
    }

    fn transpose<T: Copy>(v: &[T], rows: usize, cols: usize) -> Vec<T> {
        (0..cols)
            .flat_map(|c| (0..rows).map(move |r| (r, c)))
            .map(|(r, c)| v[r * cols + c])
            .collect()
    }

    #[test]
    fn per_column_requantization_matches_the_naive_reference() {
        let (m, k, n) = (5, 37, 19);
        let mut rng = Rng::new(7);
        let a: Vec<u8> = (0..m * k).map(|_| rng.below(256) as u8).collect();
        let b: Vec<i8> = (0..k * n).map(|_| rng.below(256) as u8 as i8).collect();
        let zb: Vec<i8> = (0..n).map(|j| (j as i8) - 9).collect();
        let bs: Vec<f32> = (0..n).map(|j| 0.01 + 0.002 * j as f32).collect();
        let c: Vec<i32> = (0..n).map(|j| 1000 * j as i32 - 7000).collect();
        let (alpha, a_scale, y_scale) = (0.75f32, 0.05f32, 0.9f32);
        let mult: Vec<f32> = bs.iter().map(|&s| alpha * a_scale * s / y_scale).collect();
        let ai: Vec<i32> = a.iter().map(|&v| i32::from(v)).collect();
        let bi: Vec<i32> = b.iter().map(|&v| i32::from(v)).collect();
        let zbi: Vec<i32> = zb.iter().map(|&v| i32::from(v)).collect();
        let expected = reference(
            &ai,
            &bi,
            (m, k, n),
            131,
            &zbi,
            &mult,
            &|_, j| c[j],
            Some((-3, -128, 127)),
        );
        for (trans_a, trans_b, constant) in [(0, 0, false), (1, 1, false), (0, 1, true)] {
            let a_in = if trans_a == 1 {
                t(&transpose(&a, m, k), &[k, m])
            } else {
                t(&a, &[m, k])
            };
            let b_in = if trans_b == 1 {
                t(&transpose(&b, k, n), &[n, k])
            } else {
                t(&b, &[k, n])
            };
            let inputs = [
                a_in,
                t(&[a_scale], &[]),
                t(&[131u8], &[]),
                b_in,
                t(&bs, &[n]),
                t(&zb, &[n]),
                t(&c, &[n]),
                t(&[y_scale], &[]),
                t(&[-3i8], &[]),
            ];
            let mut run = OpRun::new("QGemm", 1).domain("com.microsoft").attrs(&[
                ("alpha", Attr::Float(alpha)),
                ("transA", Attr::Int(trans_a)),
                ("transB", Attr::Int(trans_b)),
            ]);
            if constant {
                run = run.constant_inputs();
            }
            let y = run.checked_writes().run(&inputs).unwrap();
            let got: Vec<f32> = y[0]
                .to_vec::<i8>()
                .unwrap()
                .iter()
                .map(|&v| f32::from(v))
                .collect();
            assert_eq!(got, expected, "transA {trans_a} transB {trans_b}");
            // Some outputs saturate at both ends, so the test sees clamping.
            assert!(got.contains(&-128.0) && got.contains(&127.0));
        }
    }

    #[test]
    fn float_output_and_row_and_full_bias() {
        let (m, k, n) = (3, 6, 4);
        let mut rng = Rng::new(3);
        let a: Vec<u8> = (0..m * k).map(|_| rng.below(256) as u8).collect();
        let b: Vec<u8> = (0..k * n).map(|_| rng.below(256) as u8).collect();
        let ai: Vec<i32> = a.iter().map(|&v| i32::from(v)).collect();
        let bi: Vec<i32> = b.iter().map(|&v| i32::from(v)).collect();
        let full: Vec<i32> = (0..m * n).map(|i| i as i32 * 37 - 200).collect();
        let rows: Vec<i32> = vec![-500, 0, 900];
        let mult = [0.5f32 * 0.02 * 0.03];
        for (c, dims, bias) in [
            (
                full.clone(),
                vec![m, n],
                Box::new(|i: usize, j: usize| full[i * n + j]) as Box<dyn Fn(usize, usize) -> i32>,
            ),
            (rows.clone(), vec![m, 1], Box::new(|i: usize, _| rows[i])),
            (vec![42], vec![1, 1], Box::new(|_, _| 42)),
        ] {
            let inputs = [
                t(&a, &[m, k]),
                t(&[0.02f32], &[]),
                t(&[100u8], &[]),
                t(&b, &[k, n]),
                t(&[0.03f32], &[1]),
                t(&[128u8], &[1]),
                t(&c, &dims),
            ];
            let y = OpRun::new("QGemm", 1)
                .domain("com.microsoft")
                .attrs(&[("alpha", Attr::Float(0.5))])
                .run(&inputs)
                .unwrap();
            let expected = reference(&ai, &bi, (m, k, n), 100, &[128], &mult, &*bias, None);
            assert_eq!(y[0].to_vec::<f32>().unwrap(), expected, "C dims {dims:?}");
        }
    }

    #[test]
    fn rounds_half_to_even_and_offsets_by_the_zero_point() {
        // 1·1 + 2·1 = 3; 3 · 0.5 = 1.5 -> 2; 5 · 0.5 = 2.5 -> 2 (ties to even), + 10.
        let inputs = [
            t(&[1u8, 2, 2, 3], &[2, 2]),
            t(&[0.5f32], &[]),
            t(&[0u8], &[]),
            t(&[1u8, 1], &[2, 1]),
            t(&[1.0f32], &[]),
            t(&[0u8], &[]),
            Tensor::undefined(),
            t(&[1.0f32], &[]),
            t(&[10u8], &[]),
        ];
        let y = OpRun::new("QGemm", 1)
            .domain("com.microsoft")
            .run(&inputs)
            .unwrap();
        assert_eq!(y[0].to_vec::<u8>().unwrap(), [12, 12]);
    }

    #[test]
    fn bad_shapes_are_errors() {
        let inputs = [
            t(&[1u8, 2, 3], &[1, 3]),
            t(&[0.5f32], &[]),
            t(&[0u8], &[]),
            t(&[1u8, 1], &[2, 1]),
            t(&[1.0f32], &[]),
            t(&[0u8], &[]),
        ];
        let err = OpRun::new("QGemm", 1)
            .domain("com.microsoft")
            .run(&inputs)
            .unwrap_err();
        assert!(matches!(err, OpError::Shape { .. }), "{err}");
        let mut bad_c = inputs.to_vec();
        bad_c[3] = t(&[1u8, 1, 1], &[3, 1]);
        bad_c.push(t(&[1i32, 2], &[2]));
        let err = OpRun::new("QGemm", 1)
            .domain("com.microsoft")
            .run(&bad_c)
            .unwrap_err();
        assert!(matches!(err, OpError::Shape { .. }), "{err}");
    }
}
