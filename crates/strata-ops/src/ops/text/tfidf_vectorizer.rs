//! TfIdfVectorizer (opset 9): counts the n-grams of a pool (`pool_int64s` for int32/int64 input,
//! `pool_strings` for string input; grouped by length through `ngram_counts`) in each row of an
//! input of shape [C] or [N, C],
//! n-grams possibly skipping up to `max_skip_count` tokens between items, and writes the counts
//! (TF), their presence times a weight (IDF) or counts times a weight (TFIDF) as f32 rows of
//! `max(ngram_indexes) + 1` columns. The pool is compiled into a trie at build time; a string
//! pool is first numbered (a vocabulary of token ids), and string input is mapped through it.

use std::collections::HashMap;
use std::sync::Arc;

use strata_core::{DType, Device, Tensor};

use crate::ops::text::ngram_trie::{NgramTrie, TrieBuilder};
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_plain;
use crate::support::scratch::scratch_as;
use crate::{Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "TfIdfVectorizer";

/// What each output column holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Weighting {
    /// The n-gram's count.
    Tf,
    /// Its weight (1 without weights) when it occurs at all.
    Idf,
    /// Its count times its weight.
    TfIdf,
}

/// Everything fixed at build time, shared by the operator and its kernel.
#[derive(Debug)]
struct Vectorizer {
    weighting: Weighting,
    min_gram: usize,
    max_gram: usize,
    max_skip: usize,
    trie: NgramTrie,
    /// `max(ngram_indexes) + 1`.
    columns: usize,
    /// Per output column (at least `columns` long), or empty for unit weights.
    weights: Vec<f32>,
    /// For a string pool: each distinct pool string's id (the trie holds ids).
    vocabulary: Option<HashMap<Box<str>, i64>>,
}

#[derive(Debug, Clone)]
pub struct TfIdfVectorizer {
    v: Arc<Vectorizer>,
}

fn required_int(ctx: &OpContext, name: &str) -> OpResult<i64> {
    ctx.attrs
        .int(name)?
        .ok_or_else(|| OpError::attribute(OP, name, "is required"))
}

fn required_ints(ctx: &OpContext, name: &str) -> OpResult<Vec<i64>> {
    ctx.attrs
        .ints(name)?
        .ok_or_else(|| OpError::attribute(OP, name, "is required"))
}

fn non_negative(name: &str, v: i64) -> OpResult<usize> {
    usize::try_from(v).map_err(|_| OpError::attribute(OP, name, format!("{v} is negative")))
}

