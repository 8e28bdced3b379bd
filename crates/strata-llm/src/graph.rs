//! The architecture as a strata graph (L3): one decoder block per layer, built from strata's
//! operators — the `strata.llm` family for quantized products, the embedding, cached attention,
//! and RmsNorm, Rope and SwiGlu with ggml's rounding (so logits are llama.cpp's bit for bit);
//! the ONNX Add and Slice for the rest.
//! Weights are initializers over the mapped file (zero-copy). Inputs are `ids (1, seq)` and
//! `positions (1, seq)` int64 with `seq` symbolic, so one plan runs prefill chunks and decode
//! steps; the output is `logits (1, rows, vocab)` for every position or the last one only.
//!
//! ```text
//! ids ─ QuantEmbedding ─ x ─┬─ RMSNorm ─ Q/K/V ─ RoPE(q,k) ─ CachedAttention ─ O ─ Add ─┬─ RMSNorm ─ gate/up ─ SwiGLU ─ down ─ Add ─ … ─ RMSNorm ─ [Slice last] ─ head ─ logits
//!                           └────────────────────────────────────────────────────────┘└───────────────────────────────────────────┘
//! ```

use std::sync::Arc;

use strata_core::{DType, Tensor};
use strata_gguf::GgufFile;
use strata_ops::ops::llm::DOMAIN;
use strata_ops::{build_operator, Attr, Attributes, Dim, OpContext};
use strata_runtime::{Graph, ValueId};

use crate::config::ModelConfig;
use crate::error::{LlmError, Result};

/// The names of the graph's inputs and output.
pub const IDS: &str = "ids";
pub const POSITIONS: &str = "positions";
pub const LOGITS: &str = "logits";

/// The symbolic sequence dim of the inputs.
pub const SEQ: &str = "seq";

/// What the graph is built for beyond the file's constants.
#[derive(Clone, Copy, Debug)]
pub struct GraphOptions {
    /// Positions a context holds (the KV cache's capacity, RoPE's table length).
    pub context: usize,
    /// Logits for every position (tests, scoring) or only the last (generation).
    pub all_logits: bool,
}

struct Builder<'a> {
    file: &'a GgufFile,
    graph: Graph,
    nodes: usize,
}

impl Builder<'_> {
    fn weight(&mut self, name: &str) -> Result<ValueId> {
        let tensor = self.file.tensor(name)?;
        Ok(self.graph.add_initializer(name, tensor)?)
    }

    fn optional_weight(&mut self, name: &str) -> Result<Option<ValueId>> {
        if self.file.tensor_info(name).is_ok() {
            self.weight(name).map(Some)
        } else {
            Ok(None)
        }
    }

    /// A weight with the dims `expect` (strata order), checked.
    fn checked_weight(&mut self, name: &str, expect: &[usize]) -> Result<ValueId> {
        let info = self.file.tensor_info(name)?;
        if info.dims != expect {
            return Err(LlmError::tensor(
                name,
                format!(
                    "has dims {:?}, the model's constants need {expect:?}",
                    info.dims
                ),
            ));
        }
        self.weight(name)
    }

    fn node(
        &mut self,
        domain: &str,
        op_type: &str,
        opset: i64,
        attrs: &[(&str, Attr)],
        inputs: &[Option<ValueId>],
        output: &str,
    ) -> Result<ValueId> {
        let mut attributes = Attributes::new(op_type);
        for (name, value) in attrs {
            attributes.insert(name, value.clone());
        }
        let op = build_operator(&OpContext {
            op_type,
            domain,
            opset,
            attrs: &attributes,
            num_inputs: inputs.len(),
            num_outputs: 1,
        })
        .map_err(|e| LlmError::Usage {
            what: "building the graph",
            reason: e.to_string(),
        })?;
        self.nodes += 1;
        let name = format!("{output}#{}", self.nodes);
        let ids = self
            .graph
            .add_node(&name, Arc::from(op), inputs, &[output])?;
        Ok(ids[0])
    }

    fn matmul(
        &mut self,
        x: ValueId,
        w: ValueId,
        bias: Option<ValueId>,
        out: &str,
    ) -> Result<ValueId> {
        let inputs = [Some(x), Some(w), bias];
        let inputs = if bias.is_some() {
            &inputs[..]
        } else {
            &inputs[..2]
        };
        self.node(DOMAIN, "QuantMatMul", 1, &[], inputs, out)
    }

    fn rms_norm(&mut self, x: ValueId, scale: ValueId, eps: f32, out: &str) -> Result<ValueId> {
        self.node(
            DOMAIN,
            "RmsNorm",
            1,
            &[("epsilon", Attr::Float(eps))],
            &[Some(x), Some(scale)],
            out,
        )
    }

    fn add(&mut self, a: ValueId, b: ValueId, out: &str) -> Result<ValueId> {
        self.node("", "Add", 14, &[], &[Some(a), Some(b)], out)
    }
}

