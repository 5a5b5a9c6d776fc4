"""ONNX's node tests (its operator conformance tests, generated from the installed onnx package
by benchmarks/onnx_conformance.py) for the operators nnc claims: every test of each must pass or
be refused with an ``UnsupportedError``/``OnnxError``, never give a wrong result or raise
anything else, at every CPU level the machine has; each of them passes at least one. The tests
run in child processes (a crash costs one test, reported as an ERROR); the whole set is
``python -m benchmarks.onnx_conformance``."""

import numpy as np
import pytest

pytest.importorskip("onnx", reason="nnc.onnx tests need onnx (pip install -e '.[test]')")

from benchmarks import onnx_conformance as conf  # noqa: E402
from nnc.base.isa import supported_isas  # noqa: E402

# Operators docs/onnx.md lists as supported, each with ONNX node tests of its own.
CLAIMED = ("Relu", "Add", "Sub", "Mul", "Div", "Pow", "Conv", "MaxPool", "AveragePool",
           "GlobalAveragePool", "GlobalMaxPool", "Softmax", "Gemm", "MatMul", "Sigmoid", "Tanh",
           "Sqrt", "Exp", "Log", "Abs", "Neg", "Erf", "HardSwish", "HardSigmoid", "Gelu",
           "Transpose", "Reshape", "Flatten", "Concat", "Clip", "BatchNormalization", "LRN",
           "Slice", "Split", "Squeeze", "Unsqueeze", "Min", "Max", "Sum", "Mean", "ReduceSum",
           "ReduceMean", "ReduceMax", "Dropout", "Identity", "LayerNormalization",
           "GroupNormalization", "InstanceNormalization", "Resize", "Pad", "Gather", "Cast",
           "ArgMax", "ArgMin", "ReduceMin", "ReduceProd", "ReduceL2", "Upsample", "LeakyRelu",
           "Elu", "Selu", "Celu", "ThresholdedRelu", "Softplus", "Softsign", "Mish", "Swish",
           "Reciprocal", "Floor", "Ceil", "Round", "Sign", "Sin", "Cos", "Tan", "Asin", "Acos",
           "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "ReduceLogSumExp", "PRelu",
           "ConvTranspose")


@pytest.fixture(scope="module")
def cases():
    return [c for c in conf.load_cases() if c["op"] in CLAIMED]


@pytest.fixture(scope="module", params=supported_isas())
def results(request, cases):
    return conf.run_guarded([c["name"] for c in cases], timeout=60.0, isa=request.param)


def test_every_claimed_operator_has_node_tests(cases):
    assert {c["op"] for c in cases} == set(CLAIMED)


@pytest.mark.parametrize("op", CLAIMED)
def test_node_tests_pass_or_are_refused(op, cases, results):
    mine = [c["name"] for c in cases if c["op"] == op]
    bad = {n: results[n] for n in mine if results[n][0] not in ("pass", "refused")}
    assert not bad, f"{op}: {bad}"
    assert any(results[n][0] == "pass" for n in mine), f"{op}: no test passes"


def test_a_wrong_output_and_a_harness_error_are_reported(cases):
    # The comparison can fail: the same model against a changed expected output.
    case = dict(next(c for c in cases if c["name"] == "test_relu"))
    assert conf.run_case(case) == ("pass", "")
    case["outputs"] = [case["outputs"][0] + np.float32(0.5)]
    status, detail = conf.run_case(case)
    assert status == "WRONG" and "differ" in detail
    case["outputs"] = [case["outputs"][0][:1]]
    assert conf.run_case(case)[0] == "WRONG"


def test_a_refusal_names_the_reason(cases):
    case = next(c for c in cases if c["name"] == "test_maxpool_2d_dilations")
    status, detail = conf.run_case(case)
    assert status == "refused" and "dilations" in detail


def test_the_docs_table_is_written_between_its_markers(tmp_path):
    doc = tmp_path / "onnx.md"
    doc.write_text(f"intro\n{conf.TABLE_START}\nold\n{conf.TABLE_END}\nafter\n")
    row = {"op": "Relu", "tests": 2, "pass": 1, "refused": 1, "WRONG": 0, "ERROR": 0,
           "reason": "a|b"}
    report = {"onnx": "1.0", "commit": "abc", "date": "2026-01-01T00:00:00",
              "ops": [row], "totals": {"tests": 2, "pass": 1, "refused": 1, "WRONG": 0,
                                       "ERROR": 0, "ops": 1, "ops_passing": 1,
                                       "ops_passing_direct": 1}}
    conf.write_docs(report, doc)
    text = doc.read_text()
    assert text.startswith(f"intro\n{conf.TABLE_START}") and text.endswith(
        f"{conf.TABLE_END}\nafter\n")
    assert "old" not in text and "| Relu | 2 | 1 | 1 | 0 | 0 | a/b |" in text
