"""The soak's ONNX child: ``benchmarks.onnx_fuzz.fuzz(cases, seed)`` in a process of its own.

    python -m benchmarks._soak_onnx --seed S --cases C [--timeout T]

It prints a JSON line per failed case and a summary line, as the stress mixes of tests/ do
(tests/stress/_stress_mix.py, ``run_cases``), which benchmarks/soak.py reads. One case of the seed
runs first as a warm-up (imports, the first load), so that the RSS measured after it and at the end
shows growth, not start-up. A hang prints every thread's stack and exits after ``--timeout`` seconds
(faulthandler), which the soak counts as a hang.
"""

import argparse
import faulthandler
import json
import os
import sys

from benchmarks import onnx_fuzz
from benchmarks.soak import proc_status


def _rss_mib():
    status = proc_status(os.getpid())
    return None if status is None else round(status[0], 1)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cases", type=int, default=500)
    p.add_argument("--timeout", type=float, default=290,
                   help="seconds before the child counts as hung (default 290)")
    args = p.parse_args(argv)
    faulthandler.enable(all_threads=True)
    faulthandler.dump_traceback_later(args.timeout, exit=True)
    onnx_fuzz.fuzz(1, args.seed)        # the warm-up; the run below draws this case again
    rss = [_rss_mib()]
    result = onnx_fuzz.fuzz(args.cases, args.seed)
    faulthandler.cancel_dump_traceback_later()
    rss.append(_rss_mib())
    for f in result["failures"]:
        print(json.dumps({"case": f.get("case"), "outcome": "failed", "why": str(f["error"]),
                          "spec": {"seed": f.get("seed"), "case": f.get("case")}}), flush=True)
    summary = {"runs": result["cases"] - len(result["failures"]), "errors": result["nnc_errors"],
               "failed": len(result["failures"]), "loaded": result["loaded"], "rss_mib": rss}
    print(json.dumps(summary), flush=True)
    sys.exit(1 if result["failures"] else 0)


if __name__ == "__main__":
    main()
