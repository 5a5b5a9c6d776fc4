"""nnc.Engine under hostile use (docs/engine.md, "Errors" and "Record"): exceptions that cannot
be printed, BaseExceptions, objects whose __init__ never ran, a fork with ops in flight, and
byte copies of recorded ENGINE_CALL tensors.

Whatever could hang or crash runs in a subprocess with a timeout, so a regression fails the
test instead of hanging or killing the suite. No test asserts a duration.
"""

import gc
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import nnc
from nnc.engine.engine import CFUNC

T = 60                                  # seconds: the bound on every wait
ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_py(code, timeout=T):
    """Run ``code`` in a fresh interpreter; a hang fails the test (TimeoutExpired)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


@pytest.fixture(params=["threaded", "naive"])
def engine(request):
    e = nnc.Engine(naive=request.param == "naive")
    yield e
    try:
        e.wait_all(timeout=T)
    except nnc.EngineError:
        pass


# -- any exception an op raises fails it ----------------------------------------------------

class Unprintable(Exception):
    def __repr__(self):
        raise RuntimeError("no repr")

    def __str__(self):
        raise RuntimeError("no str")


class Undeletable(Exception):
    def __repr__(self):
        raise RuntimeError("no repr")

    def __del__(self):
        raise RuntimeError("no del")


class NamelessType(type):
    @property
    def __name__(cls):
        raise RuntimeError("no name")


class Nameless(Exception, metaclass=NamelessType):
    def __repr__(self):
        raise RuntimeError("no repr")


class BadNotes(Exception):
    def add_note(self, note):
        raise RuntimeError("no notes")


RAISED = [Unprintable, Undeletable, Nameless, BadNotes, KeyboardInterrupt, SystemExit,
          GeneratorExit, ValueError]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # __del__
@pytest.mark.parametrize("kind", RAISED, ids=lambda k: type.__dict__["__name__"].__get__(k))
def test_any_exception_an_op_raises_fails_it_and_its_readers(engine, kind):
    a, b = engine.new_var(), engine.new_var()
    ran = []

    def op():
        raise kind()

    engine.push(op, mutate=[a], name="hostile")
    engine.push(lambda: ran.append("reader"), read=[a], mutate=[b])
    for v in (a, b):
        with pytest.raises(nnc.EngineError, match="'hostile' failed") as info:
            engine.wait_for_var(v, timeout=T)
        assert type(info.value.__cause__) is kind
    with pytest.raises(nnc.EngineError, match="'hostile' failed") as info:
        engine.wait_all(timeout=T)
    assert type(info.value.__cause__) is kind
    assert ran == [] and a.version == 1 and b.version == 1
    engine.push(lambda: ran.append("after"), mutate=[a])      # the engine stays usable
    assert engine.wait_all(timeout=T) and ran == ["after"]


def test_an_unprintable_exception_is_described_by_its_type(engine):
    v = engine.new_var()

    def op():
        raise Unprintable()

    engine.push(op, mutate=[v])
    with pytest.raises(nnc.EngineError,
                       match="'.*op' failed: <.*Unprintable object: its repr raised "):
        engine.wait_for_var(v, timeout=T)


def test_an_unprintable_op_label_is_described_by_its_type(engine):
    class Hostile:
        def __getattr__(self, name):
            raise RuntimeError("no attributes")

        def __repr__(self):
            raise RuntimeError("no repr")

        def __call__(self):
            raise ValueError("failed")

    v = engine.new_var()
    engine.push(Hostile(), mutate=[v])
    with pytest.raises(nnc.EngineError,
                       match="'<.*Hostile object: its repr raised RuntimeError>' failed: "
                             "ValueError") as info:
        engine.wait_for_var(v, timeout=T)
    assert isinstance(info.value.__cause__, ValueError)


def test_an_unprintable_failure_is_not_lost_in_a_subprocess():
    """The report as a user sees it: no "Exception ignored", the reader never runs."""
    out = run_py("""
        import nnc

        class Bad(Exception):
            def __repr__(self):
                raise RuntimeError("no repr")
            def __str__(self):
                raise RuntimeError("no str")

        def boom():
            raise Bad()

        for naive in (False, True):
            e = nnc.Engine(naive=naive)
            a, b = e.new_var(), e.new_var()
            ran = []
            e.push(boom, mutate=[a], name="bad")
            e.push(lambda: ran.append(1), read=[a], mutate=[b])
            try:
                e.wait_for_var(b, timeout=30)
                print("lost", ran, flush=True)
            except nnc.EngineError as exc:
                print("failed", type(exc.__cause__).__name__, ran, flush=True)
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["failed Bad []"] * 2, out.stdout + out.stderr
    assert "Exception ignored" not in out.stderr, out.stderr


