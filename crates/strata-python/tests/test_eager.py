"""Eager tensors from Python: every op against numpy on random inputs, broadcasting, Python
scalars, dtype promotion, in-place ops and the version counter, inference mode, and errors."""

import math
import threading

import numpy as np
import pytest

import strata

RNG = np.random.default_rng(15)


def rand(*shape, dtype=np.float32, low=-2.0, high=2.0):
    return RNG.uniform(low, high, size=shape).astype(dtype)


def close(t, expected, rtol=1e-5, atol=1e-6):
    """`t` is a strata tensor equal (to tolerance) to `expected`, with its dtype and shape."""
    assert isinstance(t, strata.Tensor)
    expected = np.asarray(expected)
    got = t.numpy()
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    if expected.dtype.kind in "fc":
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(got, expected)


# ---- construction and conversion ----------------------------------------------------------


@pytest.mark.parametrize(
    "dtype", ["float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8", "bool"]
)
def test_numpy_round_trip_keeps_dtype_and_values(dtype):
    a = (RNG.uniform(-50, 50, size=(3, 4))).astype(dtype)
    t = strata.from_numpy(a)
    assert t.shape == (3, 4)
    assert t.dtype == np.dtype(dtype)
    assert t.numpy().dtype == np.dtype(dtype)
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_array_equal(np.asarray(t), a)
    np.testing.assert_array_equal(strata.tensor(a).numpy(), a)


def test_strided_arrays_are_copied_in_logical_order():
    a = rand(4, 6)[::2, ::-3]
    np.testing.assert_array_equal(strata.from_numpy(a).numpy(), a)


def test_python_data_takes_pytorch_default_dtypes():
    assert strata.tensor([1.0, 2.5]).dtype == np.float32
    assert strata.tensor([[1, 2], [3, 4]]).dtype == np.int64
    assert strata.tensor([True, False]).dtype == np.bool_
    assert strata.tensor(3.5).shape == ()
    assert strata.tensor([1, 2], dtype="float16").dtype == np.float16
    assert strata.tensor(np.arange(3), dtype=np.float64).dtype == np.float64
    assert strata.tensor([1, 2], dtype="f32").dtype == np.float32  # strata's own name
    t = strata.tensor([1.5, -2.0])
    assert strata.tensor(t, dtype="int32").tolist() == [1, -2]
    assert strata.Tensor([1, 2]).tolist() == [1, 2]


def test_factories():
    close(strata.zeros(2, 3), np.zeros((2, 3), np.float32))
    close(strata.zeros((2,), dtype="int8"), np.zeros(2, np.int8))
    close(strata.ones(2, 2, dtype=np.float64), np.ones((2, 2)))
    close(strata.full((2, 2), 7), np.full((2, 2), 7, np.int64))
    close(strata.full(3, 0.5), np.full(3, 0.5, np.float32))
    close(strata.arange(5), np.arange(5))
    close(strata.arange(0, 1, 0.25), np.arange(0, 1, 0.25, dtype=np.float32))


def test_properties_repr_and_python_values():
    t = strata.tensor([[1.0, 2.0, 3.0]])
    assert t.shape == (1, 3) and t.size() == (1, 3) and t.size(-1) == 3
    assert t.ndim == 2 and t.dim() == 2 and t.numel() == 3 and len(t) == 1
    assert repr(t) == "tensor([[1., 2., 3.]], dtype=float32)"
    assert t.tolist() == [[1.0, 2.0, 3.0]]
    assert strata.tensor([4]).item() == 4 and float(strata.tensor(2.5)) == 2.5
    assert int(strata.tensor([7])) == 7
    assert bool(strata.tensor([1])) and not bool(strata.tensor(0.0))
    with pytest.raises(ValueError):
        t.item()
    with pytest.raises(TypeError):
        len(strata.tensor(1.0))
    assert {t: 1}[t] == 1  # hashable by identity


def test_views():
    a = rand(2, 3, 4)
    t = strata.from_numpy(a)
    close(t.reshape(4, -1), a.reshape(4, -1))
    close(t.reshape((6, 4)), a.reshape(6, 4))
    close(t.view(-1), a.reshape(-1))
    close(t.transpose(0, 2), a.transpose(2, 1, 0))
    close(t.permute(1, 2, 0), a.transpose(1, 2, 0))
    close(t.unsqueeze(1), a[:, None])
    close(t.flatten(1), a.reshape(2, 12))
    close(strata.from_numpy(a[:1]).squeeze(0), a[0])
    close(strata.tensor([[1.0], [2.0]]).expand(2, 3), np.array([[1.0] * 3, [2.0] * 3], np.float32))
    p = t.transpose(0, 1)
    assert not p.is_contiguous()
    c = p.contiguous()
    assert c.is_contiguous() and c.contiguous() is c
    close(c, a.transpose(1, 0, 2))
    with pytest.raises(ValueError):
        t.reshape(5, -1)


