#!/usr/bin/env python3
"""Conformance cases for strata's com.microsoft operators, made by onnxruntime.

Builds one tiny model per (operator, attribute combination) with onnx.helper, runs onnxruntime on
seeded inputs and writes each case in the ONNX backend-test layout
(test_<name>/model.onnx + test_data_set_0/input_*.pb, output_*.pb) under
crates/strata-conformance/tests/microsoft_cases/, which `cargo test` runs through the conformance
runner (crates/strata-conformance/tests/microsoft_cases.rs). Needs numpy, onnx, onnxruntime.

    python3 scripts/ms_op_cases.py            # rewrites every case
    python3 scripts/ms_op_cases.py matmul     # only cases whose name contains "matmul"

Weights are initializers (as in real models); everything else is a graph input. Where
onnxruntime's answer depends on an accuracy choice strata does not make (MatMulNBits
accuracy_level 4 quantizes activations to int8), the expected output comes from the same model
at accuracy_level 0, the exact product that level approximates.
"""
import os
import shutil
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper, TensorProto

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "crates", "strata-conformance", "tests", "microsoft_cases")
MS = "com.microsoft"
CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def rng(name):
    return np.random.default_rng(abs(hash(name)) % (2**32) if False else sum(map(ord, name)) * 7919)


def ttype(a):
    return helper.np_dtype_to_tensor_dtype(a.dtype)


def write_case(name, nodes, inputs, inits, outputs, reference_nodes=None, opset=17, expected=None):
    """inputs/inits: dicts name -> array; outputs: list of names. reference_nodes: the graph
    onnxruntime computes the expected outputs with, when it differs from the written one;
    expected: the outputs themselves, when onnxruntime cannot run the written graph (layouts its
    CPU kernel refuses, computed by it from an equivalent graph)."""
    def model(ns):
        g = helper.make_graph(
            ns, name,
            [helper.make_tensor_value_info(k, ttype(v), v.shape) for k, v in inputs.items()],
            [onnx.ValueInfoProto(name=o) for o in outputs],
            [numpy_helper.from_array(v, k) for k, v in inits.items()])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset),
                                                     helper.make_opsetid(MS, 1)],
                                 ir_version=8)
    m = model(nodes)
    ref = model(reference_nodes) if reference_nodes else m
    results = expected if expected is not None else run_ort(ref, inputs)
    d = os.path.join(OUT, "test_" + name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    # Outputs get their real types now that onnxruntime has computed them.
    for vi, r in zip(m.graph.output, results):
        vi.CopyFrom(helper.make_tensor_value_info(vi.name, ttype(r), r.shape))
    onnx.save(m, os.path.join(d, "model.onnx"))
    for i, (k, v) in enumerate(inputs.items()):
        onnx.save_tensor(numpy_helper.from_array(v, k), os.path.join(d, "test_data_set_0", f"input_{i}.pb"))
    for i, (k, v) in enumerate(zip(outputs, results)):
        onnx.save_tensor(numpy_helper.from_array(v, k), os.path.join(d, "test_data_set_0", f"output_{i}.pb"))


def run_ort(model, inputs):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)


def ort_outputs(nodes, inputs, outputs, opset=17):
    """onnxruntime's outputs of a graph of `nodes` over graph inputs `inputs`."""
    g = helper.make_graph(
        nodes, "reference",
        [helper.make_tensor_value_info(k, ttype(v), v.shape) for k, v in inputs.items()],
        [onnx.ValueInfoProto(name=o) for o in outputs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)],
                          ir_version=8)
    return run_ort(m, inputs)


def f32(r, *shape):
    return r.standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------- GELU family

@case
def gelu():
    r = rng("gelu")
    write_case("ms_gelu", [helper.make_node("Gelu", ["x"], ["y"], domain=MS)],
               {"x": f32(r, 2, 3, 8) * 3}, {}, ["y"])