impl TfIdfVectorizer {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let weighting = match ctx.attrs.string("mode")?.as_deref() {
            Some("TF") => Weighting::Tf,
            Some("IDF") => Weighting::Idf,
            Some("TFIDF") => Weighting::TfIdf,
            Some(other) => {
                return Err(OpError::attribute(
                    OP,
                    "mode",
                    format!("{other:?} is not TF, IDF or TFIDF"),
                ))
            }
            None => return Err(OpError::attribute(OP, "mode", "is required")),
        };
        let min_gram = non_negative("min_gram_length", required_int(ctx, "min_gram_length")?)?;
        let max_gram = non_negative("max_gram_length", required_int(ctx, "max_gram_length")?)?;
        if min_gram == 0 || max_gram < min_gram {
            return Err(OpError::attribute(
                OP,
                "max_gram_length",
                format!("need 1 <= min_gram_length ({min_gram}) <= max_gram_length ({max_gram})"),
            ));
        }
        let max_skip = non_negative("max_skip_count", required_int(ctx, "max_skip_count")?)?;
        let (pool, vocabulary) = match (
            ctx.attrs.ints("pool_int64s")?,
            ctx.attrs.strings("pool_strings")?,
        ) {
            (Some(pool), None) => (pool, None),
            (None, Some(words)) => {
                let (pool, vocabulary) = number_words(words);
                (pool, Some(vocabulary))
            }
            (found_ints, _) => {
                return Err(OpError::attribute(
                    OP,
                    "pool_int64s",
                    format!(
                        "exactly one of pool_int64s or pool_strings is required, found {}",
                        if found_ints.is_some() {
                            "both"
                        } else {
                            "neither"
                        }
                    ),
                ))
            }
        };
        let counts = required_ints(ctx, "ngram_counts")?;
        let indexes = required_ints(ctx, "ngram_indexes")?;
        let columns = indexes
            .iter()
            .map(|&i| {
                non_negative("ngram_indexes", i).and_then(|i| {
                    u32::try_from(i)
                        .ok()
                        .filter(|&i| i < u32::MAX)
                        .ok_or_else(|| {
                            OpError::attribute(OP, "ngram_indexes", format!("{i} is too large"))
                        })
                })
            })
            .collect::<OpResult<Vec<u32>>>()?;
        let output_columns = columns
            .iter()
            .max()
            .map(|&m| m as usize + 1)
            .ok_or_else(|| OpError::attribute(OP, "ngram_indexes", "is empty"))?;
        let weights = ctx.attrs.floats("weights")?.unwrap_or_default();
        if !weights.is_empty() && weights.len() < output_columns {
            return Err(OpError::attribute(
                OP,
                "weights",
                format!(
                    "{} weights for {output_columns} output columns",
                    weights.len()
                ),
            ));
        }
        let trie = compile_pool(&pool, &counts, &columns, min_gram, max_gram)?;
        Ok(Box::new(TfIdfVectorizer {
            v: Arc::new(Vectorizer {
                weighting,
                min_gram,
                max_gram,
                max_skip,
                trie,
                columns: output_columns,
                weights,
                vocabulary,
            }),
        }))
    }
}

/// Numbers a string pool: equal strings get equal ids, so the trie works on ids.
fn number_words(words: Vec<String>) -> (Vec<i64>, HashMap<Box<str>, i64>) {
    let mut vocabulary: HashMap<Box<str>, i64> = HashMap::new();
    let pool = words
        .into_iter()
        .map(|w| {
            let next = vocabulary.len() as i64;
            *vocabulary.entry(w.into_boxed_str()).or_insert(next)
        })
        .collect();
    (pool, vocabulary)
}

/// Builds the trie of the pool's n-grams whose length lies in `min_gram..=max_gram`. N-grams are
/// numbered across all lengths in pool order (lengths outside the range still take numbers);
/// n-gram k counts into column `columns[k]`.
fn compile_pool(
    pool: &[i64],
    counts: &[i64],
    columns: &[u32],
    min_gram: usize,
    max_gram: usize,
) -> OpResult<NgramTrie> {
    let starts = counts
        .iter()
        .map(|&c| {
            usize::try_from(c)
                .ok()
                .filter(|&c| c <= pool.len())
                .ok_or_else(|| {
                    OpError::attribute(
                        OP,
                        "ngram_counts",
                        format!("start {c} is outside the pool of {} items", pool.len()),
                    )
                })
        })
        .collect::<OpResult<Vec<usize>>>()?;
    let mut builder = TrieBuilder::new();
    let mut ngram_number = 0usize;
    for (i, &start) in starts.iter().enumerate() {
        let n = i + 1;
        let end = starts.get(i + 1).copied().unwrap_or(pool.len());
        if end < start {
            return Err(OpError::attribute(
                OP,
                "ngram_counts",
                format!("{counts:?} is not non-decreasing"),
            ));
        }
        let items = &pool[start..end];
        if !items.len().is_multiple_of(n) {
            return Err(OpError::attribute(
                OP,
                "ngram_counts",
                format!("{} pool items do not split into {n}-grams", items.len()),
            ));
        }
        for ngram in items.chunks_exact(n) {
            if (min_gram..=max_gram).contains(&n) {
                let column = *columns.get(ngram_number).ok_or_else(|| {
                    OpError::attribute(
                        OP,
                        "ngram_indexes",
                        format!(
                            "has {} entries, fewer than the pool's n-grams",
                            columns.len()
                        ),
                    )
                })?;
                builder
                    .insert(ngram, column)
                    .ok_or_else(|| OpError::attribute(OP, "pool_int64s", "too many n-grams"))?;
            }
            ngram_number += 1;
        }
    }
    Ok(builder.finish())
}

