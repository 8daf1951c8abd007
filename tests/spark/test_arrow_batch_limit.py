"""Arrow batches to Python workers are cut by rows only, unless the deployment set a byte
limit: Spark measures a batch after every row it adds whenever a byte limit is set."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from featureflow.spark.session import ARROW_MAX_BYTES_PER_BATCH, NO_BYTE_LIMIT

pytestmark = pytest.mark.integration

EXPLICIT_LIMIT = """
from featureflow.spark.session import ARROW_MAX_BYTES_PER_BATCH, build_session
spark = build_session("arrow-limit-test", master="local[1]",
                      extra_conf={ARROW_MAX_BYTES_PER_BATCH: "1048576"})
print("LIMIT", spark.conf.get(ARROW_MAX_BYTES_PER_BATCH), flush=True)
spark.stop()
"""


def test_a_session_of_featureflow_has_no_byte_limit(spark: Any) -> None:
    assert spark.conf.get(ARROW_MAX_BYTES_PER_BATCH) == NO_BYTE_LIMIT
    # and Python still gets every row (batches of maxRecordsPerBatch rows)
    rows = spark.range(0, 25_000, numPartitions=1).mapInArrow(
        lambda batches: (batch for batch in batches), "id long"
    )
    assert rows.count() == 25_000


def test_a_byte_limit_in_the_spark_configuration_is_kept() -> None:
    out = subprocess.run(
        [sys.executable, "-c", EXPLICIT_LIMIT], capture_output=True, text=True, timeout=300,
        check=True,
    )  # fmt: skip
    assert "LIMIT 1048576" in out.stdout.splitlines(), out.stderr[-2000:]