@pytest.mark.parametrize(
    "key",
    [
        0,
        -1,
        (1, 2),
        (slice(None), 1),
        (slice(1, None), slice(None, None, 2)),
        (Ellipsis, slice(None, None, -1)),
        (None, 0),
        (0, Ellipsis, None),
        (slice(-2, None), slice(None, -1), slice(3, 0, -2)),
        (slice(5, 9),),
        np.int64(1),
    ],
)
def test_basic_indexing_matches_numpy(key):
    a = rand(3, 4, 5)
    close(strata.from_numpy(a)[key], a[key])


def test_indexing_gives_views_and_refuses_the_rest():
    t = strata.zeros(2, 3)
    row = t[1]
    row.add_(1.0)
    close(t, np.array([[0, 0, 0], [1, 1, 1]], np.float32))
    assert row.version == t.version
    for bad in [(0, 0, 0), 5, (slice(None), -4)]:
        with pytest.raises(IndexError):
            t[bad]
    for bad in [strata.tensor([0]), [0, 1], True, 1.5]:
        with pytest.raises(TypeError, match="index_select"):
            t[bad]
    with pytest.raises(ValueError):
        t[::0]


def test_item_assignment_matches_numpy():
    a = rand(3, 4)
    t = strata.from_numpy(a.copy())
    expected = a.copy()
    before = t.version
    writes = [
        (0, 1.5),
        ((1, slice(1, 3)), np.array([5.0, 6.0], np.float32)),
        ((slice(None), -1), "column 0"),
        ((slice(None, None, 2), Ellipsis), np.array([[2.0], [3.0]], np.float32)),
        ((2, 0), 7),
    ]
    for key, value in writes:
        if isinstance(value, str):  # a view of the tensor itself
            t[key] = t[:, 0]
            expected[key] = expected[:, 0]
        else:
            t[key] = strata.from_numpy(value) if isinstance(value, np.ndarray) else value
            expected[key] = value
        close(t, expected)
    assert t.version == before + len(writes)
    i = strata.tensor([1, 2, 3])
    i[0] = 2.7  # converted to the tensor's dtype, as in PyTorch
    close(i, np.array([2, 2, 3]))
    with strata.inference_mode():
        v = t.version
        t[0, 0] = 0.0
        assert t.version == v
    with pytest.raises(strata.ShapeError):
        t[0] = strata.zeros(5)
    with pytest.raises(TypeError):
        t[0] = "x"


def test_views_share_memory_and_version_clone_does_not():
    t = strata.zeros(2, 3)
    v = t.reshape(6)
    c = t.clone()
    v.add_(1.0)
    close(t, np.ones((2, 3), np.float32))
    close(c, np.zeros((2, 3), np.float32))
    assert t.version == v.version
    assert c.version != t.version or c.version == 0


# ---- arithmetic ---------------------------------------------------------------------------

SHAPES = [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((5,), ())]


@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize(
    "name, ref",
    [
        ("add", np.add),
        ("sub", np.subtract),
        ("mul", np.multiply),
        ("div", np.divide),
    ],
)
def test_arithmetic_broadcasts_like_numpy(name, ref, shapes):
    a, b = rand(*shapes[0]), rand(*shapes[1], low=0.5, high=2.0)
    ta, tb = strata.from_numpy(a), strata.from_numpy(b)
    close(getattr(ta, name)(tb), ref(a, b))


def test_operators_match_numpy():
    a, b = rand(3, 4), rand(4, low=0.5, high=2.0)
    ta, tb = strata.from_numpy(a), strata.from_numpy(b)
    close(ta + tb, a + b)
    close(ta - tb, a - b)
    close(ta * tb, a * b)
    close(ta / tb, a / b)
    close(-ta, -a)
    close(abs(ta), np.abs(a))
    close(tb**tb, b**b, rtol=1e-5)
    close(tb.pow(tb), b**b, rtol=1e-5)


def test_python_scalars_both_ways_round():
    a = rand(3, 4, low=0.5, high=2.0)
    t = strata.from_numpy(a)
    close(t + 2, a + 2)
    close(2 + t, 2 + a)
    close(t - 1.5, a - np.float32(1.5))
    close(1.5 - t, np.float32(1.5) - a)
    close(t * 3, a * 3)
    close(3 * t, 3 * a)
    close(t / 4, a / 4)
    close(4 / t, np.float32(4) / a)
    close(t**2, a**2)
    close(2**t, np.float32(2) ** a, rtol=1e-5)
    close(t + np.float32(0.5), a + np.float32(0.5))
    close(t * np.int64(2), a * 2)
    close(t.add(1), a + 1)


