"""The pipeline stress mix: random chains of function and graph stages on nnc.pipeline's local
executor (and on Ray, when it is installed and asked for), with stages failing on random inputs
and random timeouts, each checked against a serial computation.

A *case* is plain JSON (``random_case``): 1 to 4 stages, each a function or a one-node graph
(a CUSTOM command); 1 to 12 inputs at ``depth`` 1 to 4; failures of a stage on an input (an
Exception, a KeyboardInterrupt / SystemExit / GeneratorExit, or an exception whose repr and str
raise); ``run`` and ``get_output`` with short timeouts (a ``full`` error or a None is retried);
and sometimes ``close()`` with outputs not taken. Outputs must come in input order with the
serial result, a failed input must raise a PipelineError naming the first stage that failed on
it (later inputs flow), and ``close()`` must return.

Each input carries its number in its last element, which every stage passes on, so a stage
knows which input it runs.

    python tests/stress/_stress_pipeline.py --seed 7 --cases 20 [--ray-cases 2]
    python tests/stress/_stress_pipeline.py --spec '[{...}, ...]'

``--ray-cases K`` also runs K cases (drawn after the local ones) on ``executor="ray"``, in one
local Ray cluster for the child, with function stages and Exceptions only as failures. Output
and exit status as tests/stress/_stress_mix.py's (its ``run_cases``), which benchmarks/soak.py
reads.
"""

import argparse
import json
import random

import numpy as np
from _stress_mix import CaseFailed, InjectedError, UnprintableError, run_cases

import nnc
from nnc import pipeline

TIMEOUT = 10.0                  # seconds a wait without a timeout of its own may take
WIDTH = 4                       # every array is WIDTH float32; the last element is the tag
FAILS = ("exc", "base", "repr")


def random_case(rnd, ray=False):
    """One case as JSON-able data, drawn from ``rnd``; ``ray``: a small one for Ray."""
    n_stages = rnd.randint(1, 2 if ray else 4)
    n_inputs = rnd.randint(1, 4 if ray else 12)
    fails = {}
    for k in range(n_inputs):
        if rnd.random() < 0.2:
            fails[str(k)] = [rnd.randrange(n_stages), "exc" if ray else rnd.choice(FAILS)]
    return {
        "executor": "ray" if ray else "local",
        # A graph stage's CUSTOM function would have to be importable by Ray's workers.
        "stages": ["fn" if ray else rnd.choice(("fn", "graph")) for _ in range(n_stages)],
        "inputs": n_inputs,
        "depth": rnd.randint(1, 4),
        "fails": fails,                 # input number -> [stage, kind]
        "run_timeout": rnd.choice([None, 0.001, 0.01]),
        "get_timeout": rnd.choice([None, 0, 0.001]),
        "close_early": rnd.random() < 0.2,
        "data_seed": rnd.randrange(2 ** 31),
    }


def _step(case, s, x):
    """Stage ``s`` on array ``x``: its result, or the injected failure."""
    k = int(x[-1])
    fail = case["fails"].get(str(k))
    if fail is not None and fail[0] == s:
        if fail[1] == "exc":
            raise InjectedError(f"injected failure of stage {s} on input {k}")
        if fail[1] == "repr":
            raise UnprintableError()
        raise random.Random(k).choice((KeyboardInterrupt, SystemExit, GeneratorExit))(k)
    y = x * np.float32(2) + np.float32(s + 1)
    y[-1] = x[-1]
    return y


def _stage(case, s):
    spec = ("float32", (WIDTH,))
    name = f"stage{s}"
    if case["stages"][s] == "fn":
        return pipeline.Module.function(lambda x: _step(case, s, x), inputs={"x": spec},
                                        outputs=[spec], name=name)
    g = nnc.Graph()
    x = nnc.Tensor.zeros((WIDTH,), dtype="float32")
    y = nnc.Tensor.zeros((WIDTH,), dtype="float32")

    def fx(inputs, outputs):
        outputs[0][...] = _step(case, s, inputs[0])

    g.exec(nnc.Cmd.custom(fx), [x], [y], name=f"custom{s}")
    return pipeline.Module(g, inputs={"x": x}, outputs=[y], name=name)