@case
def fast_gelu():
    r = rng("fast_gelu")
    # Above -3 only: below it 1 + tanh cancels and onnxruntime's f32 result is itself off by
    # 0.1-1 % (strata recomputes that tail in f64; its unit tests check it).
    x = np.clip(f32(r, 2, 3, 8) * 3, -2.5, None)
    write_case("ms_fast_gelu", [helper.make_node("FastGelu", ["x"], ["y"], domain=MS)], {"x": x}, {}, ["y"])
    write_case("ms_fast_gelu_bias", [helper.make_node("FastGelu", ["x", "b"], ["y"], domain=MS)],
               {"x": x}, {"b": np.clip(f32(r, 8) * 0.4, -0.5, 0.5)}, ["y"])


@case
def bias_gelu():
    r = rng("bias_gelu")
    write_case("ms_bias_gelu", [helper.make_node("BiasGelu", ["x", "b"], ["y"], domain=MS)],
               {"x": f32(r, 2, 4, 16) * 2}, {"b": f32(r, 16)}, ["y"])


@case
def quick_gelu():
    r = rng("quick_gelu")
    x = f32(r, 3, 10) * 3
    write_case("ms_quick_gelu", [helper.make_node("QuickGelu", ["x"], ["y"], domain=MS)], {"x": x}, {}, ["y"])
    write_case("ms_quick_gelu_alpha", [helper.make_node("QuickGelu", ["x"], ["y"], domain=MS, alpha=1.0)],
               {"x": x}, {}, ["y"])


# ---------------------------------------------------------------- normalizations

@case
def skip_layer_norm():
    r = rng("skip_layer_norm")
    x, s = f32(r, 2, 3, 16), f32(r, 2, 3, 16)
    g, b, bias = f32(r, 16), f32(r, 16), f32(r, 16)
    write_case("ms_skip_layer_norm", [helper.make_node(
        "SkipLayerNormalization", ["x", "s", "g", "b", "bias"], ["y", "", "", "sum"], domain=MS, epsilon=1e-5)],
        {"x": x, "s": s}, {"g": g, "b": b, "bias": bias}, ["y", "sum"])
    write_case("ms_skip_layer_norm_no_beta", [helper.make_node(
        "SkipLayerNormalization", ["x", "s", "g"], ["y"], domain=MS)],
        {"x": x, "s": s}, {"g": g}, ["y"])
    write_case("ms_skip_layer_norm_broadcast_skip", [helper.make_node(
        "SkipLayerNormalization", ["x", "s", "g", "b"], ["y"], domain=MS, epsilon=1e-6)],
        {"x": x, "s": f32(r, 3, 16)}, {"g": g, "b": b}, ["y"])
    write_case("ms_skip_layer_norm_2d", [helper.make_node(
        "SkipLayerNormalization", ["x", "s", "g", "b"], ["y"], domain=MS)],
        {"x": f32(r, 5, 16), "s": f32(r, 5, 16)}, {"g": g, "b": b}, ["y"])


@case
def skip_simplified_layer_norm():
    r = rng("skip_simplified")
    x, s, g = f32(r, 2, 3, 16), f32(r, 2, 3, 16), f32(r, 16)
    write_case("ms_skip_simplified_layer_norm", [helper.make_node(
        "SkipSimplifiedLayerNormalization", ["x", "s", "g"], ["y", "", "", "sum"], domain=MS, epsilon=1e-5)],
        {"x": x, "s": s}, {"g": g}, ["y", "sum"])
    write_case("ms_skip_simplified_layer_norm_bias", [helper.make_node(
        "SkipSimplifiedLayerNormalization", ["x", "s", "g", "bias"], ["y", "", "", "sum"], domain=MS)],
        {"x": x, "s": s}, {"g": g, "bias": f32(r, 16)}, ["y", "sum"])