impl Vectorizer {
    /// Adds the pool n-grams found in `row` to `counts` (one per output column).
    fn count_row<T: Copy + Into<i64>>(&self, row: &[T], counts: &mut [u32]) {
        let c = row.len();
        let trie = &self.trie;
        // Unigrams are counted only at skip distance 1; longer n-grams at every distance.
        let mut first_size = self.min_gram;
        // A distance of c or more fits no n-gram of two items in the row.
        let max_distance = self
            .max_skip
            .saturating_add(1)
            .min(c.saturating_sub(1).max(1));
        for distance in 1..=max_distance {
            for start in 0..c {
                // The shortest n-gram counted here must end inside the row.
                match distance
                    .checked_mul(first_size - 1)
                    .and_then(|span| span.checked_add(start))
                {
                    Some(last) if last < c => {}
                    _ => break,
                }
                let mut node = NgramTrie::ROOT;
                let mut size = 1;
                let mut item = start;
                while size <= self.max_gram && item < c && trie.has_children(node) {
                    let Some(next) = trie.child(node, row[item].into()) else {
                        break;
                    };
                    if size >= first_size {
                        if let Some(column) = trie.column(next) {
                            let slot = &mut counts[column as usize];
                            *slot = slot.saturating_add(1);
                        }
                    }
                    node = next;
                    size += 1;
                    // item < c and distance < c, so this cannot overflow.
                    item += distance;
                }
            }
            if first_size == 1 {
                first_size = 2;
                if first_size > self.max_gram {
                    break;
                }
            }
        }
    }

    /// Writes one output row from its counts.
    fn write_row(&self, counts: &[u32], out: &mut [f32]) {
        let w = &self.weights;
        for (i, (o, &f)) in out.iter_mut().zip(counts).enumerate() {
            *o = match (self.weighting, w.is_empty()) {
                (Weighting::Tf, _) | (Weighting::TfIdf, true) => f as f32,
                (Weighting::Idf, true) => f32::from(u8::from(f > 0)),
                (Weighting::Idf, false) => {
                    if f > 0 {
                        w[i]
                    } else {
                        0.0
                    }
                }
                (Weighting::TfIdf, false) => w[i] * f as f32,
            };
        }
    }
}

/// Rows of the input: [C] and scalars are one row, [N, C] is N rows of C.
fn row_shape(dims: &[usize]) -> OpResult<(usize, usize)> {
    match *dims {
        [] => Ok((1, 1)),
        [c] => Ok((1, c)),
        [n, c] => Ok((n, c)),
        _ => Err(OpError::shape(
            OP,
            format!("input must have shape [C] or [N, C], got {dims:?}"),
        )),
    }
}

/// Integer input for an integer pool, string input for a string pool.
fn check_dtype(v: &Vectorizer, dtype: DType) -> OpResult<()> {
    let (ok, expected) = match &v.vocabulary {
        None => (
            matches!(dtype, DType::I32 | DType::I64),
            "int32 or int64 (the pool is pool_int64s)",
        ),
        Some(_) => (dtype == DType::String, "string (the pool is pool_strings)"),
    };
    if ok {
        return Ok(());
    }
    Err(OpError::DType {
        op: OP.into(),
        index: 0,
        expected: expected.into(),
        actual: dtype,
    })
}

impl Operator for TfIdfVectorizer {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required(OP, inputs, 0)?;
        check_dtype(&self.v, x.dtype)?;
        let columns = Dim::Known(self.v.columns);
        let dims = match x.dims.as_slice() {
            [] | [_] => vec![columns],
            [n, _] => vec![n.clone(), columns],
            other => {
                return Err(OpError::shape(
                    OP,
                    format!("input must have shape [C] or [N, C], got {other:?}"),
                ))
            }
        };
        Ok(vec![Fact::new(DType::F32, dims)])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let x = required(OP, inputs, 0)?;
        check_dtype(&self.v, x.dtype)?;
        if !x.dtype.is_string() {
            cpu_plain(OP, x.dtype, device)?;
        }
        Ok(Box::new(self.clone()))
    }

    /// One row of u32 counts.
    fn scratch_bytes(&self, _inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        Ok(self.v.columns * std::mem::size_of::<u32>())
    }
}

