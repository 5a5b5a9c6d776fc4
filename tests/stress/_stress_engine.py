"""The engine stress mix: random push programs on nnc.Engine (threaded and naive), each checked
against a serial replay of the same program.

A *case* is plain JSON (``random_case``): variables, and ops that read and mutate random sets of
them, some of which raise (an Exception, a KeyboardInterrupt / SystemExit / GeneratorExit, or an
exception whose repr and str raise), with waits (``wait_for_var`` and ``wait_all``, some with
short timeouts), threads waiting on variables meanwhile, and sometimes ``close()`` part-way
(the pushes after it must be refused). Each op that runs appends its id to the log of every
variable it mutates and rewrites that variable's array from the ones it reads, so the engine's
logs and arrays must equal the serial replay's bit for bit, and an op that reads a failed
variable must not run: docs/engine.md's error rule is replayed exactly, so a failure reaches
exactly the readers downstream of it and every wait raises exactly when the replay says so.

    python tests/stress/_stress_engine.py --seed 7 --cases 20
    python tests/stress/_stress_engine.py --spec '[{...}, ...]'

Output and exit status as tests/stress/_stress_mix.py's (its ``run_cases``), which
benchmarks/soak.py reads.
"""

import argparse
import json
import random
import re
import threading
import time

import numpy as np
from _stress_mix import CaseFailed, InjectedError, UnprintableError, run_cases

import nnc

TIMEOUT = 20.0                  # seconds a wait without a timeout of its own may take
FAILS = ("exc", "base", "repr")
_NAMED = re.compile(r"engine op 'op(\d+)'")


def random_case(rnd):
    """One case as JSON-able data, drawn from ``rnd``."""
    n_vars = rnd.randint(1, 6)
    steps = []
    for _ in range(rnd.randint(1, 40)):
        r = rnd.random()
        if r < 0.08:
            steps.append({"wait_var": rnd.randrange(n_vars),
                          "timeout": rnd.choice([None, 0, 0.001])})
        elif r < 0.12:
            steps.append({"wait_all": rnd.choice([None, 0, 0.001])})
        else:
            chosen = rnd.sample(range(n_vars), rnd.randint(0, n_vars))
            k = rnd.randint(0, len(chosen))
            steps.append({"read": chosen[:k], "mutate": chosen[k:],
                          "fail": rnd.choice(FAILS) if rnd.random() < 0.08 else None,
                          "sleep": rnd.choice([0, 0, 0, 0.0005, 0.002])})
    return {
        "naive": rnd.random() < 0.3,
        "vars": n_vars,
        "steps": steps,
        "close_at": rnd.randrange(len(steps)) if rnd.random() < 0.2 else None,
        "waiters": rnd.randint(0, 2),
        "data_seed": rnd.randrange(2 ** 31),
    }


def _raise(kind, j):
    if kind == "exc":
        raise InjectedError(f"injected failure in op{j}")
    if kind == "repr":
        raise UnprintableError()
    raise random.Random(j).choice((KeyboardInterrupt, SystemExit, GeneratorExit))(f"op{j}")


class State:
    """What the ops change: per variable, the ids of the ops that wrote it and an array."""

    def __init__(self, case):
        data = np.random.default_rng(case["data_seed"])
        self.logs = [[] for _ in range(case["vars"])]
        self.arrays = [data.uniform(-1, 1, 8) for _ in range(case["vars"])]

    def op(self, j, step):
        if step["sleep"]:
            time.sleep(step["sleep"])
        if step["fail"]:
            _raise(step["fail"], j)
        total = sum((self.arrays[r] for r in step["read"]), np.zeros(8))
        for m in step["mutate"]:
            self.arrays[m] = self.arrays[m] * 0.5 + total + j
            self.logs[m].append(j)


class Replay:
    """docs/engine.md's error rule, serially: ``err[v]`` is the set of op ids whose failure
    ``v`` may carry (a skipped op carries one of its failed reads'), empty when ``v`` is fine."""

    def __init__(self, case):
        self.state = State(case)
        self.err = [frozenset() for _ in range(case["vars"])]
        self.failed = set()             # ops that ran and failed since the last wait_all
        # A wait_all that timed out may still have raised an early failure; whether it took
        # the ones recorded later too is unknown until a full wait_all drains them.
        self.unsure = False

    def push(self, j, step):
        bad = frozenset().union(*(self.err[r] for r in step["read"]))
        if bad:
            for m in step["mutate"]:
                self.err[m] = bad
            return
        try:
            self.state.op(j, step)
        except BaseException:  # noqa: BLE001 - the injected failure, whatever its kind
            for m in step["mutate"]:
                self.err[m] = frozenset({j})
            self.failed.add(j)
            return
        for m in step["mutate"]:
            self.err[m] = frozenset()


def _check_error(exc, allowed, what):
    """``exc`` must be an EngineError naming one of the ops in ``allowed``, with a cause."""
    if not isinstance(exc, nnc.EngineError):
        raise CaseFailed(f"{what} raised {type(exc).__name__}, not an EngineError")
    named = {int(m) for m in _NAMED.findall(str(exc))}
    if not named & set(allowed):
        raise CaseFailed(f"{what} raised {str(exc)[:200]!r}; expected a failure of one of "
                         f"ops {sorted(allowed)}")
    if exc.__cause__ is None:
        raise CaseFailed(f"{what} raised {str(exc)[:200]!r} without its cause")


