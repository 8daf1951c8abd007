"""What a streaming query's checkpoint says about its micro-batches (Spark's own logs).

Spark writes ``<query checkpoint>/offsets/<id>`` before it runs micro-batch ``id``
(its write-ahead log) and ``<query checkpoint>/commits/<id>`` after the batch
succeeded. A batch with offsets but no commit is re-run, from the same offsets,
when the query starts again. Names starting with ``.`` are Spark's checksums and
temporary files. Any filesystem pyarrow reaches (local, HDFS, S3).
"""

from __future__ import annotations

import json

import pyarrow.fs as pafs

from featureflow.spark.state import filesystem_of


def _newest(filesystem: pafs.FileSystem, directory: str) -> int | None:
    found = filesystem.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
    ids = [int(info.base_name) for info in found if info.base_name.isdigit()]
    return max(ids, default=None)


def settled_batch(query_checkpoint: str) -> int | None:
    """The newest committed micro-batch when no batch awaits a re-run, else None.

    None also when the query has committed nothing yet. "Settled" means Spark
    will never run that batch again, and the next batch it runs is a new one.
    """
    filesystem, base = filesystem_of(query_checkpoint.rstrip("/"))
    committed = _newest(filesystem, f"{base}/commits")
    if committed is None:
        return None
    planned = _newest(filesystem, f"{base}/offsets")
    return committed if planned is None or planned <= committed else None


def _source_offsets(filesystem: pafs.FileSystem, path: str) -> dict[str, int] | None:
    """The end offsets of an offsets-log entry, per ``topic/partition`` (None: unreadable,
    or a source that is not Kafka's). Format: ``v1``, the batch's metadata as JSON, then
    one line per source, Kafka's ``{"topic": {"partition": offset, ...}}``."""
    try:
        with filesystem.open_input_stream(path) as stream:
            lines = stream.read().decode().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    offsets: dict[str, int] = {}
    for line in lines[2:]:
        try:
            source = json.loads(line)
        except ValueError:
            return None
        if not isinstance(source, dict):
            return None
        for topic, partitions in source.items():
            if not isinstance(partitions, dict):
                return None
            for partition, offset in partitions.items():
                if not isinstance(offset, int):
                    return None
                offsets[f"{topic}/{partition}"] = offset
    return offsets or None


def batch_records(query_checkpoint: str, batch_id: int) -> int | None:
    """How many Kafka records micro-batch ``batch_id`` reads: its end offsets minus the
    previous batch's, from Spark's offsets log (written before the batch runs, and the
    same when Spark re-runs it). None when that is unknown: the first batch (its start
    is the topic's earliest or latest offset), a previous entry missing or unreadable,
    a partition new since, or offsets that went back (a topic recreated)."""
    if batch_id <= 0:
        return None
    filesystem, base = filesystem_of(query_checkpoint.rstrip("/"))
    end = _source_offsets(filesystem, f"{base}/offsets/{batch_id}")
    start = _source_offsets(filesystem, f"{base}/offsets/{batch_id - 1}")
    if end is None or start is None or not end.keys() <= start.keys():
        return None
    records = [end[key] - start[key] for key in end]
    if any(count < 0 for count in records):
        return None
    return sum(records)