def test_scalar_dtype_rules_follow_pytorch():
    i = strata.tensor([1, 2, 3])  # int64
    assert (i + 2).dtype == np.int64
    assert (i + 2.5).dtype == np.float32
    assert (i * 2.0).dtype == np.float32  # a Python float makes float, even when integral
    assert (i / 2).dtype == np.float32  # true division
    close(i / 2, np.array([0.5, 1.0, 1.5], np.float32))
    assert (strata.tensor([True, False]) + 1).dtype == np.int64
    h = strata.tensor([1.0, 2.0], dtype="float16")
    assert (h + 1.5).dtype == np.float16
    i8 = strata.tensor([1, 2], dtype="int8")
    assert (i8 + 1).dtype == np.int8


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ("int32", "float32", "float32"),
        ("uint8", "int8", "int16"),
        ("int64", "int32", "int64"),
        ("float32", "float64", "float64"),
        ("float16", "int64", "float16"),
        ("bool", "uint8", "uint8"),
    ],
)
def test_tensor_dtype_promotion(a, b, expected):
    xa, ya = np.array([1, 2, 3]).astype(a), np.array([1, 0, 1]).astype(b)
    x, y = strata.tensor(xa), strata.tensor(ya)
    assert (x + y).dtype == np.dtype(expected)
    assert (y * x).dtype == np.dtype(expected)
    close(x + y, xa.astype(expected) + ya.astype(expected))


def test_integer_arithmetic_is_exact():
    a = RNG.integers(-1000, 1000, size=(4, 5)).astype(np.int32)
    b = RNG.integers(1, 50, size=(5,)).astype(np.int32)
    ta, tb = strata.from_numpy(a), strata.from_numpy(b)
    close(ta + tb, a + b)
    close(ta - tb, a - b)
    close(ta * tb, a * b)


@pytest.mark.parametrize("dtype, rtol", [("float64", 1e-12), ("float16", 2e-3)])
def test_other_float_dtypes_keep_their_dtype(dtype, rtol):
    a = rand(3, 4, low=0.5, high=2.0).astype(dtype)
    b = rand(4, 2, low=0.5, high=2.0).astype(dtype)
    ta, tb = strata.from_numpy(a), strata.from_numpy(b)
    x = a.astype(np.float64)

    def ref(values):
        return np.asarray(values).astype(dtype)

    close(ta + ta, ref(x + x), rtol=rtol)
    close(ta * 3, ref(x * 3), rtol=rtol)
    close(ta.exp(), ref(np.exp(x)), rtol=rtol)
    close(ta.sum(dim=1), ref(x.sum(axis=1)), rtol=rtol)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    close(ta.softmax(-1), ref(e / e.sum(axis=-1, keepdims=True)), rtol=rtol, atol=1e-3 if dtype == "float16" else 1e-12)
    close(ta @ tb, ref(x @ b.astype(np.float64)), rtol=rtol * 4)
    close(ta.clamp(0.75, 1.5), ref(np.clip(x, 0.75, 1.5)), rtol=rtol)


# ---- comparisons --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, op, ref",
    [
        ("eq", "__eq__", np.equal),
        ("ne", "__ne__", np.not_equal),
        ("lt", "__lt__", np.less),
        ("le", "__le__", np.less_equal),
        ("gt", "__gt__", np.greater),
        ("ge", "__ge__", np.greater_equal),
    ],
)
def test_comparisons_match_numpy(name, op, ref):
    a = RNG.integers(0, 3, size=(3, 4)).astype(np.float32)
    b = RNG.integers(0, 3, size=(4,)).astype(np.float32)
    ta, tb = strata.from_numpy(a), strata.from_numpy(b)
    close(getattr(ta, name)(tb), ref(a, b))
    close(getattr(ta, op)(tb), ref(a, b))
    close(getattr(ta, name)(1), ref(a, 1))
    close(getattr(ta, op)(1.0), ref(a, 1.0))


def test_comparison_operators_and_mixed_dtypes():
    i = strata.tensor([1, 2, 3])
    close(i > 1.5, np.array([False, True, True]))
    close(1.5 < i, np.array([False, True, True]))
    close(i == strata.tensor([1.0, 0.0, 3.0]), np.array([True, False, True]))
    assert (i == None) is False  # noqa: E711 - not an operand: identity comparison
    assert (i != "x") is True


# ---- unary math and activations ------------------------------------------------------------


