"""``featureflow validate``: check the ``.mojo`` schemas against the Feast repo.

Exit status: 0 when every check passes, 1 on any ❌ (and on any ⚠️ with
``--strict``), 2 when the checks cannot run (bad arguments, a schema file
that does not parse — the message names file and line —, an unreadable repo).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from featureflow.schema import Report

EXIT_CANNOT_CHECK = 2


def add_gate_arguments(parser: argparse.ArgumentParser) -> None:
    """``--repo`` and ``--schemas``, shared by validate, apply and schema init."""
    parser.add_argument(
        "--repo", type=Path, required=True, help="Feast repo folder (holds feature_store.yaml)"
    )
    parser.add_argument(
        "--schemas", type=Path, required=True, help="folder of <feature_view>.mojo schema files"
    )


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``validate`` sub-command."""
    parser = subparsers.add_parser(
        "validate",
        help="check the .mojo feature schemas against the Feast repo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_gate_arguments(parser)
    parser.add_argument(
        "--format",
        choices=("table", "json"),
        default="table",
        help="report format (default: table)",
    )
    parser.add_argument("--strict", action="store_true", help="fail on ⚠️ too")
    parser.set_defaults(handler=run)


def gate_report(args: argparse.Namespace, command: str) -> Report | None:
    """The gate's report for ``--repo``/``--schemas``; None (error printed) when it can't run."""
    from featureflow.errors import SchemaError
    from featureflow.schema import validate

    try:
        return validate(args.repo, args.schemas)
    except SchemaError as error:
        print(f"featureflow {command}: error: {error}", file=sys.stderr)
        return None


def run(args: argparse.Namespace) -> int:
    """Print the report; return the exit status."""
    report = gate_report(args, "validate")
    if report is None:
        return EXIT_CANNOT_CHECK
    print(report.to_json() if args.format == "json" else report.to_table())
    return report.exit_status(strict=args.strict)
