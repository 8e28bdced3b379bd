//! Tiny decoder-only models written with strata's GGUF writer (random weights in any tensor
//! type), and a plain f32 reference implementation of the architecture on the dequantized
//! weights, written here from the architecture's definition.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;

use strata_core::dtype::block::dequantize_row;
use strata_core::DType;
use strata_gguf::{Array, GgufFile, GgufWriter, Value};

/// The constants of a tiny model.
#[derive(Clone, Debug)]
pub struct Tiny {
    pub arch: &'static str,
    pub dtype: DType,
    pub embedding: usize,
    pub feed_forward: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub layers: usize,
    pub vocab: usize,
    pub context: usize,
    pub rope_base: f32,
    pub eps: f32,
    /// A separate `output.weight` instead of the tied embedding.
    pub separate_head: bool,
    pub seed: u64,
}

impl Tiny {
    /// k-quants need rows that are multiples of 256, so every width is.
    pub fn new(arch: &'static str, dtype: DType) -> Tiny {
        Tiny {
            arch,
            dtype,
            embedding: 256,
            feed_forward: 512,
            heads: 4,
            kv_heads: 2,
            layers: 2,
            vocab: 64,
            context: 64,
            rope_base: 10_000.0,
            eps: 1e-5,
            separate_head: false,
            seed: 7,
        }
    }

    pub fn head_dim(&self) -> usize {
        self.embedding / self.heads
    }
}

/// A small xorshift generator: the same weights on every run.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in [-1, 1).
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// Bytes of `values` in `dtype`: f32/f16 exactly, legacy blocks by the reference quantizer (via
/// the writer), k-quant blocks as random bytes with small finite scales.
fn add_matrix(
    w: GgufWriter,
    rng: &mut Rng,
    name: &str,
    dtype: DType,
    rows: usize,
    cols: usize,
) -> GgufWriter {
    let scale = 1.5 / (cols as f32).sqrt();
    let values: Vec<f32> = (0..rows * cols).map(|_| rng.uniform() * scale).collect();
    match dtype {
        DType::F32 => w.tensor_f32(name, &[rows, cols], &values).unwrap(),
        DType::F16 => {
            let bytes = values
                .iter()
                .flat_map(|&v| half::f16::from_f32(v).to_bits().to_le_bytes())
                .collect();
            w.tensor(name, DType::F16, &[rows, cols], bytes).unwrap()
        }
        DType::Q4_K | DType::Q5_K | DType::Q6_K => {
            let block = dtype.size_in_bytes();
            let mut bytes: Vec<u8> = (0..dtype.bytes_for(rows * cols).unwrap())
                .map(|_| rng.next_u64() as u8)
                .collect();
            let d = |v: f32| half::f16::from_f32(v).to_bits().to_le_bytes();
            for b in bytes.chunks_exact_mut(block) {
                if dtype == DType::Q6_K {
                    // ql, qh, 16 i8 scales, then d.
                    b[block - 2..].copy_from_slice(&d(scale / 2000.0));
                } else {
                    // d, dmin, 12 bytes of 6-bit scales and mins, then the quants.
                    b[0..2].copy_from_slice(&d(scale / 400.0));
                    b[2..4].copy_from_slice(&d(scale / 400.0));
                }
            }
            w.tensor(name, dtype, &[rows, cols], bytes).unwrap()
        }
        _ => w
            .tensor_quantized(name, dtype, &[rows, cols], &values)
            .unwrap(),
    }
}

fn add_vector(w: GgufWriter, rng: &mut Rng, name: &str, len: usize, around: f32) -> GgufWriter {
    let values: Vec<f32> = (0..len).map(|_| around + 0.2 * rng.uniform()).collect();
    w.tensor_f32(name, &[len], &values).unwrap()
}

/// The tiny model as a GGUF writer (metadata, a byte-level vocabulary, random weights).
pub fn writer(t: &Tiny) -> GgufWriter {
    writer_with(t, &[])
}