def _erf(x):
    return np.vectorize(math.erf)(x.astype(np.float64)).astype(x.dtype)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


UNARY = [
    ("relu", lambda x: np.maximum(x, 0), None),
    ("sigmoid", _sigmoid, None),
    ("tanh", np.tanh, None),
    ("neg", np.negative, None),
    ("abs", np.abs, None),
    ("exp", np.exp, None),
    ("log", np.log, (0.1, 3.0)),
    ("sqrt", np.sqrt, (0.0, 3.0)),
    ("reciprocal", np.reciprocal, (0.5, 3.0)),
    ("floor", np.floor, None),
    ("ceil", np.ceil, None),
    ("round", np.round, None),
    ("sign", np.sign, None),
    ("erf", _erf, None),
    ("sin", np.sin, None),
    ("cos", np.cos, None),
    ("tan", np.tan, (-1.2, 1.2)),
    ("asin", np.arcsin, (-0.99, 0.99)),
    ("acos", np.arccos, (-0.99, 0.99)),
    ("atan", np.arctan, None),
    ("sinh", np.sinh, None),
    ("cosh", np.cosh, None),
    ("asinh", np.arcsinh, None),
    ("acosh", np.arccosh, (1.01, 4.0)),
    ("atanh", np.arctanh, (-0.95, 0.95)),
    ("softplus", lambda x: np.log1p(np.exp(x)), None),
    ("softsign", lambda x: x / (1 + np.abs(x)), None),
    ("silu", lambda x: x * _sigmoid(x), None),
    ("selu", lambda x: 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * np.expm1(x)), None),
    ("hardsigmoid", lambda x: np.clip(x / 6 + 0.5, 0, 1), None),
    ("hardswish", lambda x: x * np.clip(x / 6 + 0.5, 0, 1), None),
    ("mish", lambda x: x * np.tanh(np.log1p(np.exp(x))), None),
]


@pytest.mark.parametrize("name, ref, domain", UNARY, ids=[u[0] for u in UNARY])
def test_unary_matches_numpy(name, ref, domain):
    low, high = domain or (-3.0, 3.0)
    a = rand(4, 5, low=low, high=high)
    expected = ref(a.astype(np.float64)).astype(np.float32)
    close(getattr(strata.from_numpy(a), name)(), expected, rtol=2e-5, atol=2e-6)


def test_parameterized_activations():
    a = rand(3, 7, low=-4, high=4)
    t = strata.from_numpy(a)
    x = a.astype(np.float64)
    close(t.gelu(), (0.5 * x * (1 + _erf(x / math.sqrt(2)))).astype(np.float32), rtol=1e-5, atol=1e-5)
    tanh_gelu = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    close(t.gelu(approximate="tanh"), tanh_gelu.astype(np.float32), rtol=1e-5, atol=1e-5)
    close(t.leaky_relu(0.2), np.where(a > 0, a, np.float32(0.2) * a))
    close(t.leaky_relu(), np.where(a > 0, a, np.float32(0.01) * a))
    close(t.elu(0.5), np.where(x > 0, x, 0.5 * np.expm1(x)).astype(np.float32), atol=1e-6)
    with pytest.raises(ValueError, match="gelu"):
        t.gelu(approximate="fast")


def test_float_functions_of_integers_compute_in_float32():
    i = strata.tensor([0, 1, 2], dtype="int32")
    close(i.exp(), np.exp(np.array([0, 1, 2], np.float32)))
    close(i.neg(), np.array([0, -1, -2], np.int32))
    close(i.abs(), np.array([0, 1, 2], np.int32))


def test_logical_not():
    b = np.array([True, False, True])
    close(strata.from_numpy(b).logical_not(), ~b)


# ---- matmul, convolution, pooling, softmax -------------------------------------------------


@pytest.mark.parametrize(
    "sa, sb",
    [((3, 4), (4, 5)), ((2, 3, 4), (4, 6)), ((2, 1, 3, 4), (5, 4, 2)), ((4,), (4, 3)), ((3, 4), (4,))],
)
def test_matmul_matches_numpy(sa, sb):
    a, b = rand(*sa), rand(*sb)
    ta, tb = strata.from_numpy(a), strata.from_numpy(b)
    close(ta.matmul(tb), a @ b, rtol=1e-5, atol=1e-5)
    close(ta @ tb, a @ b, rtol=1e-5, atol=1e-5)


def test_matmul_promotes_integers_to_float():
    a = RNG.integers(-5, 5, size=(3, 4)).astype(np.int32)
    b = rand(4, 2)
    close(strata.from_numpy(a) @ strata.from_numpy(b), a.astype(np.float32) @ b, rtol=1e-5, atol=1e-5)