# -- no crash on a NULL fn or an object whose __init__ never ran ----------------------------

@pytest.mark.parametrize("naive", [False, True])
def test_push_none_is_refused(naive):
    out = run_py(f"""
        import nnc
        e = nnc.Engine(naive={naive})
        try:
            e.push(None)
        except nnc.EngineError as exc:
            print("refused:", exc, flush=True)
        v = e.new_var()
        e.push(None.__class__, mutate=[v])          # a callable: still runs
        print("works:", e.wait_for_var(v, timeout=30), flush=True)
    """)
    assert out.returncode == 0, out.stderr
    assert "refused: fn must be callable or an nnc.engine.engine.CFUNC, not NoneType" in out.stdout
    assert "works: True" in out.stdout


UNINIT_CALLS = {
    "new_var": "e.new_var()",
    "push": "e.push(lambda: None)",
    "push_var": "e.push(lambda: None, mutate=[nnc.EngineVar.__new__(nnc.EngineVar)])",
    "push_none": "e.push(None)",
    "push_cmd": "e.push_cmd(nnc.Cmd('NOOP'), [], [])",
    "var_of": "e.var_of(nnc.Tensor(np.ones(2)))",
    "delete_var": "e.delete_var(nnc.EngineVar.__new__(nnc.EngineVar))",
    "wait_for_var": "e.wait_for_var(nnc.EngineVar.__new__(nnc.EngineVar))",
    "wait_all": "e.wait_all()",
    "close": "e.close()",
    "record": "e.record().__enter__()",
    "record_stop": "e._record_stop()",
    "naive": "e.naive",
    "closed": "e.closed",
}


@pytest.mark.parametrize("make", ["Engine.__new__(Engine)", "Sub()"])
def test_an_engine_whose_init_never_ran_refuses_everything(make):
    calls = "\n".join(f"""
        try:
            {code}
            print({name!r}, "ran", flush=True)
        except nnc.EngineError as exc:
            print({name!r}, "refused", "not initialised" in str(exc), flush=True)"""
                      for name, code in UNINIT_CALLS.items())
    out = run_py(f"""
        import numpy as np
        import nnc
        from nnc import Engine

        class Sub(Engine):
            def __init__(self):
                pass                        # never calls super().__init__()

        e = {make}
        print(repr(e), flush=True)
        {textwrap.indent(textwrap.dedent(calls), " " * 8).strip()}
    """)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("<nnc.Engine"), out.stdout
    assert lines[1:] == [f"{name} refused True" for name in UNINIT_CALLS], out.stdout


def test_a_var_whose_init_never_ran_is_refused(engine):
    stray = nnc.EngineVar.__new__(nnc.EngineVar)
    assert stray.version == 0 and not stray.deleted and "EngineVar" in repr(stray)
    for call in (lambda: engine.push(lambda: None, mutate=[stray]),
                 lambda: engine.push(lambda: None, read=[stray]),
                 lambda: engine.wait_for_var(stray),
                 lambda: engine.delete_var(stray)):
        with pytest.raises(nnc.EngineError, match="not made by Engine.new_var"):
            call()
    assert engine.wait_all(timeout=T)


# -- a forked child refuses the parent's engine ---------------------------------------------

@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("call", ["e.wait_all()", "e.wait_for_var(v)", "e.close()",
                                  "e.push(lambda: None)", "e.delete_var(w)"])
