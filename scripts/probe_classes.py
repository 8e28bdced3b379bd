#!/usr/bin/env python3
"""Re-runs the classes of issue 14's fuzz probe against a built `strata` binary, beyond the
hostile models of scripts/hostile_models.py: symlinked external data (a linked file and a linked
folder), opsets strata does not know, endless loops under --timeout, and the command line as a
script sees it (--json errors, --threads 0, a duplicated --input, a folder as MODEL).

usage: scripts/probe_classes.py STRATA_BIN

Each case states what must happen; a panic (exit 101), a signal, a hang or a wrong outcome is BAD.
Exit status 1 when any case is bad."""
import json, os, shutil, subprocess, sys, tempfile

import numpy as np
from onnx import TensorProto as T, helper as h, numpy_helper as nh, save

BIG = 2**62


def vi(name, ty, dims):
    return h.make_tensor_value_info(name, ty, dims)


def model(nodes, inputs, outputs, inits=(), opsets=(("", 18),)):
    g = h.make_graph(nodes, "m", inputs, outputs, list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid(d, v) for d, v in opsets], ir_version=8)


def identity(opsets=(("", 18),)):
    return model([h.make_node("Identity", ["x"], ["y"])], [vi("x", T.FLOAT, [2])],
                 [vi("y", T.FLOAT, [2])], opsets=opsets)


def external_model(location):
    """Add(x, w) where w's 16 floats live in `location`, relative to the model."""
    w = T()
    w.name, w.data_type = "w", T.FLOAT
    w.dims.append(16)
    w.data_location = T.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", "64")):
        e = w.external_data.add()
        e.key, e.value = k, v
    return model([h.make_node("Add", ["x", "w"], ["y"])], [vi("x", T.FLOAT, [16])],
                 [vi("y", T.FLOAT, [16])], [w])


def loop(trip, cond=True):
    """A Loop carrying one value whose body keeps its condition: endless unless trip bounds it."""
    body = h.make_graph([h.make_node("Identity", ["ci"], ["co"]), h.make_node("Identity", ["v"], ["vo"])],
                        "body", [vi("i", T.INT64, []), vi("ci", T.BOOL, []), vi("v", T.FLOAT, [1])],
                        [vi("co", T.BOOL, []), vi("vo", T.FLOAT, [1])])
    inits = [nh.from_array(np.array(cond), "c"), nh.from_array(np.zeros(1, np.float32), "v0")]
    trip_name = ""
    if trip is not None:
        inits.append(nh.from_array(np.array(trip, np.int64), "n"))
        trip_name = "n"
    return model([h.make_node("Loop", [trip_name, "c", "v0"], ["y"], body=body)], [],
                 [vi("y", T.FLOAT, None)], inits)


def range_delta_zero():
    inits = [nh.from_array(np.array(v, np.int64), n) for n, v in (("a", 0), ("b", 10), ("d", 0))]
    return model([h.make_node("Range", ["a", "b", "d"], ["y"])], [], [vi("y", T.INT64, None)], inits)


