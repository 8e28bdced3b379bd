#!/usr/bin/env python3
"""Per-op time of eager strata tensors from Python against numpy on the same data, in one run.

    python3 crates/strata-python/bench_eager.py [--number 20000] [--repeat 7]

Each row is the best of `repeat` timeit rounds of `number` calls, in ns per call, and strata's
time over numpy's. On 1-element operands the time is all per-call overhead (argument parsing,
dispatch, allocating the output, making the Python object); on larger ones the kernels show.
"""

import argparse
import timeit

import numpy as np

import strata


def cases():
    one_a, one_b = np.array([1.5], np.float32), np.array([2.5], np.float32)
    m = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    v = np.random.default_rng(1).standard_normal((4, 1000)).astype(np.float32)
    zero = np.zeros(1, np.float32)  # added in place, so that repeats do not overflow
    s = {"a": strata.from_numpy(one_a), "b": strata.from_numpy(one_b), "z": strata.from_numpy(zero),
         "c": strata.from_numpy(one_a), "m": strata.from_numpy(m), "v": strata.from_numpy(v)}
    n = {"a": one_a, "b": one_b, "z": zero, "c": one_a.copy(), "m": m, "v": v}

    def np_softmax(x):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    return [
        ("a + b, 1 element", lambda: s["a"] + s["b"], lambda: n["a"] + n["b"]),
        ("a + 1.0, 1 element", lambda: s["a"] + 1.0, lambda: n["a"] + 1.0),
        ("c.add_(z), 1 element", lambda: s["c"].add_(s["z"]), lambda: np.add(n["c"], n["z"], out=n["c"])),
        ("a.exp(), 1 element", lambda: s["a"].exp(), lambda: np.exp(n["a"])),
        ("m @ m, 64x64", lambda: s["m"] @ s["m"], lambda: n["m"] @ n["m"]),
        ("v.softmax(-1), 4x1000", lambda: s["v"].softmax(-1), lambda: np_softmax(n["v"])),
        ("v.sum(dim=-1), 4x1000", lambda: s["v"].sum(dim=-1), lambda: n["v"].sum(axis=-1)),
    ]


def best_ns(fn, number, repeat):
    fn()
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    print(f"{'op':26s} {'strata ns':>10s} {'numpy ns':>10s} {'ratio':>7s}")
    for name, ours, theirs in cases():
        number = args.number if "1 element" in name else max(args.number // 20, 10)
        s = best_ns(ours, number, args.repeat)
        n = best_ns(theirs, number, args.repeat)
        print(f"{name:26s} {s:10.0f} {n:10.0f} {s / n:7.2f}")


if __name__ == "__main__":
    main()