@case
def simplified_layer_norm():
    r = rng("simplified_layer_norm")
    write_case("ms_simplified_layer_norm", [helper.make_node(
        "SimplifiedLayerNormalization", ["x", "g"], ["y", "inv"], epsilon=1e-5)],
        {"x": f32(r, 2, 3, 16)}, {"g": f32(r, 16)}, ["y", "inv"])
    write_case("ms_simplified_layer_norm_axis", [helper.make_node(
        "SimplifiedLayerNormalization", ["x", "g"], ["y"], axis=1)],
        {"x": f32(r, 2, 3, 4)}, {"g": f32(r, 3, 4)}, ["y"])


# ---------------------------------------------------------------- MatMulNBits

def quantize_nbits(w, bits, block, zero_points, float_zp=False):
    """w: (N, K) -> (B, scales, zp) in MatMulNBits layout (asymmetric when zero_points)."""
    n, k = w.shape
    nb = (k + block - 1) // block
    pad = np.zeros((n, nb * block), np.float32)
    pad[:, :k] = w
    blocks = pad.reshape(n, nb, block)
    qmax = 2**bits - 1
    if zero_points:
        lo, hi = blocks.min(-1), blocks.max(-1)
        scale = np.maximum((hi - lo) / qmax, 1e-6)
        zp = np.clip(np.round(-lo / scale), 0, qmax)
    else:
        scale = np.maximum(np.abs(blocks).max(-1) / (2 ** (bits - 1)), 1e-6)
        zp = np.full(scale.shape, 2 ** (bits - 1), np.float32)
    q = np.clip(np.round(blocks / scale[..., None] + zp[..., None]), 0, qmax).astype(np.uint8)
    per = 8 // bits
    qb = q.reshape(n, nb, block // per, per)
    packed = np.zeros(qb.shape[:-1], np.uint8)
    for i in range(per):
        packed |= (qb[..., i] << (i * bits)).astype(np.uint8)
    zp_out = None
    if zero_points:
        if float_zp:
            zp_out = zp.astype(np.float32).reshape(-1)
        else:
            zq = zp.astype(np.uint8)
            row = (nb * bits + 7) // 8
            zpad = np.zeros((n, row * per), np.uint8)
            zpad[:, :nb] = zq
            zr = zpad.reshape(n, row, per)
            zp_out = np.zeros((n, row), np.uint8)
            for i in range(per):
                zp_out |= (zr[..., i] << (i * bits)).astype(np.uint8)
            zp_out = zp_out.reshape(-1)
    return packed, scale.astype(np.float32).reshape(-1), zp_out


def nbits_case(name, m_shape, k, n, bits, block, zero_points=False, float_zp=False, bias=False, level=None):
    r = rng(name)
    w = f32(r, n, k)
    b, s, z = quantize_nbits(w, bits, block, zero_points, float_zp)
    inits = {"B": b, "S": s}
    names = ["a", "B", "S"]
    if z is not None:
        inits["Z"] = z
        names.append("Z")
    if bias:
        inits["bias"] = f32(r, n)
        names += [""] * (5 - len(names)) + ["bias"]
    attrs = dict(K=k, N=n, bits=bits, block_size=block)
    node = helper.make_node("MatMulNBits", names, ["y"], domain=MS, **attrs,
                            **({} if level is None else {"accuracy_level": level}))
    ref = [helper.make_node("MatMulNBits", names, ["y"], domain=MS, **attrs)] if level == 4 else None
    write_case(name, [node], {"a": f32(r, *m_shape, k)}, inits, ["y"], reference_nodes=ref)


@case
def matmul_nbits():
    for block in (16, 32, 64, 128, 256):
        nbits_case(f"ms_matmul_nbits_4bit_block{block}", (3,), 256, 5, 4, block)
    nbits_case("ms_matmul_nbits_4bit_zero_points", (2, 3), 96, 7, 4, 32, zero_points=True)
    nbits_case("ms_matmul_nbits_4bit_zero_points_odd_blocks", (4,), 80, 6, 4, 16, zero_points=True)
    nbits_case("ms_matmul_nbits_4bit_partial_block_bias", (2,), 40, 8, 4, 32, bias=True)
    nbits_case("ms_matmul_nbits_4bit_float_zero_points", (3,), 64, 4, 4, 32, zero_points=True, float_zp=True)
    nbits_case("ms_matmul_nbits_8bit", (3,), 128, 6, 8, 32)
    nbits_case("ms_matmul_nbits_8bit_zero_points_block64", (1, 2), 192, 5, 8, 64, zero_points=True)
    nbits_case("ms_matmul_nbits_4bit_accuracy_level4", (5,), 128, 9, 4, 32, level=4)
    nbits_case("ms_matmul_nbits_4bit_accuracy_level1_decode", (1,), 64, 33, 4, 16, level=1)


# ---------------------------------------------------------------- fused products

@case
def fused_matmul():
    r = rng("fused_matmul")
    def fm(name, a, b, **attrs):
        write_case(name, [helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS, **attrs)],
                   {"a": a}, {"b": b}, ["y"])
    fm("ms_fused_matmul_alpha", f32(r, 3, 4), f32(r, 4, 5), alpha=0.5)
    fm("ms_fused_matmul_trans_a", f32(r, 2, 4, 3), f32(r, 4, 5), transA=1, alpha=1.5)
    fm("ms_fused_matmul_trans_b_batch", f32(r, 2, 3, 4), f32(r, 2, 5, 4), transB=1, alpha=0.25)
    fm("ms_fused_matmul_trans_both_broadcast", f32(r, 2, 1, 4, 3), f32(r, 3, 5, 4), transA=1, transB=1)
    fm("ms_fused_matmul_trans_batch_a", f32(r, 3, 2, 4), f32(r, 2, 4, 5), transBatchA=1)
    fm("ms_fused_matmul_trans_batch_b", f32(r, 2, 3, 4), f32(r, 4, 2, 5), transBatchB=1, alpha=2.0)


