"""Re-registration rules of register_command and register_backend (docs/custom_commands.md):
the same registration again returns the existing entry, a different one raises unless
replace=True, and built-in commands (and their CPU_REF) are never replaced."""

import uuid

import numpy as np
import pytest

import nnc


def _name(prefix):
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def _check(cmd, inputs, outputs):
    if len(inputs) != 1 or len(outputs) != 1:
        raise nnc.CommandError(f"{cmd.name} takes 1 input and 1 output")


def _normalize(params):
    return {"k": float(params.get("k", 1.0))}


def _scale(cmd, inputs, outputs):
    outputs[0][...] = inputs[0] * cmd.params["k"]


def test_same_attributes_return_the_existing_command():
    name = _name("REG_SAME")
    info = nnc.register_command(name, inplace="allow", check=_check, normalize=_normalize)
    again = nnc.register_command(name, inplace="allow", check=_check, normalize=_normalize)
    assert again is info and nnc.commands().count(name) == 1
    bare = _name("REG_BARE")
    assert nnc.register_command(bare) is nnc.register_command(bare)


@pytest.mark.parametrize("change", [
    {"inplace": "none"}, {"check": None}, {"normalize": None},
    {"check": lambda c, i, o: None}, {"normalize": lambda p: p},
])
def test_different_attributes_raise_unless_replace(change):
    name = _name("REG_DIFF")
    attrs = {"inplace": "allow", "check": _check, "normalize": _normalize}
    info = nnc.register_command(name, **attrs)
    nnc.register_backend(name, "CPU_REF", _scale)
    (what,) = change
    with pytest.raises(nnc.CommandError, match=f"already registered with another {what}.*"
                                               "replace=True"):
        nnc.register_command(name, **{**attrs, **change})
    assert (info.inplace, info.check, info.normalize) == (attrs["inplace"], attrs["check"],
                                                          attrs["normalize"])
    replaced = nnc.register_command(name, **{**attrs, **change}, replace=True)
    assert replaced is info
    if what == "inplace":
        assert info.inplace == "none"
    else:
        assert getattr(info, what) is change[what]
    assert nnc.backends(name) == ["CPU_REF"]        # backends are kept


def test_replace_changes_the_semantics_of_existing_cmds():
    name = _name("REG_REPLACE")
    nnc.register_command(name, check=_check, normalize=_normalize)
    nnc.register_backend(name, "CPU_REF", _scale)
    cmd = nnc.Cmd(name, k=2.0)
    x = np.arange(3.0)
    y = np.zeros(3)
    nnc.cmd_exec(cmd, [x], [y])
    assert y.tolist() == [0.0, 2.0, 4.0]

    def strict(cmd, inputs, outputs):
        raise nnc.CommandError("the new check refuses everything")

    nnc.register_command(name, check=strict, normalize=_normalize, replace=True)
    with pytest.raises(nnc.CommandError, match="refuses everything"):
        nnc.cmd_exec(cmd, [x], [y])


@pytest.mark.parametrize("builtin", ["GEMM", "EWSUM", "CUSTOM", "NOOP", "SET"])
def test_builtin_commands_cannot_be_replaced(builtin):
    info = nnc.command_info(builtin)
    assert info.builtin
    before = (info.inplace, info.check, info.normalize)
    for replace in (False, True):
        with pytest.raises(nnc.CommandError, match=f"{builtin} is a built-in command"):
            nnc.register_command(builtin, inplace="enforce", replace=replace)
    # The same attributes are still the same command (registering is idempotent).
    assert nnc.register_command(builtin, inplace=info.inplace, check=info.check,
                                normalize=info.normalize) is info
    assert (info.inplace, info.check, info.normalize) == before


def test_user_commands_are_not_builtin():
    name = _name("REG_USER")
    assert not nnc.register_command(name).builtin


def test_same_backend_again_returns_it():
    name = _name("REG_BACKEND")
    nnc.register_command(name, check=_check, normalize=_normalize)
    b = nnc.register_backend(name, "CPU_REF", _scale, datatypes=["float32"])
    assert nnc.register_backend(name, "CPU_REF", _scale, datatypes=["float32"]) is b
    # priority None and the name's default priority are the same registration
    assert nnc.register_backend(name, "CPU_REF", _scale, datatypes=["float32"],
                                priority=10) is b
    assert nnc.backends(name) == ["CPU_REF"]


@pytest.mark.parametrize("change", [
    {"fn": lambda c, i, o: None}, {"datatypes": ["float64"]}, {"contiguous": True},
    {"accept": lambda c, i, o: True}, {"priority": 99}, {"device": "any"},
])
def test_a_different_backend_raises_unless_replace(change):
    name = _name("REG_BACKEND_DIFF")
    nnc.register_command(name, check=_check, normalize=_normalize)
    args = {"fn": _scale, "datatypes": ["float32"]}
    b = nnc.register_backend(name, "FAST", **args)
    with pytest.raises(nnc.CommandError, match="already has a backend 'FAST'.*replace=True"):
        nnc.register_backend(name, "FAST", **{**args, **change})
    assert nnc.command_info(name).backends == [b]
    new = nnc.register_backend(name, "FAST", **{**args, **change}, replace=True)
    assert new is not b and nnc.command_info(name).backends == [new]


def test_builtin_backends():
    x = np.arange(4, dtype=np.float32)

    def fake_ref(cmd, inputs, outputs):
        outputs[0][...] = 0

    for replace in (False, True):
        with pytest.raises(nnc.CommandError, match="CPU_REF of built-in command SCALAR_MUL "
                                                   "defines its semantics"):
            nnc.register_backend("SCALAR_MUL", "CPU_REF", fake_ref, replace=replace)
    with pytest.raises(nnc.CommandError, match="already has a backend 'CPU_OPT'"):
        nnc.register_backend("SCALAR_MUL", "CPU_OPT", fake_ref)
    y = np.zeros(4, np.float32)
    nnc.cmd_exec(nnc.Cmd("SCALAR_MUL", a=2.0), [x], [y])
    assert y.tolist() == [0.0, 2.0, 4.0, 6.0]
    # A new backend of a built-in command is fine (a user's faster implementation). The
    # registry cannot remove one, so SCALAR_MUL's list is put back afterwards: the test modules
    # that run later in this process see the built-in registry.
    info = nnc.command_info("SCALAR_MUL")
    builtin = list(info.backends)
    name = _name("MINE")
    try:
        nnc.register_backend("SCALAR_MUL", name, _scale_a, priority=1)
        assert name in nnc.backends("SCALAR_MUL")
        nnc.cmd_exec(nnc.Cmd("SCALAR_MUL", backend=name, a=3.0), [x], [y])
        assert y.tolist() == [0.0, 3.0, 6.0, 9.0]
    finally:
        info.backends[:] = builtin
    assert nnc.backends("SCALAR_MUL") == [b.name for b in builtin]


def _scale_a(cmd, inputs, outputs):
    outputs[0][...] = inputs[0] * cmd.params["a"]


def test_registering_the_builtins_again_changes_nothing():
    """The same registrations (Python and C backends) return the existing entries."""
    from nnc.cmd import basic
    from nnc.cmd.elementwise import cpu_opt

    before = {name: list(nnc.command_info(name).backends) for name in nnc.commands()}
    basic.register()
    cpu_opt.register()
    after = {name: list(nnc.command_info(name).backends) for name in nnc.commands()}
    assert all(a is b for name in before for a, b in zip(before[name], after[name]))
    assert {n: len(v) for n, v in before.items()} == {n: len(v) for n, v in after.items()}