def conv2d_ref(x, w, b, stride, padding, dilation, groups):
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    oh = (x.shape[2] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (x.shape[3] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, m, oh, ow))
    per_group = m // groups
    for o in range(m):
        g = o // per_group
        for i in range(oh):
            for j in range(ow):
                patch = x[
                    :,
                    g * cg : (g + 1) * cg,
                    i * stride[0] : i * stride[0] + dilation[0] * (kh - 1) + 1 : dilation[0],
                    j * stride[1] : j * stride[1] + dilation[1] * (kw - 1) + 1 : dilation[1],
                ]
                out[:, o, i, j] = (patch * w[o]).sum(axis=(1, 2, 3))
    if b is not None:
        out += b[None, :, None, None]
    return out.astype(np.float32)


@pytest.mark.parametrize(
    "stride, padding, dilation, groups, bias",
    [(1, 0, 1, 1, False), (2, 1, 1, 1, True), ((1, 2), (2, 0), (2, 1), 1, True), (1, 1, 1, 2, True), (1, 1, 1, 4, False)],
)
def test_conv2d_matches_reference(stride, padding, dilation, groups, bias):
    pair = lambda v: (v, v) if isinstance(v, int) else v  # noqa: E731
    x = rand(2, 4, 7, 6)
    w = rand(4, 4 // groups, 3, 3)
    b = rand(4) if bias else None
    expected = conv2d_ref(x, w, b, pair(stride), pair(padding), pair(dilation), groups)
    tb = strata.from_numpy(b) if bias else None
    got = strata.from_numpy(x).conv2d(
        strata.from_numpy(w), tb, stride=stride, padding=padding, dilation=dilation, groups=groups
    )
    close(got, expected, rtol=1e-4, atol=1e-4)
    got = strata.conv2d(
        strata.from_numpy(x), strata.from_numpy(w), bias=tb, stride=stride, padding=padding,
        dilation=dilation, groups=groups,
    )
    close(got, expected, rtol=1e-4, atol=1e-4)


def pool_ref(x, k, s, p, reduce, count_include_pad=True):
    n, c, h, w = x.shape
    fill = -np.inf if reduce == "max" else 0.0
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (p[0],) * 2, (p[1],) * 2), constant_values=fill)
    ones = np.pad(np.ones((h, w)), ((p[0],) * 2, (p[1],) * 2))
    oh = (h + 2 * p[0] - k[0]) // s[0] + 1
    ow = (w + 2 * p[1] - k[1]) // s[1] + 1
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            win = padded[:, :, i * s[0] : i * s[0] + k[0], j * s[1] : j * s[1] + k[1]]
            if reduce == "max":
                out[:, :, i, j] = win.max(axis=(2, 3))
            else:
                count = k[0] * k[1] if count_include_pad else ones[i * s[0] : i * s[0] + k[0], j * s[1] : j * s[1] + k[1]].sum()
                out[:, :, i, j] = win.sum(axis=(2, 3)) / count
    return out.astype(np.float32)


@pytest.mark.parametrize("k, s, p", [((2, 2), (2, 2), (0, 0)), ((3, 3), (1, 1), (1, 1)), ((3, 2), (2, 1), (1, 0))])
def test_pooling_matches_reference(k, s, p):
    x = rand(2, 3, 7, 6)
    t = strata.from_numpy(x)
    close(t.max_pool2d(k, stride=s, padding=p), pool_ref(x, k, s, p, "max"))
    close(t.avg_pool2d(k, stride=s, padding=p), pool_ref(x, k, s, p, "avg"), rtol=1e-5)
    close(
        t.avg_pool2d(k, stride=s, padding=p, count_include_pad=False),
        pool_ref(x, k, s, p, "avg", count_include_pad=False),
        rtol=1e-5,
    )


def test_pooling_defaults_and_global():
    x = rand(1, 2, 4, 4)
    t = strata.from_numpy(x)
    close(t.max_pool2d(2), pool_ref(x, (2, 2), (2, 2), (0, 0), "max"))
    close(t.global_max_pool2d(), x.max(axis=(2, 3), keepdims=True))
    close(t.global_avg_pool2d(), x.mean(axis=(2, 3), keepdims=True), rtol=1e-5)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_and_log_softmax(dim):
    a = rand(3, 4, 5, low=-5, high=5)
    x = a.astype(np.float64)
    e = np.exp(x - x.max(axis=dim, keepdims=True))
    sm = e / e.sum(axis=dim, keepdims=True)
    t = strata.from_numpy(a)
    close(t.softmax(dim), sm.astype(np.float32), rtol=1e-5, atol=1e-6)
    close(t.softmax(dim=dim), sm.astype(np.float32), rtol=1e-5, atol=1e-6)
    close(t.log_softmax(dim), np.log(sm).astype(np.float32), rtol=1e-5, atol=1e-5)


