"""The Spark UI listens on loopback unless asked: the rule, and the socket a real driver opens."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from featureflow.spark import session

BIN = Path(sys.executable).parent
SHOW_UI = """
import logging, sys
logging.basicConfig(level=logging.INFO)
from featureflow.spark.session import build_session
spark = build_session("ui-test", master={master!r})
print("UI", spark.sparkContext.uiWebUrl, flush=True)
if {wait}:
    sys.stdin.readline()  # the test looks at the socket meanwhile
spark.stop()
"""


@pytest.fixture
def no_jvm(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    return monkeypatch


def test_a_local_master_started_here_gets_a_loopback_ui(no_jvm: pytest.MonkeyPatch) -> None:
    assert session.ui_settings("127.0.0.1", None) == ({}, "127.0.0.1")
    assert session.ui_settings("localhost", "local[2]") == ({}, "127.0.0.1")


def test_where_spark_would_bind_every_interface_the_ui_is_off(
    no_jvm: pytest.MonkeyPatch,
) -> None:
    off = {"spark.ui.enabled": "false"}
    # A cluster master: SPARK_LOCAL_IP would also be the driver's address for executors.
    assert session.ui_settings("127.0.0.1", "spark://master:7077") == (off, None)
    # Under spark-submit the JVM already runs with its environment.
    no_jvm.setenv("PYSPARK_GATEWAY_PORT", "1")
    assert session.ui_settings("127.0.0.1", None) == (off, None)
    no_jvm.setenv("SPARK_LOCAL_IP", "10.1.2.3")
    assert session.ui_settings("127.0.0.1", None) == (off, None)


def test_a_loopback_spark_local_ip_keeps_the_ui(no_jvm: pytest.MonkeyPatch) -> None:
    no_jvm.setenv("PYSPARK_GATEWAY_PORT", "1")
    no_jvm.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    assert session.ui_settings("127.0.0.1", None) == ({}, None)


def test_asking_opens_or_closes_it(no_jvm: pytest.MonkeyPatch) -> None:
    assert session.ui_settings("0.0.0.0", "spark://master:7077") == ({}, None)
    assert session.ui_settings("10.0.0.5", "local[*]") == ({}, "10.0.0.5")
    assert session.ui_settings("none", None) == ({"spark.ui.enabled": "false"}, None)


def _listening(port: int) -> set[str]:
    """Local addresses (hex, as /proc/net/tcp{,6} write them) listening on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, hex_port = fields[1].split(":")
            if int(hex_port, 16) == port and fields[3] == "0A":  # LISTEN
                found.add(address)
    return found


LOOPBACK_HEX = {"0100007F", "0000000000000000FFFF00000100007F"}  # 127.0.0.1, ::ffff:127.0.0.1


@pytest.mark.integration
@pytest.mark.slow
def test_a_real_driver_listens_on_loopback_or_not_at_all(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in {"SPARK_LOCAL_IP", "PYSPARK_GATEWAY_PORT", session.UI_HOST_ENV}}  # fmt: skip
    # python starts the JVM: the UI is on, on 127.0.0.1 only.
    script = tmp_path / "show_ui.py"
    script.write_text(SHOW_UI.format(master="local[1]", wait=True))
    shown = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=env)  # fmt: skip
    assert shown.stdout is not None and shown.stdin is not None
    line = shown.stdout.readline()
    try:
        assert line.startswith("UI http://"), line
        port = int(line.strip().rsplit(":", 1)[1])
        addresses = _listening(port)
        assert addresses and addresses <= LOOPBACK_HEX, addresses
    finally:
        shown.stdin.write("\n")
        shown.stdin.close()
        shown.wait(timeout=120)
    # spark-submit without SPARK_LOCAL_IP would bind every interface: no UI.
    script.write_text(SHOW_UI.format(master=None, wait=False))
    submitted = subprocess.run(
        [str(BIN / "spark-submit"), "--master", "local[1]", str(script)],
        capture_output=True, text=True, env=env, timeout=180, check=False,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr[-3000:]
    assert "UI None" in submitted.stdout, submitted.stdout + submitted.stderr[-3000:]
    assert "Spark UI off" in submitted.stdout + submitted.stderr
