"""The ``gtsamples`` command line: one table of commands.

:data:`COMMANDS` lists every command (:class:`~gtsamples.cli.common.Command`
rows from :mod:`.artifact` and, under ``region``, from :mod:`.region`);
:func:`build_parser` turns the table into argparse parsers.  The library
layers never import this package.

Exit codes: 0 success (for ``validate``: valid), 1 the artifact breaks a rule
(or cannot be read), 2 usage error (a bad argument, or a path that is missing,
of the wrong kind or cannot be written: one ``error:`` line on stderr), 130
interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import sys

from ..errors import SamplesError
from . import artifact as _artifact
from . import region as _region
from .common import Command, add_selection_args, os_message, time_range

__all__ = ["COMMANDS", "Command", "add_selection_args", "build_parser", "main", "time_range"]

COMMANDS: tuple[Command, ...] = _artifact.COMMANDS + (
    Command("region", "regions: SSTs plus the artifacts covering them", None, None, _region.COMMANDS),
)


def _add(subparsers, commands) -> None:
    for c in commands:
        sp = subparsers.add_parser(c.name, help=c.help)
        if c.subcommands:
            _add(sp.add_subparsers(dest=f"{c.name}_command", required=True), c.subcommands)
            continue
        c.arguments(sp)
        sp.set_defaults(func=c.run)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gtsamples", description="Read, write and check Mito columnar-samples artifacts.")
    _add(p.add_subparsers(dest="command", required=True), COMMANDS)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse exits 2 on usage errors
        return int(e.code or 0)
    try:
        return int(args.func(args) or 0)
    except SamplesError as e:  # StorageError (an OSError) included
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as e:  # a bad argument, or a path that is missing, a directory, unwritable...
        print(f"error: {os_message(e) if isinstance(e, OSError) else e}", file=sys.stderr)
        return 2
    except ImportError as e:  # an optional package a path or option needs (fsspec's gcsfs for gcs://, ...)
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: a read's partial output is already removed
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