/// Counts and writes every row of a contiguous int32 or int64 input.
fn vectorize<T: strata_core::Element + Copy + Into<i64>>(
    v: &Vectorizer,
    x: &Tensor,
    c: usize,
    out: &mut [f32],
    counts: &mut [u32],
) -> OpResult<()> {
    let r = x.read::<T>()?;
    let data = r
        .as_slice()
        .ok_or_else(|| OpError::kernel(OP, "input is not contiguous"))?;
    vectorize_rows(v, data, c, out, counts);
    Ok(())
}

/// String input: every token becomes its pool id (-1, matching nothing, when not in the pool).
/// Text allocates anyway, so the ids go to a fresh buffer.
fn vectorize_text(
    v: &Vectorizer,
    vocabulary: &HashMap<Box<str>, i64>,
    x: &Tensor,
    c: usize,
    out: &mut [f32],
    counts: &mut [u32],
) -> OpResult<()> {
    let ids: Vec<i64> = x
        .strings()?
        .into_iter()
        .map(|s| vocabulary.get(s).copied().unwrap_or(-1))
        .collect();
    vectorize_rows(v, &ids, c, out, counts);
    Ok(())
}

fn vectorize_rows<T: Copy + Into<i64>>(
    v: &Vectorizer,
    data: &[T],
    c: usize,
    out: &mut [f32],
    counts: &mut [u32],
) {
    for (row, out_row) in out.chunks_exact_mut(v.columns).enumerate() {
        counts.fill(0);
        v.count_row(&data[row * c..(row + 1) * c], counts);
        v.write_row(counts, out_row);
    }
}

