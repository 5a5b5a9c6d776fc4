"""nnc.onnx.InferenceSession: ONNX Runtime's API over a loaded graph. Results against
onnxruntime (bound as tests/onnx/test_onnx.py's, tightened to 1e-5), every bad feed, runs from
threads and from asyncio, progress reporting (a callback that raises, BaseExceptions included)
and closing. Threads are daemons joined with timeouts, and asyncio waits are bounded, so a
deadlock fails the test instead of hanging it."""

import asyncio
import concurrent.futures
import logging
import threading

import numpy as np
import pytest

import nnc

onnx = pytest.importorskip("onnx", reason="nnc.onnx tests need onnx (pip install -e '.[test]')")
ort = pytest.importorskip("onnxruntime", reason="the ONNX tests compare with onnxruntime")
from test_onnx import close, model, session  # noqa: E402

import nnc.onnx  # noqa: E402

h = onnx.helper
RNG = np.random.default_rng(5)
RTOL = 1e-5
TIMEOUT = 60            # seconds: a join or await past this is a hang


def conv_model(size=(9, 7)):
    """Conv + Relu + GlobalAveragePool + Gemm, an image classifier's skeleton (new random
    weights at each call), on a [2, 3, *size] input."""
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c"], ["r"]),
             h.make_node("GlobalAveragePool", ["r"], ["p"]),
             h.make_node("Flatten", ["p"], ["f"]),
             h.make_node("Gemm", ["f", "g", "gb"], ["y"], transB=1)]
    inits = {"w": RNG.standard_normal((8, 3, 3, 3)).astype(np.float32),
             "b": RNG.standard_normal(8).astype(np.float32),
             "g": RNG.standard_normal((5, 8)).astype(np.float32),
             "gb": RNG.standard_normal(5).astype(np.float32)}
    return model(nodes, {"x": [2, 3, *size]}, {"y": [2, 5]}, inits)


def multi_model():
    """Two inputs, three outputs (one an input's Relu, one of both)."""
    nodes = [h.make_node("Relu", ["a"], ["ra"]),
             h.make_node("Add", ["ra", "b"], ["s"]),
             h.make_node("Sigmoid", ["s"], ["sig"]),
             h.make_node("Mul", ["s", "b"], ["m"])]
    return model(nodes, {"a": [3, 4], "b": [3, 4]}, {"sig": [3, 4], "m": [3, 4], "ra": [3, 4]})


def feeds_for(sess):
    return {a.name: RNG.standard_normal(a.shape).astype(a.dtype) for a in sess.get_inputs()}


def same_as_ort(m, sess, feeds, names=None):
    want = session(m).run(names, feeds)
    got = sess.run(names, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert isinstance(g, np.ndarray) and g.dtype == w.dtype
        close(g, w, RTOL)
    return got


@pytest.mark.parametrize("schedule", ["rank", None])
@pytest.mark.parametrize("simplify", [True, False])
def test_conv_model_matches_onnxruntime(schedule, simplify):
    m = conv_model()
    with nnc.onnx.InferenceSession(m, schedule=schedule, simplify=simplify) as sess:
        for _ in range(3):
            same_as_ort(m, sess, feeds_for(sess))
        assert isinstance(sess.graph, nnc.Graph)
        assert (sess.graph.schedule is not None) == (schedule is not None)


def test_inputs_and_outputs_describe_the_model_as_onnxruntime_does():
    m = multi_model()
    sess = nnc.onnx.InferenceSession(m)
    ref = session(m)
    for mine, theirs in [(sess.get_inputs(), ref.get_inputs()),
                         (sess.get_outputs(), ref.get_outputs())]:
        assert [a.name for a in mine] == [a.name for a in theirs]
        assert [a.shape for a in mine] == [a.shape for a in theirs]
        assert [a.type for a in mine] == [a.type for a in theirs] == ["tensor(float)"] * len(mine)
        assert all(a.dtype == np.float32 for a in mine)
    assert "tensor(float)" in repr(sess.get_inputs()[0])
    sess.get_inputs().clear()            # a copy: the session's own list stays
    assert len(sess.get_inputs()) == 2


def test_path_bytes_and_model_proto_load_alike(tmp_path):
    m = conv_model()
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    feeds = {"x": RNG.standard_normal((2, 3, 9, 7)).astype(np.float32)}
    results = [nnc.onnx.InferenceSession(src).run(None, feeds)[0]
               for src in (m, m.SerializeToString(), str(path), path)]
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])


