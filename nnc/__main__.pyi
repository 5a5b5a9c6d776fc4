"""``python -m nnc COMMAND ...`` (nnc/__main__.py): command-line tools."""

import argparse
from collections.abc import Sequence

def make_parser() -> argparse.ArgumentParser: ...
def main(argv: Sequence[str] | None = None) -> int: ...