def _inputs(case):
    data = np.random.default_rng(case["data_seed"])
    arrays = []
    for k in range(case["inputs"]):
        a = data.uniform(-1, 1, WIDTH).astype(np.float32)
        a[-1] = k
        arrays.append(a)
    return arrays


def _expected(case, x):
    """The serial result of input ``x``: its output, or the stage that fails on it."""
    for s in range(len(case["stages"])):
        try:
            x = _step(case, s, x)
        except BaseException:  # noqa: BLE001 - the injected failure, whatever its kind
            return None, f"stage{s}"
    return x, None


def run_case(case):
    """Run one case; return "ok" or "error" (an input failed, as expected); raise CaseFailed
    on anything else."""
    cfg = pipeline.PipelineConfig()
    mods = [_stage(case, s) for s in range(len(case["stages"]))]
    cfg.inputs["data"] = (mods[0], "x")
    for a, b in zip(mods, mods[1:]):
        cfg.connect(a, 0, b, "x")
    cfg.outputs.append((mods[-1], 0))
    options = {"start_timeout": 60} if case["executor"] == "ray" else {}
    pm = pipeline.build(cfg, depth=case["depth"], executor=case["executor"], **options)
    inputs = _inputs(case)
    taken = []                          # (input number, outputs or the PipelineError)

    def take(timeout):
        try:
            out = pm.get_output(timeout=timeout)
        except pipeline.PipelineError as e:
            taken.append((len(taken), e))
            return True
        if out is None:
            return False
        taken.append((len(taken), out))
        return True

    def take_patiently():
        if not take(case["get_timeout"]) and not take(TIMEOUT):
            raise CaseFailed(f"input #{len(taken)}: no output after {TIMEOUT} s "
                             f"({pm.num_executing()} in flight)")

    try:
        for k, a in enumerate(inputs):
            pm.set_input("data", a)
            try:
                pm.run(timeout=case["run_timeout"])
            except pipeline.PipelineError as e:
                if "full" not in str(e):
                    raise CaseFailed(f"run() of input #{k} raised {e!r}") from e
                take_patiently()
                pm.run(timeout=TIMEOUT)
        wanted = len(inputs) // 2 if case["close_early"] else len(inputs)
        while len(taken) < wanted:
            take_patiently()
    finally:
        try:
            pm.close(timeout=TIMEOUT)
        except pipeline.PipelineError as e:
            raise CaseFailed(f"close() did not return: {e}") from e
    failed = False
    for k, got in taken:
        want, stage = _expected(case, inputs[k])
        if stage is not None:
            failed = True
            if not isinstance(got, pipeline.PipelineError):
                raise CaseFailed(f"input #{k}: outputs, but {stage} fails on it")
            if f"stage {stage} failed on input #{k}" not in str(got) or got.__cause__ is None:
                raise CaseFailed(f"input #{k}: unclear error {str(got)[:200]!r} for {stage}")
        elif isinstance(got, pipeline.PipelineError):
            raise CaseFailed(f"input #{k}: raised {str(got)[:200]!r}, expected outputs")
        elif len(got) != 1 or not np.array_equal(got[0], want):
            raise CaseFailed(f"input #{k}: outputs {got} (out of order or wrong), expected "
                             f"{want}")
    return "error" if failed else "ok"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cases", type=int, default=20)
    p.add_argument("--ray-cases", type=int, default=0,
                   help="cases run on executor='ray' after the local ones (one cluster)")
    p.add_argument("--spec", help="a JSON list of cases (as random_case makes them)")
    args = p.parse_args(argv)
    if args.spec:
        cases = json.loads(args.spec)
    else:
        rnd = random.Random(args.seed)
        cases = [random_case(rnd) for _ in range(args.cases)]
        cases += [random_case(rnd, ray=True) for _ in range(args.ray_cases)]
    if any(c["executor"] == "ray" for c in cases):
        import ray

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    # A Ray cluster takes a while to start: a Ray case's limit allows for it.
    run_cases(cases, run_case, TIMEOUT * 3 + (60 if args.ray_cases else 10))


if __name__ == "__main__":
    main()
