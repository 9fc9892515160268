"""The `gridpfn` command line: one entry point, sub-commands contributed by each package.

Each package owns its commands in a module with a `register(subparsers)` function (gridsim/cli.py,
models/cli.py, service/commands/serve.py and batch.py), so this file only wires them together and
stays small.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from service import logs

# Modules that contribute sub-commands, in the order they appear in --help.
COMMAND_MODULES = ("gridsim.cli", "models.cli", "service.commands.serve", "service.commands.batch")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gridpfn", description="GridPFN: DVA-PFN power-flow surrogates")
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:  # that package has no commands yet
                continue
            raise
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logs.configure(args.log_level)
    try:
        result = args.func(args)
    except ValueError as exc:
        parser.exit(2, f"gridpfn {args.command}: error: {exc}\n")
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