@case
def fused_conv():
    r = rng("fused_conv")
    x, w, bias = f32(r, 1, 3, 6, 6), f32(r, 4, 3, 3, 3), f32(r, 4)
    def fc(name, extra_inputs, inputs, **attrs):
        names = ["x", "w", "b"] + list(extra_inputs)
        write_case(name, [helper.make_node("FusedConv", names, ["y"], domain=MS, **attrs)],
                   {"x": x, **inputs}, {"w": w, "b": bias}, ["y"])
    fc("ms_fused_conv_relu", [], {}, activation="Relu", pads=[1, 1, 1, 1])
    fc("ms_fused_conv_leaky_relu_stride", [], {}, activation="LeakyRelu", activation_params=[0.2], strides=[2, 2])
    fc("ms_fused_conv_clip", [], {}, activation="Clip", activation_params=[-0.5, 0.5])
    fc("ms_fused_conv_tanh", [], {}, activation="Tanh")
    fc("ms_fused_conv_hard_sigmoid", [], {}, activation="HardSigmoid", activation_params=[0.3, 0.4])
    fc("ms_fused_conv_sigmoid", [], {}, activation="Sigmoid")
    fc("ms_fused_conv_relu_residual", ["z"], {"z": f32(r, 1, 4, 6, 6)}, activation="Relu", pads=[1, 1, 1, 1])


# ---------------------------------------------------------------- embeddings

@case
def embed_layer_norm():
    r = rng("embed_layer_norm")
    b, s, h, v = 2, 5, 8, 30
    ids = r.integers(0, v, (b, s)).astype(np.int32)
    seg = r.integers(0, 2, (b, s)).astype(np.int32)
    mask = np.ones((b, s), np.int32)
    mask[1, 3:] = 0
    tables = {"word": f32(r, v, h), "pos": f32(r, 16, h), "segt": f32(r, 2, h), "g": f32(r, h), "beta": f32(r, h)}
    write_case("ms_embed_layer_norm", [helper.make_node(
        "EmbedLayerNormalization", ["ids", "seg", "word", "pos", "segt", "g", "beta", "mask"], ["y", "mi"],
        domain=MS, epsilon=1e-5)], {"ids": ids, "seg": seg, "mask": mask}, tables, ["y", "mi"])
    no_seg = {k: v for k, v in tables.items() if k != "segt"}
    write_case("ms_embed_layer_norm_no_segment_sum", [helper.make_node(
        "EmbedLayerNormalization", ["ids", "", "word", "pos", "", "g", "beta"], ["y", "mi", "sum"],
        domain=MS, epsilon=1e-5)], {"ids": ids}, no_seg, ["y", "sum"])


