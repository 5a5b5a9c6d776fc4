"""``python -m nnc COMMAND ...``: command-line tools.

Commands:
  demo   build Inception-V3 as one concrete graph, run and profile it (see nnc/demo.py)

With no command it prints this usage and exits 0; an unknown command exits 2 with a message.
"""

from __future__ import annotations

import argparse
import sys


def make_parser():
    from nnc import demo

    parser = argparse.ArgumentParser(
        prog="python -m nnc",
        description="nnc command-line tools.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo.add_arguments(sub.add_parser(
        "demo",
        help="run Inception-V3 as one nnc graph: timing, profile, critical-path bound",
        description=demo.__doc__.splitlines()[0],
    ))
    return parser


def main(argv=None):
    parser = make_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
