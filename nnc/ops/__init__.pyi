"""Built-in commands (nnc/ops/): registered once, when nnc is imported. Private; this stub lets
mypy check ``import nnc`` without following the untyped registration modules."""

def register_builtins() -> None: ...
