"""``featureflow apply``: run the schema gate, then apply the repo as ``feast apply`` does.

On any ❌ (or ⚠️ with ``--strict``) it prints the report and exits 1 without
touching the registry: an existing registry stays byte-for-byte the same and
a missing one is not created. Exit status 2 when the checks cannot run.
"""

from __future__ import annotations

import argparse
import sys

from featureflow.cli.validate import EXIT_CANNOT_CHECK, add_gate_arguments, gate_report


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``apply`` sub-command."""
    parser = subparsers.add_parser(
        "apply",
        help="check the schemas, then apply the Feast repo (like feast apply)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_gate_arguments(parser)
    parser.add_argument("--strict", action="store_true", help="refuse on ⚠️ too")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Gate, then apply; return the exit status."""
    from featureflow.schema import apply_repo

    report = gate_report(args, "apply")
    if report is None:
        return EXIT_CANNOT_CHECK
    status = report.exit_status(strict=args.strict)
    if status != 0:
        print(report.to_table(only_problems=True))
        print(
            f"featureflow apply: refused: the schema gate failed ({report.summary()}); "
            "the registry was not touched. Fix the rows above, or run `featureflow "
            "validate` for every check.",
            file=sys.stderr,
        )
        return status
    print(f"schema gate: {report.summary()}")
    apply_repo(args.repo)
    return 0