def test_output_names_choose_and_order_outputs():
    m = multi_model()
    sess = nnc.onnx.InferenceSession(m, schedule=None)
    feeds = feeds_for(sess)
    same_as_ort(m, sess, feeds)
    same_as_ort(m, sess, feeds, ["m", "sig"])
    same_as_ort(m, sess, feeds, ("ra",))
    same_as_ort(m, sess, feeds, ["m", "m"])
    assert sess.run([], feeds) == []


def test_results_are_fresh_arrays():
    m = multi_model()
    sess = nnc.onnx.InferenceSession(m)
    feeds1, feeds2 = feeds_for(sess), feeds_for(sess)
    first = sess.run(None, feeds1)
    kept = [a.copy() for a in first]
    second = sess.run(None, feeds2)
    for a, k in zip(first, kept):
        np.testing.assert_array_equal(a, k)         # the second run did not write into them
    for a, b in zip(first, second):
        assert not np.shares_memory(a, b)
    for a, t in zip(first, sess._outputs.values()):
        assert not np.shares_memory(a, t.numpy())
        assert a.flags.writeable and a.flags.owndata


@pytest.mark.parametrize("bad, names", [
    (lambda f: {**f, "nope": f["a"]}, ["'nope'"]),                        # unknown input
    (lambda f: {"a": f["a"]}, ["'b'"]),                                   # missing input
    (lambda f: {**f, "b": f["b"][:2]}, ["'b'", "(3, 4)", "(2, 4)"]),      # wrong shape
    (lambda f: {**f, "b": f["b"].reshape(4, 3)}, ["'b'", "(3, 4)"]),      # same size, new shape
    (lambda f: {**f, "a": f["a"][None]}, ["'a'", "(1, 3, 4)"]),           # extra axis
    (lambda f: {**f, "a": f["a"].astype(np.float64)}, ["'a'", "float64", "tensor(float)"]),
    (lambda f: {**f, "a": f["a"].astype(np.int32)}, ["'a'", "int32"]),
    (lambda f: {**f, "a": f["a"].tolist()}, ["'a'", "list"]),            # no array: not cast
    (lambda f: {**f, "a": None}, ["'a'", "NoneType"]),
])
def test_bad_feeds_raise_naming_the_input(bad, names):
    sess = nnc.onnx.InferenceSession(multi_model())
    feeds = feeds_for(sess)
    with pytest.raises(nnc.onnx.FeedError) as e:
        sess.run(None, bad(feeds))
    assert isinstance(e.value, nnc.NNCError) and isinstance(e.value, ValueError)
    for n in names:
        assert n in str(e.value), str(e.value)
    same_as_ort(multi_model(), sess, feeds)         # the session still runs


@pytest.mark.parametrize("bad", [
    lambda f: {"a": f["a"]},
    lambda f: {**f, "b": f["b"][:2]},
    lambda f: {**f, "a": f["a"].astype(np.float64)},
])
def test_onnxruntime_refuses_those_feeds_too(bad):
    """The feeds FeedError refuses are errors in onnxruntime as well (no silent cast there)."""
    ref = session(multi_model())
    feeds = {a.name: RNG.standard_normal(a.shape).astype(np.float32) for a in ref.get_inputs()}
    with pytest.raises(Exception):  # noqa: B017 (onnxruntime's own exception classes)
        ref.run(None, bad(feeds))