/// RoPE's cos and sin tables, `(context, rope_dims / 2)`: pair `i` of position `p` turns by
/// `p · base^(-2i / rope_dims)`, computed in f32 by repeated multiplication as ggml does, so the
/// angles are llama.cpp's.
fn rope_tables(config: &ModelConfig, context: usize) -> Result<(Tensor, Tensor)> {
    let half = config.rope_dims / 2;
    let theta_scale = config.rope_base.powf(-2.0 / config.rope_dims as f32);
    let mut cos = Vec::with_capacity(context * half);
    let mut sin = Vec::with_capacity(context * half);
    for pos in 0..context {
        let mut theta = pos as f32;
        for _ in 0..half {
            cos.push(theta.cos());
            sin.push(theta.sin());
            theta *= theta_scale;
        }
    }
    Ok((
        Tensor::from_slice(&cos, &[context, half])?,
        Tensor::from_slice(&sin, &[context, half])?,
    ))
}

/// Builds the graph of `file`'s model.
pub fn build_graph(file: &GgufFile, config: &ModelConfig, options: GraphOptions) -> Result<Graph> {
    let c = config;
    let mut b = Builder {
        file,
        graph: Graph::new(),
        nodes: 0,
    };
    let seq = || vec![Dim::Known(1), Dim::sym(SEQ)];
    let ids = b.graph.add_input(IDS, DType::I64, seq())?;
    let positions = b.graph.add_input(POSITIONS, DType::I64, seq())?;
    let (cos, sin) = rope_tables(c, options.context)?;
    let cos = b.graph.add_initializer("rope.cos", cos)?;
    let sin = b.graph.add_initializer("rope.sin", sin)?;

    let embd = b.file.tensor_info("token_embd.weight")?;
    let vocab = embd.dims.first().copied().unwrap_or(0);
    let embd = b.checked_weight("token_embd.weight", &[vocab, c.embedding])?;
    let mut x = b.node(
        DOMAIN,
        "QuantEmbedding",
        1,
        &[],
        &[Some(embd), Some(ids)],
        "embedded",
    )?;

    let (q_width, kv_width) = (c.heads * c.head_dim, c.kv_heads * c.head_dim);
    let rope = |heads: usize| {
        vec![
            ("neox", Attr::Int(i64::from(c.architecture.rope_neox()))),
            ("num_heads", Attr::Int(heads as i64)),
            ("rotary_embedding_dim", Attr::Int(c.rope_dims as i64)),
        ]
    };
    for l in 0..c.layers {
        let w = |part: &str| format!("blk.{l}.{part}");
        let p = |what: &str| format!("l{l}.{what}");
        let attn_norm = b.checked_weight(&w("attn_norm.weight"), &[c.embedding])?;
        let h = b.rms_norm(x, attn_norm, c.rms_epsilon, &p("attn_in"))?;
        let wq = b.checked_weight(&w("attn_q.weight"), &[q_width, c.embedding])?;
        let wk = b.checked_weight(&w("attn_k.weight"), &[kv_width, c.embedding])?;
        let wv = b.checked_weight(&w("attn_v.weight"), &[kv_width, c.embedding])?;
        let (bq, bk, bv) = (
            b.optional_weight(&w("attn_q.bias"))?,
            b.optional_weight(&w("attn_k.bias"))?,
            b.optional_weight(&w("attn_v.bias"))?,
        );
        let q = b.matmul(h, wq, bq, &p("q"))?;
        let k = b.matmul(h, wk, bk, &p("k"))?;
        let v = b.matmul(h, wv, bv, &p("v"))?;
        let q_inputs = [Some(q), Some(cos), Some(sin), Some(positions)];
        let q = b.node(DOMAIN, "Rope", 1, &rope(c.heads), &q_inputs, &p("q_rope"))?;
        let k_inputs = [Some(k), Some(cos), Some(sin), Some(positions)];
        let k = b.node(
            DOMAIN,
            "Rope",
            1,
            &rope(c.kv_heads),
            &k_inputs,
            &p("k_rope"),
        )?;
        let attention = b.node(
            DOMAIN,
            "CachedAttention",
            1,
            &[
                ("num_heads", Attr::Int(c.heads as i64)),
                ("kv_heads", Attr::Int(c.kv_heads as i64)),
                ("head_dim", Attr::Int(c.head_dim as i64)),
                ("max_context", Attr::Int(options.context as i64)),
            ],
            &[Some(q), Some(k), Some(v), Some(positions)],
            &p("attention"),
        )?;
        let wo = b.checked_weight(&w("attn_output.weight"), &[c.embedding, q_width])?;
        let o = b.matmul(attention, wo, None, &p("attn_out"))?;
        x = b.add(x, o, &p("resid_attn"))?;

        let ffn_norm = b.checked_weight(&w("ffn_norm.weight"), &[c.embedding])?;
        let h = b.rms_norm(x, ffn_norm, c.rms_epsilon, &p("ffn_in"))?;
        let wg = b.checked_weight(&w("ffn_gate.weight"), &[c.feed_forward, c.embedding])?;
        let wu = b.checked_weight(&w("ffn_up.weight"), &[c.feed_forward, c.embedding])?;
        let wd = b.checked_weight(&w("ffn_down.weight"), &[c.embedding, c.feed_forward])?;
        let gate = b.matmul(h, wg, None, &p("gate"))?;
        let up = b.matmul(h, wu, None, &p("up"))?;
        let act = b.node(
            DOMAIN,
            "SwiGlu",
            1,
            &[],
            &[Some(gate), Some(up)],
            &p("swiglu"),
        )?;
        let down = b.matmul(act, wd, None, &p("down"))?;
        x = b.add(x, down, &p("resid_ffn"))?;
    }
    let out_norm = b.checked_weight("output_norm.weight", &[c.embedding])?;
    let mut x = b.rms_norm(x, out_norm, c.rms_epsilon, "final_norm")?;
    if !options.all_logits {
        let mut int = |name: &str, v: i64| -> Result<ValueId> {
            Ok(b.graph
                .add_initializer(name, Tensor::from_slice(&[v], &[1])?)?)
        };
        let (starts, ends, axes) = (
            int("last.starts", -1)?,
            int("last.ends", i64::MAX)?,
            int("last.axes", 1)?,
        );
        x = b.node(
            "",
            "Slice",
            13,
            &[],
            &[Some(x), Some(starts), Some(ends), Some(axes)],
            "last",
        )?;
    }
    let head = match b.file.tensor_info("output.weight") {
        Ok(_) => b.checked_weight("output.weight", &[vocab, c.embedding])?,
        // Tied: the embedding table is the output head too.
        Err(_) => embd,
    };
    let logits = b.matmul(x, head, None, LOGITS)?;
    b.graph.set_outputs(&[logits]);
    Ok(b.graph)
}
