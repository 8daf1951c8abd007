"""The ``featureflow`` command.

Each sub-command lives in its own module of this package, exposing
``register(subparsers)``, which adds its parser and sets ``handler`` to a
function ``(argparse.Namespace) -> int`` (the exit status). Imports of heavy
libraries (Spark, Feast) happen inside the handlers so that ``--help`` is fast.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from typing import Any

from featureflow import __version__
from featureflow.cli.failures import CommandParser, report_failure

_FEAST_EXPERIMENTAL = "Stream feature views are experimental"

# Sub-command modules, in the order ``--help`` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "doctor",
    "kafka",
    "jars",
    "produce",
    "online",
    "schema",
    "validate",
    "apply",
    "training_set",
    "status",
)


def quiet_third_party_logs(*, verbose: bool = False) -> None:
    """Keep Feast's per-call INFO lines and its "experimental" warning out of user output."""
    import warnings

    if not verbose:
        logging.getLogger("feast").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=_FEAST_EXPERIMENTAL)
    # Feast's modules put `simplefilter("once", RuntimeWarning)` first when they are
    # imported (after this), which would show the warning anyway: drop it when shown.
    show = warnings.showwarning
    if not getattr(show, "featureflow_quiet", False):

        def quiet_show(message: Warning | str, *args: Any, **kwargs: Any) -> None:
            if not str(message).startswith(_FEAST_EXPERIMENTAL):
                show(message, *args, **kwargs)

        quiet_show.featureflow_quiet = True  # type: ignore[attr-defined]
        warnings.showwarning = quiet_show


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, with every sub-command registered."""
    parser = CommandParser(
        prog="featureflow",
        description="Real-time feature engineering: Kafka -> Spark -> Mojo kernels -> Feast.",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true",
        help="log at DEBUG level, and show the traceback of a failure",
    )  # fmt: skip
    parser.add_argument("--version", action="version", version=f"featureflow {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"featureflow.cli.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    quiet_third_party_logs(verbose=args.verbose)
    from featureflow.secrets import install_log_redaction

    install_log_redaction()
    try:
        status: int = args.handler(args)
    except (Exception, KeyboardInterrupt) as error:
        # featureflow's errors and the third-party failures a user meets (an unreachable
        # broker or store, an unknown view): one line that says what to do.
        return report_failure(args.command, error, verbose=args.verbose)
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
