"""``featureflow training-set``: point-in-time features for an entity file, from raw events."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from featureflow.errors import EventError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "training-set",
        help="features as of each entity row's timestamp (no event after it), from raw events",
    )
    parser.add_argument("--repo", required=True, help="Feast repo (directory)")
    parser.add_argument(
        "--entities", required=True,
        help="Parquet or CSV: the join key and event_timestamp (UTC unless zoned), plus labels",
    )  # fmt: skip
    parser.add_argument(
        "--feature", action="append", required=True, metavar="VIEW:FEATURE",
        help="feature to compute (repeatable), e.g. user_txn_stats:sum_amount_3600s",
    )  # fmt: skip
    parser.add_argument("--events", help="Parquet raw events (default: each view's batch source)")
    parser.add_argument("--output", required=True, help="Parquet file to write")
    parser.add_argument("--timestamp-column", default="event_timestamp", help="of the entity file")
    parser.set_defaults(handler=run)


def _read(path: str, timestamp_column: str) -> Any:
    import pandas as pd

    if path.endswith(".csv"):
        frame = pd.read_csv(path)
        if timestamp_column not in frame.columns:
            raise EventError(timestamp_column, f"missing from {path} ({list(frame.columns)})")
        frame[timestamp_column] = pd.to_datetime(frame[timestamp_column], utc=True)
        return frame
    return pd.read_parquet(path)


def run(args: argparse.Namespace) -> int:
    import pyarrow.parquet as pq

    from featureflow.training import training_set

    entities = _read(args.entities, args.timestamp_column)
    events = pq.read_table(args.events) if args.events else None
    result = training_set(
        entities, args.feature, repo=args.repo, events=events,
        timestamp_column=args.timestamp_column,
    )  # fmt: skip
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    result.to_parquet(args.output, index=False)
    print(f"wrote {len(result)} rows x {len(args.feature)} features to {args.output}")
    return 0
