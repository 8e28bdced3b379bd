#!/usr/bin/env python3
"""Per-call latency from Python, strata against onnxruntime, same feeds, same threads.

    python3 ../shared/bench/make_models.py ~/.cache/strata-bench --only mlp
    python3 crates/strata-python/bench_overhead.py ~/.cache/strata-bench/mlp.onnx [--threads 1]

Prints median and p10 µs of single `run` calls for the model and for a one-node Identity model (whose
latency is all overhead: feed conversion, dispatch, output copy), and strata's own time inside
`execute` for the model (from `profile`), so that call minus execute is strata's overhead.
"""

import argparse
import statistics
import time

import numpy as np
import onnxruntime
from onnx import TensorProto, helper

import strata


def identity_model(shape):
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "identity",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def time_calls(sess, feed, calls, rounds):
    """Median and p10 of single-call µs over `rounds * calls` calls (each call timed alone, so
    that a loaded machine's preemptions land in the tail, not in the median)."""
    for _ in range(200):
        sess.run(None, feed)
    times = []
    clock = time.perf_counter_ns
    for _ in range(rounds * calls):
        start = clock()
        sess.run(None, feed)
        times.append((clock() - start) / 1e3)
    times.sort()
    return statistics.median(times), times[len(times) // 10]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()

    def sessions(model):
        so = strata.SessionOptions()
        so.intra_op_num_threads = args.threads
        oo = onnxruntime.SessionOptions()
        oo.intra_op_num_threads = args.threads
        oo.inter_op_num_threads = 1
        return (
            strata.InferenceSession(model, so),
            onnxruntime.InferenceSession(model, oo, providers=["CPUExecutionProvider"]),
        )

    rows = []
    ours, theirs = sessions(args.model)
    arg = theirs.get_inputs()[0]
    shape = [d if isinstance(d, int) else 1 for d in arg.shape]
    feed = {arg.name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    np.testing.assert_allclose(ours.run(None, feed)[0], theirs.run(None, feed)[0], rtol=1e-3, atol=1e-5)
    rows.append((f"{args.model} {shape}", time_calls(ours, feed, args.calls, args.rounds),
                 time_calls(theirs, feed, args.calls, args.rounds)))
    execute_ms = ours.profile(feed, runs=2000, warmup=200)["median_ms"]

    tiny = identity_model([1, 4])
    ours_id, theirs_id = sessions(tiny)
    feed_id = {"x": np.ones((1, 4), np.float32)}
    rows.append(("Identity [1, 4]", time_calls(ours_id, feed_id, args.calls, args.rounds),
                 time_calls(theirs_id, feed_id, args.calls, args.rounds)))

    print(f"threads {args.threads}; µs per run() call, median (p10) of {args.rounds * args.calls} calls timed one by one")
    print(f"{'model':<48} {'strata':>16} {'onnxruntime':>16} {'ratio':>6}")
    for name, (sm, sp), (om, op) in rows:
        print(f"{name:<48} {sm:8.1f} ({sp:5.1f}) {om:8.1f} ({op:5.1f}) {sm / om:6.2f}")
    print(f"strata execute() alone on the model: {execute_ms * 1e3:.1f} µs median "
          f"(call overhead ≈ {rows[0][1][0] - execute_ms * 1e3:.1f} µs)")


if __name__ == "__main__":
    main()