def test_bad_arguments():
    sess = nnc.onnx.InferenceSession(multi_model())
    feeds = feeds_for(sess)
    with pytest.raises(nnc.onnx.FeedError, match="dict"):
        sess.run(None, [feeds["a"], feeds["b"]])
    with pytest.raises(nnc.onnx.SessionError, match="'nope'"):
        sess.run(["sig", "nope"], feeds)
    with pytest.raises(nnc.onnx.SessionError, match="string"):
        sess.run("sig", feeds)
    with pytest.raises(nnc.onnx.OnnxTypeError, match="schedule"):
        nnc.onnx.InferenceSession(multi_model(), schedule=1)
    with pytest.raises(nnc.onnx.OnnxTypeError, match="autotune"):
        nnc.onnx.InferenceSession(multi_model(), autotune=0)
    with pytest.raises(nnc.onnx.OnnxTypeError, match="progress"):
        nnc.onnx.InferenceSession(multi_model(), progress="yes")
    with pytest.raises(nnc.NNCError):
        nnc.onnx.InferenceSession(multi_model(), schedule="no such policy")
    with pytest.raises(nnc.onnx.OnnxTypeError):
        nnc.onnx.InferenceSession(12)


def test_close_and_context_manager():
    sess = nnc.onnx.InferenceSession(multi_model())
    feeds = feeds_for(sess)
    with sess as same:
        assert same is sess
        sess.run(None, feeds)
    with pytest.raises(nnc.onnx.SessionError, match="closed"):
        sess.run(None, feeds)
    with pytest.raises(nnc.onnx.SessionError, match="closed"):
        sess.graph  # noqa: B018
    with pytest.raises(nnc.onnx.SessionError, match="closed"):
        sess.run_async(None, feeds).result(TIMEOUT)
    sess.close()                        # twice: harmless
    assert [a.name for a in sess.get_inputs()] == ["a", "b"]


@pytest.mark.parametrize("schedule", ["rank", None])
def test_threads_share_one_session(schedule):
    """Four threads run one session with their own inputs: every result is its own input's
    (an image large enough that runs would overlap without the session's lock)."""
    m = conv_model((64, 64))
    sess = nnc.onnx.InferenceSession(m, schedule=schedule)
    ref = session(m)
    cases = [{"x": RNG.standard_normal((2, 3, 64, 64)).astype(np.float32)} for _ in range(4)]
    wants = [ref.run(None, f)[0] for f in cases]
    errors, done = [], []

    def work(i):
        try:
            for _ in range(15):
                close(sess.run(None, cases[i])[0], wants[i], RTOL)
            done.append(i)
        except BaseException as e:  # noqa: BLE001 (reported by the main thread)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert not any(t.is_alive() for t in threads), "a run hung"
    assert not errors, errors
    assert sorted(done) == [0, 1, 2, 3]


def test_run_async_with_asyncio():
    m = conv_model()
    sess = nnc.onnx.InferenceSession(m)
    ref = session(m)
    cases = [{"x": RNG.standard_normal((2, 3, 9, 7)).astype(np.float32)} for _ in range(5)]
    wants = [ref.run(None, f)[0] for f in cases]

    async def main():
        futures = [sess.run_async(None, f) for f in cases]
        assert all(isinstance(f, concurrent.futures.Future) for f in futures)
        for f in cases:
            f["x"][...] = 0             # the feeds were copied: the runs do not see this
        got = await asyncio.wait_for(
            asyncio.gather(*(asyncio.wrap_future(f) for f in futures)), TIMEOUT)
        for (y,), w in zip(got, wants):
            close(y, w, RTOL)
        with pytest.raises(nnc.onnx.FeedError, match="'x'"):
            await asyncio.wait_for(asyncio.wrap_future(
                sess.run_async(None, {"x": np.zeros((1, 3, 9, 7), np.float32)})), TIMEOUT)
        with pytest.raises(nnc.onnx.SessionError, match="'nope'"):
            await asyncio.wait_for(asyncio.wrap_future(sess.run_async(["nope"], cases[0])),
                                   TIMEOUT)

    asyncio.run(main())
    sess.close()