def test_a_forked_child_refuses_the_parents_engine_with_ops_in_flight(call):
    out = run_py(f"""
        import os, threading, warnings
        import nnc
        warnings.simplefilter("ignore", DeprecationWarning)   # fork with threads running
        gate, started = threading.Event(), threading.Event()
        e = nnc.Engine()
        v, w = e.new_var(), e.new_var()

        def blocked():
            started.set()
            gate.wait(30)

        e.push(blocked, mutate=[v])                 # a gate op, blocking in a pool thread
        e.push(lambda: None, read=[v], mutate=[w])
        assert started.wait(30)
        pid = os.fork()
        if pid == 0:
            try:
                {call}
                print("child: returned", flush=True)
            except nnc.EngineError as exc:
                print("child: refused", "before the process forked" in str(exc), flush=True)
            child = nnc.Engine()                    # a new engine works in the child
            x = child.new_var()
            child.push(lambda: None, mutate=[x])
            print("child: new engine", child.wait_for_var(x, timeout=30), flush=True)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        gate.set()
        print("parent:", e.wait_all(timeout=30), status, flush=True)
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["child: refused True", "child: new engine True",
                                       "parent: True 0"], out.stdout + out.stderr
# -- a byte copy of a recorded ENGINE_CALL tensor ------------------------------------------

def _record_call(e, fn):
    v = e.new_var()
    with e.record() as g:
        e.push(fn, mutate=[v], name="call")
    assert e.wait_all(timeout=T)
    (node,) = g.execs
    return g, node.inputs[0]


def test_a_copy_of_a_freed_call_tensor_is_refused():
    calls = []
    first = CFUNC(lambda arg: calls.append("first") or 0)
    second = CFUNC(lambda arg: calls.append("second") or 0)
    e = nnc.Engine()
    backend = nnc.command_info("ENGINE_CALL").backends[0]
    cmd = nnc.Cmd("ENGINE_CALL")
    g, call = _record_call(e, first)
    calls.clear()
    copy = nnc.Tensor(np.array(call.numpy()))
    backend.exec(cmd, [copy], [])               # a live copy runs the same callable
    assert calls == ["first"]
    h = nnc.Graph()
    h.exec(cmd, [copy], [])                     # and is accepted as a node
    del g, call, h
    gc.collect()
    with pytest.raises(nnc.CommandError, match="INVALID"):
        backend.exec(cmd, [copy], [])           # its call is gone: refused
    with pytest.raises(nnc.CommandError, match="only call tensors made by"):
        nnc.Graph().exec(cmd, [copy], [])
    g2, call2 = _record_call(e, second)         # may reuse the freed call's slot
    calls.clear()
    with pytest.raises(nnc.CommandError, match="INVALID"):
        backend.exec(cmd, [copy], [])           # never the new call's callable
    assert calls == []
    backend.exec(cmd, [call2], [])
    assert calls == ["second"]
    for forged in ([1, 0], [0, 0, 0], [-1, 1, 0], [2**62, 1, 0]):
        t = nnc.Tensor(np.array(forged, np.int64))
        with pytest.raises(nnc.CommandError):
            backend.exec(cmd, [t], [])
        with pytest.raises(nnc.CommandError, match="only call tensors made by"):
            nnc.Graph().exec(cmd, [t], [])
    assert calls == ["second"]
    del g2, call2


def test_a_copy_of_a_call_tensor_whose_function_was_freed_never_runs():
    """The crash as reported: the copy outlives the function it named."""
    out = run_py("""
        import gc, numpy as np, nnc
        from nnc.engine.engine import CFUNC
        e = nnc.Engine()
        v = e.new_var()
        fn = CFUNC(lambda arg: 0)
        with e.record() as g:
            e.push(fn, mutate=[v])
        e.wait_all(timeout=30)
        copy = nnc.Tensor(np.array(g.execs[0].inputs[0].numpy()))
        del g, fn
        e.push(lambda: None, mutate=[v])        # the engine lets go of its op's CFUNC
        e.wait_all(timeout=30)
        e.close()
        del e, v
        gc.collect()
        others = [CFUNC(lambda arg, k=k: print("unrelated", k, flush=True) or 0)
                  for k in range(64)]           # may take the freed function's memory
        backend = nnc.command_info("ENGINE_CALL").backends[0]
        try:
            backend.exec(nnc.Cmd("ENGINE_CALL"), [copy], [])
            print("ran", flush=True)
        except nnc.CommandError as exc:
            print("refused", flush=True)
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["refused"], out.stdout


def test_a_recording_not_made_by_record_is_refused():
    from nnc.engine.region_graph import Recording

    with pytest.raises(nnc.EngineError, match="not made by Engine.record"):
        Recording.__new__(Recording).__enter__()
    with pytest.raises(nnc.EngineError, match="records an nnc.Engine, not int"):
        Recording(42)
