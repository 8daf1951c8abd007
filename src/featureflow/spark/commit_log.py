"""What a streaming query's checkpoint says about its micro-batches (Spark's own logs).

Spark writes ``<query checkpoint>/offsets/<id>`` before it runs micro-batch ``id``
(its write-ahead log) and ``<query checkpoint>/commits/<id>`` after the batch
succeeded. A batch with offsets but no commit is re-run, from the same offsets,
when the query starts again. Names starting with ``.`` are Spark's checksums and
temporary files. Any filesystem pyarrow reaches (local, HDFS, S3).
"""

from __future__ import annotations

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
