"""One session, many Python threads: each call runs on its own context with the GIL released,
and the results are those of serial calls."""

import threading

import numpy as np

import strata

THREADS = 8
CALLS = 6


def test_eight_threads_give_the_serial_results(builtin_models):
    sess = strata.InferenceSession(str(builtin_models / "resnet_like_batch.onnx"))
    name = sess.get_inputs()[0].name
    shape = [d if isinstance(d, int) else 1 for d in sess.get_inputs()[0].shape]
    feeds = [
        np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
        for seed in range(THREADS * CALLS)
    ]
    serial = [sess.run(None, {name: f})[0] for f in feeds]

    results = [None] * len(feeds)
    errors = []
    start = threading.Barrier(THREADS)

    def worker(t):
        try:
            start.wait()
            for k in range(CALLS):
                i = t * CALLS + k
                results[i] = sess.run(None, {name: feeds[i]})[0]
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    for i, (a, b) in enumerate(zip(results, serial)):
        np.testing.assert_array_equal(a, b, err_msg=f"call {i}")
    # Calls overlapped (the GIL was released while running), so the pool grew past one context.
    assert sess.context_count() > 1


def test_threads_with_different_batch_sizes(builtin_models):
    sess = strata.InferenceSession(str(builtin_models / "mlp.onnx"))
    name = sess.get_inputs()[0].name
    width = sess.get_inputs()[0].shape[1]
    feeds = [np.full((1 + i % 4, width), i / 10, np.float32) for i in range(32)]
    serial = [sess.run(None, {name: f})[0] for f in feeds]
    results = [None] * len(feeds)

    def worker(t):
        for i in range(t, len(feeds), THREADS):
            results[i] = sess.run(None, {name: feeds[i]})[0]

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for a, b in zip(results, serial):
        np.testing.assert_array_equal(a, b)