# ---------------------------------------------------------------- rotary embedding

@case
def rotary_embedding():
    r = rng("rotary_embedding")
    b, s, n, h = 2, 3, 2, 8
    def caches(rows, half):
        ang = np.arange(rows)[:, None] * (1.0 / 10000 ** (np.arange(half) / half))[None, :]
        return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    cos, sin = caches(16, h // 2)
    pos = r.integers(0, 16, (b, s)).astype(np.int64)
    def rope(name, x, pos, cos, sin, **attrs):
        write_case(name, [helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain=MS, **attrs)],
                   {"x": x, "pos": pos}, {"cos": cos, "sin": sin}, ["y"])
    rope("ms_rotary_embedding_3d", f32(r, b, s, n * h), pos, cos, sin, num_heads=n)
    rope("ms_rotary_embedding_3d_interleaved", f32(r, b, s, n * h), pos, cos, sin, num_heads=n, interleaved=1)
    rope("ms_rotary_embedding_4d", f32(r, b, n, s, h), pos, cos, sin)
    rope("ms_rotary_embedding_offset", f32(r, b, s, n * h), np.array([5], np.int64), cos, sin, num_heads=n)
    c2, s2 = caches(16, 2)
    rope("ms_rotary_embedding_partial", f32(r, b, s, n * h), pos, c2, s2, num_heads=n, rotary_embedding_dim=4)


# ---------------------------------------------------------------- attention

