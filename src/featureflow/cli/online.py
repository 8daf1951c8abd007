"""``featureflow online show``: read features back through Feast's ``get_online_features``."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("online", help="read online features through Feast")
    actions = parser.add_subparsers(dest="action", required=True)
    show = actions.add_parser("show", help="print a view's online features for some entities")
    show.add_argument("--repo", required=True, help="Feast repo directory")
    show.add_argument("--view", required=True, help="feature view name")
    show.add_argument("--keys", type=int, nargs="+", required=True, help="entity key values")
    show.add_argument("--features", nargs="*", help="feature names (default: all of the view)")
    show.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from featureflow.errors import RepoError
    from featureflow.repo import load_store, stream_view_specs

    store = load_store(args.repo)
    stream_view_specs(store, [args.view])  # a RepoError naming the views when it is unknown
    view = store.get_stream_feature_view(args.view)
    join_key = view.entity_columns[0].name
    features = [f.name for f in view.features if f.name != join_key]
    unknown = sorted(set(args.features or ()) - set(features))
    if unknown:
        msg = f"view {args.view!r} has no feature {unknown}; it has {features}"
        raise RepoError(msg)
    names = args.features or features
    response = store.get_online_features(
        features=[f"{args.view}:{name}" for name in names],
        entity_rows=[{join_key: key} for key in args.keys],
    ).to_dict()
    table = Table(title=f"online features of {args.view} (via Feast get_online_features)")
    table.add_column(join_key, justify="right")
    for name in names:
        table.add_column(name, justify="right")
    for row, key in enumerate(response[join_key]):
        cells = [str(key)]
        for name in names:
            value = response[name][row]
            cells.append(
                "-" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)
            )
        table.add_row(*cells)
    # Wide enough that no feature name is cut, also when stdout is not a terminal.
    width = sum(max(len(name), 10) + 3 for name in [join_key, *names]) + 1
    Console(width=max(80, width)).print(table)
    return 0
