"""``featureflow schema``: write and locate the ``.mojo`` feature schemas.

``schema init`` writes ``<schemas>/<view>.mojo`` from the view's current Feast
definition (every stream feature view when none is named); from then on the
file is the reviewed contract. ``schema include-path`` prints the folder to
pass to ``mojo -I`` so the schema files compile on their own::

    mojo doc -I "$(featureflow schema include-path)" schemas/user_txn_stats.mojo
"""

from __future__ import annotations

import argparse
import sys

from featureflow.cli.validate import EXIT_CANNOT_CHECK, add_gate_arguments


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``schema`` sub-command and its ``init`` / ``include-path`` actions."""
    parser = subparsers.add_parser(
        "schema",
        help="write .mojo feature schemas from the Feast repo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    init = actions.add_parser("init", help="write <schemas>/<view>.mojo from Feast")
    add_gate_arguments(init)
    init.add_argument(
        "views",
        nargs="*",
        metavar="VIEW",
        help="feature views (default: every stream feature view)",
    )
    init.add_argument("--force", action="store_true", help="overwrite existing schema files")
    init.set_defaults(handler=run_init)
    include = actions.add_parser("include-path", help="print the folder to pass to mojo -I")
    include.set_defaults(handler=run_include_path)


def run_init(args: argparse.Namespace) -> int:
    """Write the schema files; return the exit status."""
    from featureflow.errors import SchemaError
    from featureflow.schema import init_schemas

    try:
        written = init_schemas(args.repo, args.schemas, args.views, force=args.force)
    except SchemaError as error:
        print(f"featureflow schema init: error: {error}", file=sys.stderr)
        return EXIT_CANNOT_CHECK
    for path in written:
        print(f"wrote {path}")
    if not written:
        print("no stream feature views: nothing to write", file=sys.stderr)
    return 0


def run_include_path(args: argparse.Namespace) -> int:
    """Print the marker package's parent folder."""
    from featureflow.schema.toolchain import include_path

    print(include_path())
    return 0