@case
def attention():
    r = rng("attention")
    b, s, d, n = 2, 4, 8, 2
    x = f32(r, b, s, d)
    w, bias = f32(r, d, 3 * d) * 0.5, f32(r, 3 * d) * 0.1
    def att(name, inputs, extra_inputs, outputs=("y",), node_outputs=None, **attrs):
        names = ["x", "w", "bias"] + list(extra_inputs)
        write_case(name, [helper.make_node("Attention", names, list(node_outputs or outputs), domain=MS,
                                           num_heads=n, **attrs)],
                   {"x": x, **inputs}, {"w": w, "bias": bias}, list(outputs))
    att("ms_attention", {}, [])
    att("ms_attention_unidirectional", {}, [], unidirectional=1)
    end = np.array([4, 2], np.int32)
    att("ms_attention_mask_end", {"m": end}, ["m"])
    att("ms_attention_mask_end_start", {"m": np.array([4, 3, 0, 1], np.int32)}, ["m"])
    raw = np.ones((b, s), np.int32)
    raw[1, 2:] = 0
    att("ms_attention_mask_2d", {"m": raw}, ["m"], mask_filter_value=-1e4)
    raw3 = np.tril(np.ones((s, s), np.int32))[None].repeat(b, 0)
    att("ms_attention_mask_3d", {"m": raw3}, ["m"])
    att("ms_attention_past_present", {"past": f32(r, 2, b, n, 3, d // n)}, ["", "past"], outputs=("y", "present"),
        unidirectional=1)
    att("ms_attention_bias_scale", {"ab": f32(r, 1, n, s, s)}, ["", "", "ab"], scale=0.3)
    w2 = f32(r, d, 8 + 8 + 4)
    write_case("ms_attention_qkv_sizes", [helper.make_node("Attention", ["x", "w"], ["y"], domain=MS, num_heads=n,
                                                           qkv_hidden_sizes=[8, 8, 4])],
               {"x": x}, {"w": w2}, ["y"])


@case
def multi_head_attention():
    r = rng("multi_head_attention")
    b, s_, l, n, h = 2, 3, 5, 2, 4
    d = n * h
    q, k, v = f32(r, b, s_, d), f32(r, b, l, d), f32(r, b, l, d)
    bias = f32(r, 3 * d) * 0.3

    def mha(name, inputs, names, outputs=("y",), **attrs):
        write_case(name, [helper.make_node("MultiHeadAttention", names, list(outputs), domain=MS,
                                           num_heads=n, **attrs)], inputs, {}, list(outputs))
    mha("ms_mha_separate_bias", {"q": q, "k": k, "v": v, "b": bias}, ["q", "k", "v", "b"])
    mha("ms_mha_value_width", {"q": q, "k": k, "v": f32(r, b, l, 3 * n)}, ["q", "k", "v"], scale=0.4)
    mha("ms_mha_mask_lengths", {"q": q, "k": k, "v": v, "m": np.array([5, 2], np.int32)},
        ["q", "k", "v", "", "m"])
    raw = np.ones((b, l), np.int32)
    raw[0, 1] = raw[1, 3:] = 0
    mha("ms_mha_mask_2d_filter", {"q": q, "k": k, "v": v, "m": raw}, ["q", "k", "v", "", "m"],
        mask_filter_value=-50.0)
    raw3 = (r.random((b, s_, l)) > 0.3).astype(np.int32)
    raw3[:, :, 0] = 1
    mha("ms_mha_mask_3d_attention_bias", {"q": q, "k": k, "v": v, "m": raw3, "ab": f32(r, b, 1, s_, l)},
        ["q", "k", "v", "", "m", "ab"])
    kn, vn = f32(r, b, s_, d), f32(r, b, s_, d)
    pk, pv = f32(r, b, n, 4, h), f32(r, b, n, 4, h)
    mha("ms_mha_past_present_causal", {"q": q, "k": kn, "v": vn, "b": bias, "pk": pk, "pv": pv},
        ["q", "k", "v", "b", "", "", "pk", "pv"], outputs=("y", "present_k", "present_v"), unidirectional=1)
    mha("ms_mha_self_causal", {"q": q, "k": kn, "v": vn}, ["q", "k", "v"], unidirectional=1)
    mha("ms_mha_present_no_past", {"q": q, "k": k, "v": v}, ["q", "k", "v"],
        outputs=("y", "present_k", "present_v"))
    kc, vc = f32(r, b, n, l, h), f32(r, b, n, l, h)
    mha("ms_mha_cross_cache_bias", {"q": q, "k": kc, "v": vc, "b": bias}, ["q", "k", "v", "b"])
    # Packed layouts: onnxruntime's CPU kernel refuses them; the expected outputs are its own
    # for the same values unpacked.
    sep = ort_outputs([helper.make_node("MultiHeadAttention", ["q", "k", "v", "b"], ["y"], domain=MS,
                                        num_heads=n)], {"q": q, "k": kn, "v": vn, "b": bias}, ["y"])
    heads = lambda x: x.reshape(b, s_, n, 1, h)
    packed = np.concatenate([heads(q), heads(kn), heads(vn)], 3)
    write_case("ms_mha_packed_qkv", [helper.make_node("MultiHeadAttention", ["qkv", "", "", "b"], ["y"],
                                                      domain=MS, num_heads=n)],
               {"qkv": packed, "b": bias}, {}, ["y"], expected=sep)
    sep = ort_outputs([helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["y"], domain=MS, num_heads=n)],
                      {"q": q, "k": k, "v": v}, ["y"])
    kv = np.concatenate([k.reshape(b, l, n, 1, h), v.reshape(b, l, n, 1, h)], 3)
    write_case("ms_mha_packed_kv", [helper.make_node("MultiHeadAttention", ["q", "kv"], ["y"], domain=MS,
                                                     num_heads=n)],
               {"q": q, "kv": kv}, {}, ["y"], expected=sep)


@case
def group_query_attention():
    r = rng("group_query_attention")
    b, s_, n, kvh, h = 2, 3, 4, 2, 16
    i32 = lambda *v: np.array(v, np.int32)
    total = lambda t: np.array(t, np.int32)
    q, k, v = f32(r, b, s_, n * h), f32(r, b, s_, kvh * h), f32(r, b, s_, kvh * h)
    q1, k1, v1 = f32(r, b, 1, n * h), f32(r, b, 1, kvh * h), f32(r, b, 1, kvh * h)
    pk, pv = f32(r, b, kvh, 6, h), f32(r, b, kvh, 6, h)
    half = h // 2
    ang = np.arange(16)[:, None] * (1.0 / 10000 ** (np.arange(half) / half))[None]
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    outs = ["y", "present_k", "present_v"]

    def gqa(name, inputs, names, inits=None, **attrs):
        write_case(name, [helper.make_node("GroupQueryAttention", names, outs, domain=MS, num_heads=n,
                                           kv_num_heads=kvh, **attrs)], inputs, inits or {}, outs)
    prompt = {"q": q, "k": k, "v": v, "sl": i32(2, 2), "t": total(3)}
    gqa("ms_gqa_prompt", prompt, ["q", "k", "v", "", "", "sl", "t"])
    gqa("ms_gqa_prompt_padded", {**prompt, "sl": i32(2, 1)}, ["q", "k", "v", "", "", "sl", "t"])
    gqa("ms_gqa_prompt_window", prompt, ["q", "k", "v", "", "", "sl", "t"], local_window_size=2)
    gqa("ms_gqa_prompt_rotary", prompt, ["q", "k", "v", "", "", "sl", "t", "cos", "sin"],
        {"cos": cos, "sin": sin}, do_rotary=1)
    gqa("ms_gqa_packed_qkv", {"qkv": np.concatenate([q, k, v], -1), "sl": i32(2, 2), "t": total(3)},
        ["qkv", "", "", "", "", "sl", "t"], scale=0.2)
    decode = {"q": q1, "k": k1, "v": v1, "pk": pk, "pv": pv, "sl": i32(6, 3), "t": total(7)}
    names = ["q", "k", "v", "pk", "pv", "sl", "t"]
    gqa("ms_gqa_decode", decode, names)
    gqa("ms_gqa_decode_buffer", {**decode, "t": total(5), "sl": i32(4, 2)}, names)
    # total_sequence_length as a constant: present's dims are known when planning.
    gqa("ms_gqa_decode_rotary_interleaved", {x: y for x, y in decode.items() if x != "t"},
        names + ["cos", "sin"], {"cos": cos, "sin": sin, "t": total(7)}, do_rotary=1,
        rotary_interleaved=1)
    gqa("ms_gqa_decode_window_softcap", decode, names, local_window_size=3, softcap=2.0)
    gqa("ms_gqa_decode_attention_bias", {**decode, "ab": f32(r, 1, n, 1, 7)},
        names + ["", "", "", "ab"], softcap=1.5)
    gqa("ms_gqa_decode_head_sink", {**decode, "sink": f32(r, n)}, names + ["", "", "", "", "sink"])
    gqa("ms_gqa_decode_smooth_softmax", decode, names, smooth_softmax=1)
    chunk = {"q": q[:1], "k": k[:1], "v": v[:1], "pk": pk[:1], "pv": pv[:1], "sl": i32(7), "t": total(9)}
    gqa("ms_gqa_chunk_after_past", chunk, names)


def main():
    only = sys.argv[1:]
    os.makedirs(OUT, exist_ok=True)
    for name, fn in CASES.items():
        if not only or any(o in name for o in only):
            fn()
    total = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(OUT) for f in fs)
    print(f"{len(os.listdir(OUT))} cases, {total / 1024:.0f} KiB in {OUT}")


if __name__ == "__main__":
    main()