/// [`writer`] with metadata keys replaced (`Some`) or left out (`None`).
pub fn writer_with(t: &Tiny, overrides: &[(&str, Option<Value>)]) -> GgufWriter {
    let mut rng = Rng::new(t.seed);
    let a = t.arch;
    let u32v = |v: usize| Value::U32(v as u32);
    let tokens: Vec<String> = (0..t.vocab).map(|i| format!("t{i}")).collect();
    let mut metadata: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(a.into())),
        (format!("{a}.context_length"), u32v(t.context)),
        (format!("{a}.embedding_length"), u32v(t.embedding)),
        (format!("{a}.block_count"), u32v(t.layers)),
        (format!("{a}.feed_forward_length"), u32v(t.feed_forward)),
        (format!("{a}.attention.head_count"), u32v(t.heads)),
        (format!("{a}.attention.head_count_kv"), u32v(t.kv_heads)),
        (format!("{a}.rope.freq_base"), Value::F32(t.rope_base)),
        (
            format!("{a}.attention.layer_norm_rms_epsilon"),
            Value::F32(t.eps),
        ),
        ("tokenizer.ggml.model".into(), Value::String("gpt2".into())),
        (
            "tokenizer.ggml.tokens".into(),
            Value::Array(Array::String(tokens)),
        ),
        (
            "tokenizer.ggml.merges".into(),
            Value::Array(Array::String(Vec::new())),
        ),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(1)),
    ];
    for (key, value) in overrides {
        metadata.retain(|(k, _)| k != key);
        if let Some(v) = value {
            metadata.push((key.to_string(), v.clone()));
        }
    }
    let mut w = GgufWriter::new();
    for (k, v) in metadata {
        w = w.metadata(&k, v);
    }
    let (e, f, hd) = (t.embedding, t.feed_forward, t.head_dim());
    w = add_matrix(w, &mut rng, "token_embd.weight", t.dtype, t.vocab, e);
    for l in 0..t.layers {
        let n = |p: &str| format!("blk.{l}.{p}");
        w = add_vector(w, &mut rng, &n("attn_norm.weight"), e, 1.0);
        w = add_matrix(w, &mut rng, &n("attn_q.weight"), t.dtype, t.heads * hd, e);
        w = add_matrix(
            w,
            &mut rng,
            &n("attn_k.weight"),
            t.dtype,
            t.kv_heads * hd,
            e,
        );
        w = add_matrix(
            w,
            &mut rng,
            &n("attn_v.weight"),
            t.dtype,
            t.kv_heads * hd,
            e,
        );
        if a == "qwen2" {
            w = add_vector(w, &mut rng, &n("attn_q.bias"), t.heads * hd, 0.0);
            w = add_vector(w, &mut rng, &n("attn_k.bias"), t.kv_heads * hd, 0.0);
            w = add_vector(w, &mut rng, &n("attn_v.bias"), t.kv_heads * hd, 0.0);
        }
        w = add_matrix(
            w,
            &mut rng,
            &n("attn_output.weight"),
            t.dtype,
            e,
            t.heads * hd,
        );
        w = add_vector(w, &mut rng, &n("ffn_norm.weight"), e, 1.0);
        w = add_matrix(w, &mut rng, &n("ffn_gate.weight"), t.dtype, f, e);
        w = add_matrix(w, &mut rng, &n("ffn_up.weight"), t.dtype, f, e);
        w = add_matrix(w, &mut rng, &n("ffn_down.weight"), t.dtype, e, f);
    }
    w = add_vector(w, &mut rng, "output_norm.weight", e, 1.0);
    if t.separate_head {
        w = add_matrix(w, &mut rng, "output.weight", t.dtype, t.vocab, e);
    }
    w
}

pub fn temp_path(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("strata-llm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    static COUNTER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let id = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    dir.join(format!("{tag}-{id}.gguf"))
}

/// Writes the tiny model to a temporary file and opens it.
pub fn open(t: &Tiny) -> GgufFile {
    open_writer(&writer(t))
}

pub fn open_writer(w: &GgufWriter) -> GgufFile {
    let path = temp_path("tiny");
    w.write(&path).unwrap();
    let file = GgufFile::open(&path).unwrap();
    std::fs::remove_file(&path).ok();
    file
}

/// Every tensor of the file dequantized to f32.
fn dequantized(file: &GgufFile) -> HashMap<String, Vec<f32>> {
    file.tensors()
        .iter()
        .map(|info| {
            let mut out = vec![0.0f32; info.numel()];
            let bytes = file.tensor_bytes(&info.name).unwrap();
            let cols = *info.dims.last().unwrap();
            let row_bytes = info.dtype.bytes_for(cols).unwrap();
            for (o, b) in out
                .chunks_exact_mut(cols)
                .zip(bytes.chunks_exact(row_bytes))
            {
                dequantize_row(info.dtype, b, o).unwrap();
            }
            (info.name.clone(), out)
        })
        .collect()
}

/// `y = W · x` for `W` of `rows × x.len()`.
fn matvec(w: &[f32], x: &[f32]) -> Vec<f32> {
    w.chunks_exact(x.len())
        .map(|row| row.iter().zip(x).map(|(a, b)| (a * b) as f64).sum::<f64>() as f32)
        .collect()
}

fn rms_norm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let mean = x.iter().map(|v| (v * v) as f64).sum::<f64>() / x.len() as f64;
    let scale = 1.0 / (mean + eps as f64).sqrt();
    x.iter()
        .zip(w)
        .map(|(v, w)| (*v as f64 * scale) as f32 * w)
        .collect()
}