class Stop(BaseException):
    """A BaseException that is neither KeyboardInterrupt nor SystemExit."""


@pytest.mark.parametrize("exc", [Stop, KeyboardInterrupt, SystemExit, RuntimeError])
def test_run_async_future_carries_base_exceptions(exc, monkeypatch):
    sess = nnc.onnx.InferenceSession(multi_model())

    def run(names, feeds):
        raise exc("from the run")

    monkeypatch.setattr(sess, "_run", run)
    future = sess.run_async(None, feeds_for(sess))
    with pytest.raises(exc, match="from the run"):
        future.result(TIMEOUT)
    monkeypatch.undo()
    same_as_ort(multi_model(), sess, feeds_for(sess))   # the worker survived
    sess.close()


def test_progress_callback_and_logging(caplog):
    calls = []
    m = conv_model()
    with caplog.at_level(logging.INFO, logger="nnc"):
        sess = nnc.onnx.InferenceSession(m, autotune=1,
                                         progress=lambda *a: calls.append(a))
    assert calls == [("load", 0, 4), ("simplify", 1, 4), ("autotune", 2, 4), ("schedule", 3, 4),
                     ("ready", 4, 4)]
    logged = " ".join(r.getMessage() for r in caplog.records if r.name == "nnc")
    for stage in ("load", "simplify", "autotune", "schedule"):
        assert stage in logged, logged
    same_as_ort(m, sess, feeds_for(sess))
    calls.clear()
    nnc.onnx.InferenceSession(conv_model(), schedule=None, simplify=False,
                              progress=lambda *a: calls.append(a))
    assert calls == [("load", 0, 1), ("ready", 1, 1)]


@pytest.mark.parametrize("stage", ["load", "simplify", "schedule", "ready"])
@pytest.mark.parametrize("exc", [ValueError, Stop, KeyboardInterrupt, SystemExit])
def test_progress_callback_raising_propagates(stage, exc):
    seen = []

    def progress(s, done, total):
        seen.append(s)
        if s == stage:
            raise exc(f"stop at {s}")

    with pytest.raises(exc, match=f"stop at {stage}"):
        nnc.onnx.InferenceSession(conv_model(), progress=progress)
    assert seen[-1] == stage            # nothing ran after the callback raised


def test_progress_callback_whose_str_raises_propagates():
    class Bad(Exception):
        def __str__(self):
            raise RuntimeError("no str")

        __repr__ = __str__

    def progress(*a):
        raise Bad()

    with pytest.raises(Bad):
        nnc.onnx.InferenceSession(multi_model(), progress=progress)


def test_intra_op_threads_is_set_process_wide():
    before = nnc.get_intra_op_threads()
    try:
        m = conv_model()
        sess = nnc.onnx.InferenceSession(m, intra_op_threads=1)
        assert nnc.get_intra_op_threads() == 1
        same_as_ort(m, sess, feeds_for(sess))
        nnc.onnx.InferenceSession(m)            # None leaves the setting alone
        assert nnc.get_intra_op_threads() == 1
        with pytest.raises(nnc.NNCError, match="intra_op"):
            nnc.onnx.InferenceSession(m, intra_op_threads=0)
    finally:
        nnc.set_intra_op_threads(before)


def test_load_options_pass_through():
    m = conv_model()
    sess = nnc.onnx.InferenceSession(m, dtype="float64", schedule=None)
    assert [a.type for a in sess.get_inputs()] == ["tensor(double)"]
    x = RNG.standard_normal((2, 3, 9, 7))
    want = session(m).run(None, {"x": x.astype(np.float32)})[0]
    close(sess.run(None, {"x": x})[0], want, 1e-5)
    with pytest.raises(nnc.onnx.OnnxError):
        nnc.onnx.InferenceSession(m, max_bytes=16)