impl Kernel for TfIdfVectorizer {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let v = &*self.v;
        let (x, y) = (io.input(0), io.output(0));
        let (rows, c) = row_shape(x.dims())?;
        let expected_ok = match x.rank() {
            2 => y.dims() == [rows, v.columns],
            _ => y.dims() == [v.columns],
        };
        if !expected_ok {
            return Err(OpError::kernel(
                OP,
                format!(
                    "output is {:?} for input {:?} and {} columns",
                    y.dims(),
                    x.dims(),
                    v.columns
                ),
            ));
        }
        let mut w = y.write::<f32>()?;
        let out = w
            .as_mut_slice()
            .ok_or_else(|| OpError::kernel(OP, "output is not contiguous"))?;
        let scratch = io
            .scratch
            .ok_or_else(|| OpError::kernel(OP, "no scratch space was planned"))?;
        let mut s = scratch.write_bytes(OP)?;
        let counts = scratch_as::<u32>(OP, s.bytes())?;
        let counts = counts
            .get_mut(..v.columns)
            .ok_or_else(|| OpError::kernel(OP, "scratch is too small"))?;
        check_dtype(v, x.dtype())?;
        match (x.dtype(), &v.vocabulary) {
            (DType::I64, None) => vectorize::<i64>(v, x, c, out, counts),
            (DType::I32, None) => vectorize::<i32>(v, x, c, out, counts),
            (DType::String, Some(vocabulary)) => vectorize_text(v, vocabulary, x, c, out, counts),
            (other, _) => Err(OpError::kernel(OP, format!("no kernel for {other} input"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Attr, Attributes};

    fn attrs(
        mode: &str,
        min: i64,
        max: i64,
        skip: i64,
        counts: &[i64],
        indexes: &[i64],
        pool: &[i64],
    ) -> Attributes {
        Attributes::new(OP)
            .with("mode", Attr::String(mode.into()))
            .with("min_gram_length", Attr::Int(min))
            .with("max_gram_length", Attr::Int(max))
            .with("max_skip_count", Attr::Int(skip))
            .with("ngram_counts", Attr::Ints(counts.to_vec()))
            .with("ngram_indexes", Attr::Ints(indexes.to_vec()))
            .with("pool_int64s", Attr::Ints(pool.to_vec()))
    }

    fn build(a: &Attributes) -> OpResult<Box<dyn Operator>> {
        TfIdfVectorizer::build(&OpContext {
            op_type: OP,
            domain: "",
            opset: 9,
            attrs: a,
            num_inputs: 1,
            num_outputs: 1,
        })
    }

    fn run(a: &Attributes, x: &Tensor) -> OpResult<(Vec<usize>, Vec<f32>)> {
        let op = build(a)?;
        let fx = Fact::constant(x.clone());
        let fy = op.infer(&[&fx])?.remove(0);
        let y = Tensor::zeros(&fy.concrete().unwrap(), DType::F32)?;
        let scratch = Tensor::zeros(&[op.scratch_bytes(&[&fx], &[&fy])?], DType::U8)?;
        op.kernel(&[&fx], &[&fy], Device::Cpu)?.run(&KernelIo {
            inputs: &[x],
            outputs: &[&y],
            scratch: Some(&scratch),
            in_place: None,
            threads: 1,
        })?;
        Ok((y.dims().to_vec(), y.to_vec::<f32>()?))
    }

    #[test]
    fn spec_example_maps_bigrams_through_ngram_indexes() {
        // Pool bigrams (94, 17) -> column 1 and (17, 36) -> column 0.
        let a = attrs("TF", 2, 2, 0, &[0, 0], &[1, 0], &[94, 17, 17, 36]);
        let x = Tensor::from_slice(&[94i64, 17, 36, 94, 17], &[5]).unwrap();
        assert_eq!(run(&a, &x).unwrap(), (vec![2], vec![1.0, 2.0]));
    }

    #[test]
    fn unigrams_once_and_bigrams_at_every_skip() {
        // Unigrams 2, 3, 5, 4; bigrams (5, 6), (7, 8), (6, 7); up to 5 skipped tokens.
        let a = attrs(
            "TF",
            1,
            2,
            5,
            &[0, 4],
            &[0, 1, 2, 3, 4, 5, 6],
            &[2, 3, 5, 4, 5, 6, 7, 8, 6, 7],
        );
        let x = Tensor::from_slice(&[1i32, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8], &[12]).unwrap();
        let (dims, y) = run(&a, &x).unwrap();
        assert_eq!(dims, vec![7]);
        // 3 occurs three times; 5 once; (5, 6) adjacent; (7, 8) at distance 1 and 3 (7 . . 8 via
        // positions 5..7 and 8..11); (6, 7) at distance 1.
        assert_eq!(y, vec![0.0, 3.0, 1.0, 0.0, 1.0, 3.0, 1.0]);
        // Without skips only adjacent bigrams count; min_gram_length 2 drops the unigrams.
        let a = attrs(
            "TF",
            2,
            2,
            0,
            &[0, 4],
            &[0, 1, 2, 3, 4, 5, 6],
            &[2, 3, 5, 4, 5, 6, 7, 8, 6, 7],
        );
        assert_eq!(
            run(&a, &x).unwrap().1,
            vec![0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0]
        );
    }

    #[test]
    fn weightings_per_batch_row() {
        let x = Tensor::from_slice(&[1i64, 1, 3, 2, 2, 2], &[2, 3]).unwrap();
        let weighted = |mode: &str| {
            attrs(mode, 1, 1, 0, &[0], &[0, 1], &[1, 2])
                .with("weights", Attr::Floats(vec![0.5, 2.0]))
        };
        assert_eq!(
            run(&weighted("TF"), &x).unwrap(),
            (vec![2, 2], vec![2.0, 0.0, 0.0, 3.0])
        );
        assert_eq!(
            run(&weighted("IDF"), &x).unwrap().1,
            vec![0.5, 0.0, 0.0, 2.0]
        );
        assert_eq!(
            run(&weighted("TFIDF"), &x).unwrap().1,
            vec![1.0, 0.0, 0.0, 6.0]
        );
        let plain = attrs("IDF", 1, 1, 0, &[0], &[0, 1], &[1, 2]);
        assert_eq!(run(&plain, &x).unwrap().1, vec![1.0, 0.0, 0.0, 1.0]);
        // An empty row counts nothing.
        let empty = Tensor::from_slice::<i64>(&[], &[0]).unwrap();
        assert_eq!(run(&plain, &empty).unwrap(), (vec![2], vec![0.0, 0.0]));
    }

    #[test]
    fn huge_skip_counts_stay_bounded() {
        let a = attrs("TF", 2, 3, i64::MAX, &[0, 0, 2], &[0, 1], &[1, 2, 1, 2, 3]);
        let x = Tensor::from_slice(&[1i64, 9, 2, 9, 3], &[5]).unwrap();
        // (1, 2) at distance 2; (1, 2, 3) at distance 2.
        assert_eq!(run(&a, &x).unwrap().1, vec![1.0, 1.0]);
    }

    #[test]
    fn string_pools_count_tokens() {
        // Unigrams "a", "b" and the bigram ("b", "a"); "a" appears twice in the pool.
        let a = Attributes::new(OP)
            .with("mode", Attr::String("TF".into()))
            .with("min_gram_length", Attr::Int(1))
            .with("max_gram_length", Attr::Int(2))
            .with("max_skip_count", Attr::Int(0))
            .with("ngram_counts", Attr::Ints(vec![0, 2]))
            .with("ngram_indexes", Attr::Ints(vec![0, 1, 2]))
            .with(
                "pool_strings",
                Attr::Strings(["a", "b", "b", "a"].map(String::from).to_vec()),
            );
        let x = Tensor::from_strings(&[2, 3], ["b", "a", "zz", "a", "a", "b"]).unwrap();
        let (dims, y) = run(&a, &x).unwrap();
        assert_eq!(dims, [2, 3]);
        assert_eq!(y, [1.0, 1.0, 1.0, 2.0, 1.0, 0.0]);
        let ints = Tensor::from_slice(&[0i64], &[1]).unwrap();
        assert!(matches!(run(&a, &ints), Err(OpError::DType { .. })));
    }

    #[test]
    fn bad_attributes_and_inputs_are_errors() {
        let good = attrs("TF", 1, 1, 0, &[0], &[0, 1], &[1, 2]);
        let s = good
            .clone()
            .with("pool_strings", Attr::Strings(vec!["a".into()]));
        assert!(build(&s).unwrap_err().to_string().contains("both"));
        let text = Tensor::from_strings(&[1], ["a"]).unwrap();
        assert!(matches!(run(&good, &text), Err(OpError::DType { .. })));
        let m = good.clone().with("mode", Attr::String("BM25".into()));
        assert!(build(&m).unwrap_err().to_string().contains("mode"));
        // Three items do not make whole bigrams.
        let c = attrs("TF", 2, 2, 0, &[0, 0], &[0], &[1, 2, 3]);
        assert!(build(&c).unwrap_err().to_string().contains("2-grams"));
        let i = attrs("TF", 1, 1, 0, &[0], &[0], &[1, 2]);
        assert!(build(&i).unwrap_err().to_string().contains("ngram_indexes"));
        let w = good.clone().with("weights", Attr::Floats(vec![1.0]));
        assert!(build(&w).unwrap_err().to_string().contains("weights"));
        let g = attrs("TF", 2, 1, 0, &[0], &[0, 1], &[1, 2]);
        assert!(build(&g).is_err());
        let x3 = Tensor::from_slice(&[1i64, 2], &[1, 1, 2]).unwrap();
        assert!(run(&good, &x3).unwrap_err().to_string().contains("[N, C]"));
        let xf = Tensor::from_slice(&[1.0f32], &[1]).unwrap();
        assert!(matches!(
            run(&good, &xf).unwrap_err(),
            OpError::DType { .. }
        ));
    }
}
