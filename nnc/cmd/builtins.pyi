"""The built-in commands (nnc/cmd/<family>/): registered once, when nnc is imported. Private; this
stub lets mypy check ``import nnc`` without following the untyped registration modules."""

def register_builtins() -> None: ...