# ---- reductions and selection --------------------------------------------------------------


@pytest.mark.parametrize("dim", [None, 0, 1, -1, (0, 2), [1, 2]])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize(
    "name, ref", [("sum", np.sum), ("mean", np.mean), ("amax", np.max), ("amin", np.min), ("prod", np.prod)]
)
def test_reductions_match_numpy(name, ref, dim, keepdim):
    a = rand(3, 4, 5, low=0.5, high=1.5)
    axis = tuple(dim) if isinstance(dim, list) else dim
    expected = ref(a.astype(np.float64), axis=axis, keepdims=keepdim).astype(np.float32)
    close(getattr(strata.from_numpy(a), name)(dim=dim, keepdim=keepdim), expected, rtol=1e-5)


@pytest.mark.parametrize("dim", [None, 0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_arg_reductions_and_max_min(dim, keepdim):
    a = rand(4, 6)  # random floats: no ties
    t = strata.from_numpy(a)
    for name, arg, ref in [("max", "argmax", np.max), ("min", "argmin", np.min)]:
        expected = getattr(np, arg)(a, axis=dim, keepdims=keepdim if dim is not None else False)
        if dim is None and keepdim:
            expected = np.asarray(expected).reshape(1, 1)
        close(getattr(t, arg)(dim=dim, keepdim=keepdim), np.asarray(expected, np.int64))
        if dim is None:
            close(getattr(t, name)(), np.asarray(ref(a)))
        else:
            values, indices = getattr(t, name)(dim, keepdim=keepdim)
            close(values, ref(a, axis=dim, keepdims=keepdim))
            close(indices, getattr(np, arg)(a, axis=dim, keepdims=keepdim).astype(np.int64))


def test_integer_sum():
    a = RNG.integers(-100, 100, size=(3, 4)).astype(np.int64)
    close(strata.from_numpy(a).sum(dim=1), a.sum(axis=1))


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_matches_sorting(dim, largest):
    a = rand(5, 7)
    k = 3
    values, indices = strata.from_numpy(a).topk(k, dim=dim, largest=largest)
    order = np.argsort(-a if largest else a, axis=dim, kind="stable")
    expected_indices = np.take(order, np.arange(k), axis=dim)
    close(indices, expected_indices.astype(np.int64))
    close(values, np.take_along_axis(a, expected_indices, axis=dim))


def test_topk_unsorted_keeps_input_order():
    a = np.array([[0.1, 0.9, 0.3, 0.7, 0.5]], np.float32)
    values, indices = strata.from_numpy(a).topk(3, sorted=False)
    close(indices, np.array([[1, 3, 4]]))
    close(values, np.array([[0.9, 0.7, 0.5]], np.float32))


def test_index_select_and_gather():
    a = rand(4, 5)
    t = strata.from_numpy(a)
    idx = np.array([3, 0, 3], np.int64)
    close(t.index_select(0, strata.from_numpy(idx)), a[idx])
    close(t.index_select(-1, strata.from_numpy(idx.astype(np.int32))), a[:, idx])
    g = RNG.integers(0, 4, size=(2, 5)).astype(np.int64)
    close(t.gather(0, strata.from_numpy(g)), np.take_along_axis(a, g, axis=0))
    g1 = RNG.integers(0, 5, size=(4, 3)).astype(np.int64)
    close(t.gather(1, strata.from_numpy(g1)), np.take_along_axis(a, g1, axis=1))


def test_where_with_tensors_and_numbers():
    c = RNG.integers(0, 2, size=(3, 4)).astype(bool)
    a, b = rand(3, 4), rand(4)
    tc, ta, tb = strata.from_numpy(c), strata.from_numpy(a), strata.from_numpy(b)
    close(strata.where(tc, ta, tb), np.where(c, a, b))
    close(strata.where(tc, ta, 0.0), np.where(c, a, np.float32(0)))
    close(strata.where(tc, 1, ta), np.where(c, np.float32(1), a))
    close(strata.where(tc, 1, 0), np.where(c, 1, 0).astype(np.int64))
    close(strata.where(tc, strata.tensor([1, 2, 3, 4]), ta), np.where(c, np.arange(1, 5).astype(np.float32), a))


def test_cat_and_stack():
    a, b = rand(2, 3), rand(4, 3)
    close(strata.cat([strata.from_numpy(a), strata.from_numpy(b)]), np.concatenate([a, b]))
    close(strata.cat((strata.from_numpy(a), strata.from_numpy(a)), dim=1), np.concatenate([a, a], axis=1))
    close(strata.stack([strata.from_numpy(a), strata.from_numpy(a)], dim=-1), np.stack([a, a], axis=-1))
    close(strata.stack([strata.from_numpy(a)] * 3), np.stack([a] * 3))
    mixed = strata.cat([strata.tensor([1, 2]), strata.tensor([0.5])])
    close(mixed, np.array([1.0, 2.0, 0.5], np.float32))


# ---- conversions and bounds ---------------------------------------------------------------


def test_to_dtype():
    a = np.array([-1.7, 0.2, 2.5, 300.0], np.float32)
    t = strata.from_numpy(a)
    close(t.to("float64"), a.astype(np.float64))
    close(t.to(np.float16), a.astype(np.float16))
    close(t.to("int32"), a.astype(np.int32))
    assert t.to(np.float32) is t  # same dtype: itself, as in PyTorch
    assert t.to(np.float32, copy=True) is not t
    close(t.double(), a.astype(np.float64))
    close(t.long(), a.astype(np.int64))
    close(t.int(), a.astype(np.int32))
    close(t.half(), a.astype(np.float16))
    close(t.bool(), a.astype(bool))
    close(strata.tensor([1, 0]).float(), np.array([1.0, 0.0], np.float32))
    assert t.bfloat16().dtype.name == "bfloat16"
    assert t.device == "cpu" and t.to("cpu") is t and t.cpu() is t


def test_ml_dtypes_by_name():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = np.array([0.5, -1.0, 448.0], np.float32)
    t = strata.from_numpy(a)
    for name in ["float8_e4m3fn", "float8_e5m2", "bfloat16"]:
        for spec in [name, getattr(ml_dtypes, name)]:
            converted = t.to(spec)
            assert converted.dtype == np.dtype(getattr(ml_dtypes, name))
            np.testing.assert_array_equal(converted.numpy(), a.astype(getattr(ml_dtypes, name)))
            close(converted.float(), a.astype(getattr(ml_dtypes, name)).astype(np.float32))


def test_clamp():
    a = rand(3, 4, low=-3, high=3)
    t = strata.from_numpy(a)
    close(t.clamp(-1, 1), np.clip(a, -1, 1))
    close(t.clamp(min=0.5), np.maximum(a, np.float32(0.5)))
    close(t.clip(max=0.0), np.minimum(a, 0))
    close(strata.tensor([-5, 0, 9]).clamp(-2, 3), np.array([-2, 0, 3]))


# ---- in-place ops, version counter, inference mode -----------------------------------------


def test_in_place_ops_return_self_and_bump_the_version_once():
    a, b = rand(3, 4), rand(4, low=0.5, high=2.0)
    t, tb = strata.from_numpy(a), strata.from_numpy(b)
    expected = a.copy()
    steps = [
        (lambda: t.add_(tb), lambda e: e + b),
        (lambda: t.sub_(1.5), lambda e: e - np.float32(1.5)),
        (lambda: t.mul_(tb), lambda e: e * b),
        (lambda: t.div_(2), lambda e: e / 2),
        (lambda: t.clamp_(-0.5, 0.5), lambda e: np.clip(e, -0.5, 0.5)),
        (lambda: t.relu_(), lambda e: np.maximum(e, 0)),
    ]
    for step, ref in steps:
        before = t.version
        assert step() is t
        assert t.version == before + 1
        expected = ref(expected).astype(np.float32)
        close(t, expected)


def test_augmented_assignment_is_in_place():
    t = strata.tensor([1.0, 2.0])
    same = t
    before = t.version
    t += 1
    t *= strata.tensor([2.0, 3.0])
    t -= 0.5
    t /= 2
    assert t is same
    assert t.version == before + 4
    close(t, np.array([1.75, 4.25], np.float32))


def test_inference_mode_skips_the_version_bump():
    t = strata.tensor([1.0, -1.0])
    assert not strata.is_inference_mode_enabled()
    with strata.inference_mode():
        assert strata.is_inference_mode_enabled()
        before = t.version
        t.add_(1.0).relu_().clamp_(max=1.5).mul_(2)
        assert t.version == before
        with strata.inference_mode():
            t.sub_(1)
        assert strata.is_inference_mode_enabled()
        assert t.version == before
    assert not strata.is_inference_mode_enabled()
    close(t, np.array([2.0, -1.0], np.float32))
    t.add_(1)
    assert t.version == before + 1


def test_inference_mode_as_a_decorator_and_per_thread():
    @strata.inference_mode()
    def bump(t):
        return t.add_(1)

    t = strata.tensor([0.0])
    before = t.version
    bump(t)
    assert t.version == before
    seen = []
    with strata.inference_mode():
        th = threading.Thread(target=lambda: seen.append(strata.is_inference_mode_enabled()))
        th.start()
        th.join()
    assert seen == [False]


def test_in_place_refuses_what_would_change_dims_or_dtype():
    t = strata.tensor([1.0, 2.0])
    with pytest.raises(strata.ShapeError, match="add_"):
        t.add_(strata.zeros(3, 2))
    i = strata.tensor([1, 2])
    with pytest.raises(strata.DTypeError, match="add_"):
        i.add_(0.5)
    close(i, np.array([1, 2]))


# ---- errors -------------------------------------------------------------------------------


def test_shape_mismatch_is_a_value_error_naming_the_op():
    with pytest.raises(strata.ShapeError, match="add") as err:
        strata.zeros(2, 3) + strata.zeros(4)
    assert isinstance(err.value, ValueError)
    assert isinstance(err.value, strata.StrataError)
    with pytest.raises(ValueError, match="(?i)matmul"):
        strata.zeros(2, 3) @ strata.zeros(4, 2)
    with pytest.raises(ValueError, match="cat"):
        strata.cat([])
    with pytest.raises(ValueError, match="conv2d"):
        strata.zeros(3, 3).conv2d(strata.zeros(1, 1, 1, 1))
    with pytest.raises(ValueError, match="groups"):
        strata.zeros(1, 2, 3, 3).conv2d(strata.zeros(1, 2, 1, 1), groups=0)


def test_bad_dtypes_are_type_errors_naming_the_op():
    with pytest.raises(strata.DTypeError, match="add") as err:
        strata.tensor([1], dtype="uint64") + strata.tensor([1], dtype="int8")
    assert isinstance(err.value, TypeError)
    with pytest.raises(TypeError, match="where"):
        strata.where(strata.tensor([1.0]), strata.tensor([1.0]), strata.tensor([2.0]))


def test_a_missing_kernel_is_not_implemented_naming_the_op():
    s = strata.tensor(np.array(["a", "b"], dtype=object))
    with pytest.raises(strata.NoKernelError, match="(?i)add") as err:
        s + s
    assert isinstance(err.value, NotImplementedError)
    with pytest.raises(strata.NoKernelError, match="(?i)not"):
        strata.tensor([1.0]).logical_not()
    with pytest.raises(strata.NoKernelError, match="MatMul"):
        strata.tensor([[1]]) @ strata.tensor([[2]])  # strata's MatMul has no int64 kernel


def test_non_tensor_operands():
    t = strata.tensor([1.0])
    with pytest.raises(TypeError, match="add"):
        t.add("x")
    with pytest.raises(TypeError):
        t + "x"
    with pytest.raises(TypeError):
        t @ 2
    with pytest.raises(TypeError):
        strata.cat([t, np.zeros(1)])
    with pytest.raises(strata.InvalidArgument):
        t.to("no_such_dtype")


def test_bad_dims_raise_not_crash():
    t = strata.zeros(2, 3)
    for call in [
        lambda: t.softmax(5),
        lambda: t.sum(dim=7),
        lambda: t.argmax(dim=-4),
        lambda: t.topk(9),
        lambda: t.index_select(0, strata.tensor([5])),
        lambda: t.max_pool2d(2),
        lambda: t.transpose(0, 9),
        lambda: t.size(4),
    ]:
        with pytest.raises(strata.StrataError):
            call()


# ---- threads ------------------------------------------------------------------------------


def test_ops_run_concurrently_from_threads():
    a = rand(128, 128)
    ta = strata.from_numpy(a)
    expected = a @ a
    results = [None] * 4

    def work(i):
        results[i] = (ta @ ta).numpy()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for r in results:
        np.testing.assert_allclose(r, expected, rtol=1e-4, atol=1e-4)


def test_matmul_releases_the_gil():
    # Another Python thread runs while this one is inside a long matmul. Holding the GIL, the
    # call would let it run only around its start (a switch interval, 5 ms), not in its later part.
    import time

    a = strata.from_numpy(rand(1536, 1536))
    a @ a  # warm up
    stop = threading.Event()
    stamps = []

    def spin():
        while not stop.is_set():
            stamps.append(time.perf_counter())

    th = threading.Thread(target=spin)
    th.start()
    time.sleep(0.01)
    start = time.perf_counter()
    a @ a
    end = time.perf_counter()
    stop.set()
    th.join()
    if end - start < 0.02:
        pytest.skip(f"the matmul took {end - start:.4f} s: too short to tell")
    late = [t for t in stamps if start + 0.4 * (end - start) < t < end]
    assert late, (end - start, len(stamps))