def _check_var(e, replay, state, v, timeout, what):
    """Wait for ``v``; when the wait ends, its log, array and error must be the replay's."""
    try:
        done = e.wait_for_var(v.var, timeout=TIMEOUT if timeout is None else timeout)
    except BaseException as exc:  # noqa: BLE001 - judged here
        if not replay.err[v.index]:
            raise CaseFailed(f"{what}: var {v.index} raised {exc!r}; the replay has no "
                             "failure on it") from exc
        _check_error(exc, replay.err[v.index], f"{what}: var {v.index}")
        done = True
    else:
        if done and replay.err[v.index]:
            raise CaseFailed(f"{what}: var {v.index} carries no error; the replay's carries "
                             f"the failure of one of ops {sorted(replay.err[v.index])}")
        if not done and timeout is None:
            raise CaseFailed(f"{what}: var {v.index} not done after {TIMEOUT} s")
    if done:
        if state.logs[v.index] != replay.state.logs[v.index]:
            raise CaseFailed(f"{what}: var {v.index} was written by ops "
                             f"{state.logs[v.index]}, the replay's by "
                             f"{replay.state.logs[v.index]}")
        if not np.array_equal(state.arrays[v.index], replay.state.arrays[v.index]):
            raise CaseFailed(f"{what}: var {v.index}'s array differs from the replay's")


def _wait_all(e, replay, timeout, what):
    """wait_all: once done it must raise exactly when an op failed since the last one."""
    try:
        done = e.wait_all(timeout=TIMEOUT if timeout is None else timeout)
    except BaseException as exc:  # noqa: BLE001 - judged here
        if not replay.failed:
            raise CaseFailed(f"{what}: wait_all raised {exc!r} with no failed op") from exc
        _check_error(exc, replay.failed, what)
        # A wait that timed out may have raised an early failure: the others recorded later
        # may or may not be raised by the next wait_all.
        replay.failed = set()
        replay.unsure = timeout is not None
        return
    if not done:
        if timeout is None:
            raise CaseFailed(f"{what}: wait_all not done after {TIMEOUT} s")
        return
    if replay.failed:
        raise CaseFailed(f"{what}: wait_all returned, but ops {sorted(replay.failed)} failed")
    replay.failed = set()


def _drain_unsure(e, replay):
    if replay.unsure:
        try:
            e.wait_all(timeout=TIMEOUT)
        except nnc.EngineError:
            pass
        replay.failed, replay.unsure = set(), False


class _Var:
    __slots__ = ("var", "index")

    def __init__(self, var, index):
        self.var, self.index = var, index


def run_case(case):
    """Run one case; return "ok" or "error" (some op failed, as the replay says); raise
    CaseFailed on anything else."""
    e = nnc.Engine(naive=case["naive"])
    vs = [_Var(e.new_var(), i) for i in range(case["vars"])]
    state, replay = State(case), Replay(case)
    stop = threading.Event()
    waiter_errors = []

    def waiter(rnd):
        # Waits on random vars meanwhile: it may see any error, never a crash or a hang.
        while not stop.is_set():
            v = rnd.choice(vs)
            try:
                e.wait_for_var(v.var, timeout=0.002)
            except nnc.EngineError:
                pass
            except BaseException as exc:  # noqa: BLE001 - reported by the case
                waiter_errors.append(exc)
                return

    threads = [threading.Thread(target=waiter, args=(random.Random(k),), daemon=True)
               for k in range(case["waiters"])]
    for t in threads:
        t.start()
    closed = False
    try:
        for j, step in enumerate(case["steps"]):
            what = f"step {j}"
            if closed:
                if "read" in step:
                    try:
                        e.push(lambda: None, [vs[0].var], [])
                    except nnc.EngineError:
                        continue
                    raise CaseFailed(f"{what}: a push after close() was accepted")
                continue
            if "wait_var" in step:
                _check_var(e, replay, state, vs[step["wait_var"]], step["timeout"], what)
            elif "wait_all" in step:
                _drain_unsure(e, replay)
                _wait_all(e, replay, step["wait_all"], what)
            else:
                e.push(lambda j=j, step=step: state.op(j, step),
                       [vs[r].var for r in step["read"]], [vs[m].var for m in step["mutate"]],
                       name=f"op{j}")
                replay.push(j, step)
            if case["close_at"] == j:
                e.close()
                closed = True
        _drain_unsure(e, replay)
        if not closed:
            _wait_all(e, replay, None, "the end")
        for v in vs:
            _check_var(e, replay, state, v, None, "the end")
    finally:
        stop.set()
        for t in threads:
            t.join(TIMEOUT)
        if not closed:
            try:
                e.close()
            except nnc.EngineError:
                pass
    if any(t.is_alive() for t in threads):
        raise CaseFailed(f"a waiter thread still blocked after {TIMEOUT} s")
    if waiter_errors:
        raise CaseFailed(f"a waiter raised {waiter_errors[0]!r}, not an EngineError")
    return "error" if any(s.get("fail") for s in case["steps"]) else "ok"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cases", type=int, default=20)
    p.add_argument("--spec", help="a JSON list of cases (as random_case makes them)")
    args = p.parse_args(argv)
    if args.spec:
        cases = json.loads(args.spec)
    else:
        rnd = random.Random(args.seed)
        cases = [random_case(rnd) for _ in range(args.cases)]
    run_cases(cases, run_case, TIMEOUT * 3 + 10)


if __name__ == "__main__":
    main()