def main():
    binary = os.path.abspath(sys.argv[1])
    out = tempfile.mkdtemp(prefix="strata-probe-")
    secret = os.path.join(out, "secret.bin")  # outside every model folder below
    np.arange(16, dtype=np.float32).tofile(secret)

    def write(name, m, folder=None):
        folder = os.path.join(out, folder or name)
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "model.onnx")
        save(m, path)
        return path

    cases = []  # (name, argv, expectation, needle in the message)
    # Symlinked external data: a link to a file outside, and a linked folder.
    p = write("link_file", external_model("w.bin"))
    os.symlink(secret, os.path.join(os.path.dirname(p), "w.bin"))
    cases.append(("external_data_file_symlink", ["run", p], "error", "outside"))
    p = write("link_dir", external_model("sub/secret.bin"))
    os.symlink(out, os.path.join(os.path.dirname(p), "sub"))
    cases.append(("external_data_dir_symlink", ["run", p], "error", "outside"))
    p = write("plain_external", external_model("w.bin"))
    np.arange(16, dtype=np.float32).tofile(os.path.join(os.path.dirname(p), "w.bin"))
    cases.append(("external_data_inside_runs", ["run", p], "ok", ""))
    # Opsets strata does not know.
    for name, opsets in (("opset_0", (("", 0),)), ("opset_999", (("", 999),)),
                         ("ml_opset_999", (("", 18), ("ai.onnx.ml", 999)))):
        p = write(name, identity(opsets))
        cases.append((name, ["run", p], "error", "opset"))
    # Endless loops, stopped by --timeout (or by the trip bound).
    for name, m in (("loop_no_trip_count_true", loop(None)), ("loop_trip_2_62", loop(BIG)),
                    ("range_delta_zero", range_delta_zero())):
        p = write(name, m)
        cases.append((name, ["run", p, "--timeout", "2"], "error", ""))
    p = write("loop_bounded_small", loop(None), folder="loop_small")
    cases.append(("loop_trip_bound_flag", ["run", p, "--max-loop-iterations", "10"], "error", "10"))
    # Huge declared dims and Split num_outputs = 2^62 (more in scripts/hostile_models.py).
    p = write("split_huge", model([h.make_node("Split", ["x"], ["a", "b"], axis=0, num_outputs=BIG)],
                                  [vi("x", T.FLOAT, [4])], [vi("a", T.FLOAT, None), vi("b", T.FLOAT, None)]))
    cases.append(("split_num_outputs_2_62", ["run", p], "error", ""))
    p = write("declared_huge", model([h.make_node("Identity", ["x"], ["y"])],
                                     [vi("x", T.FLOAT, [BIG, BIG])], [vi("y", T.FLOAT, None)]))
    cases.append(("input_declared_2_62_squared", ["run", p], "error", ""))
    # The command line, as a script sees it.
    ok = write("ok", identity())
    cases += [
        ("threads_0", ["run", ok, "--threads", "0"], "usage", "at least 1"),
        ("input_given_twice", ["run", ok, "--input", f"x={secret}", "--input", f"x={secret}"], "error", ""),
        ("folder_as_model", ["run", out], "error", ""),
        ("missing_model", ["run", os.path.join(out, "nope.onnx")], "error", ""),
        ("json_missing_model", ["run", os.path.join(out, "nope.onnx"), "--json"], "json", ""),
        ("json_folder_as_model", ["inspect", out, "--json"], "json", ""),
        ("json_threads_0", ["run", ok, "--threads", "0", "--json"], "json", ""),
        ("json_opset_999", ["run", os.path.join(out, "opset_999", "model.onnx"), "--json"], "json", "opset"),
        ("json_timeout", ["run", os.path.join(out, "loop_no_trip_count_true", "model.onnx"),
                          "--timeout", "1", "--json"], "json", "timed out"),
        ("inspect_json_dims", ["inspect", ok, "--json"], "ok", ""),
        ("run_says_seeded", ["run", ok], "ok", "seeded"),
    ]

    bad = 0
    for name, argv, want, needle in cases:
        try:
            r = subprocess.run([binary] + argv, capture_output=True, text=True, timeout=30)
            code, text = r.returncode, r.stdout + r.stderr
        except subprocess.TimeoutExpired:
            code, text = "hang", ""
        last = (text.strip().splitlines() or [""])[-1][:140]
        if code in ("hang", 101) or (isinstance(code, int) and code < 0):
            good = False
        elif want == "ok":
            good = code == 0
        elif want == "usage":
            good = code == 2
        elif want == "json":
            try:
                err = json.loads(r.stdout)["error"]
                good = code != 0 and err["exit_code"] == code and bool(err["message"]) and bool(err["kind"])
                last = json.dumps(err)[:140]
            except (ValueError, KeyError, TypeError):
                good = False
        else:
            good = code in (1, 2)
        good = good and needle.lower() in text.lower()
        bad += not good
        print(f"{'ok ' if good else 'BAD'} {name:30} exit {code}: {last}")
    print(f"{bad} bad of {len(cases)}")
    shutil.rmtree(out, ignore_errors=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