/// Rotates each head of `x` for position `pos`: adjacent pairs (llama, mistral) or halves (NeoX,
/// qwen2), pair `i` by `pos · base^(-2i/d)`.
fn rope(x: &mut [f32], head_dim: usize, pos: usize, base: f32, neox: bool) {
    let half = head_dim / 2;
    for head in x.chunks_exact_mut(head_dim) {
        for i in 0..half {
            let angle = pos as f64 * (base as f64).powf(-2.0 * i as f64 / head_dim as f64);
            let (a, b) = if neox {
                (i, i + half)
            } else {
                (2 * i, 2 * i + 1)
            };
            let (x0, x1) = (head[a] as f64, head[b] as f64);
            head[a] = (x0 * angle.cos() - x1 * angle.sin()) as f32;
            head[b] = (x0 * angle.sin() + x1 * angle.cos()) as f32;
        }
    }
}

/// The logits at every position of `ids`, computed from the architecture's definition on the
/// dequantized weights.
pub fn reference_logits(t: &Tiny, file: &GgufFile, ids: &[u32]) -> Vec<Vec<f32>> {
    let w = dequantized(file);
    let (e, hd) = (t.embedding, t.head_dim());
    let neox = t.arch == "qwen2";
    let group = t.heads / t.kv_heads;
    let mut keys: Vec<Vec<Vec<f32>>> = vec![Vec::new(); t.layers];
    let mut values: Vec<Vec<Vec<f32>>> = vec![Vec::new(); t.layers];
    let mut out = Vec::new();
    for (pos, &id) in ids.iter().enumerate() {
        let mut x = w["token_embd.weight"][id as usize * e..(id as usize + 1) * e].to_vec();
        for l in 0..t.layers {
            let g = |p: &str| &w[&format!("blk.{l}.{p}")];
            let bias = |v: Vec<f32>, p: &str| -> Vec<f32> {
                match w.get(&format!("blk.{l}.{p}")) {
                    Some(b) => v.iter().zip(b).map(|(a, b)| a + b).collect(),
                    None => v,
                }
            };
            let h = rms_norm(&x, g("attn_norm.weight"), t.eps);
            let mut q = bias(matvec(g("attn_q.weight"), &h), "attn_q.bias");
            let mut k = bias(matvec(g("attn_k.weight"), &h), "attn_k.bias");
            let v = bias(matvec(g("attn_v.weight"), &h), "attn_v.bias");
            rope(&mut q, hd, pos, t.rope_base, neox);
            rope(&mut k, hd, pos, t.rope_base, neox);
            keys[l].push(k);
            values[l].push(v);
            let mut attn = vec![0.0f32; t.heads * hd];
            for head in 0..t.heads {
                let kv = head / group;
                let qh = &q[head * hd..(head + 1) * hd];
                let scores: Vec<f64> = keys[l]
                    .iter()
                    .map(|k| {
                        qh.iter()
                            .zip(&k[kv * hd..(kv + 1) * hd])
                            .map(|(a, b)| (a * b) as f64)
                            .sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let exps: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f64 = exps.iter().sum();
                for (p, v) in exps.iter().zip(&values[l]) {
                    for d in 0..hd {
                        attn[head * hd + d] += (p / sum) as f32 * v[kv * hd + d];
                    }
                }
            }
            let o = matvec(g("attn_output.weight"), &attn);
            x.iter_mut().zip(&o).for_each(|(x, o)| *x += o);
            let h = rms_norm(&x, g("ffn_norm.weight"), t.eps);
            let gate = matvec(g("ffn_gate.weight"), &h);
            let up = matvec(g("ffn_up.weight"), &h);
            let act: Vec<f32> = gate
                .iter()
                .zip(&up)
                .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                .collect();
            let down = matvec(g("ffn_down.weight"), &act);
            x.iter_mut().zip(&down).for_each(|(x, d)| *x += d);
        }
        let h = rms_norm(&x, &w["output_norm.weight"], t.eps);
        let head = w.get("output.weight").unwrap_or(&w["token_embd.weight"]);
        out.push(matvec(head, &h));
    }
    out
}
