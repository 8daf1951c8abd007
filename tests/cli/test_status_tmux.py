"""``featureflow status`` in a real terminal (tmux, 80 columns) against a live stream job.

The job starts on a topic that holds a backlog and reads it a few hundred
records per micro-batch; the test reads the status screen as a user sees it
(``tmux capture-pane``) and requires the consumer lag to fall to 0 as the job
catches up. A screen from mid-way through the catch-up is saved as
``docs/img/status.png`` (the README's screenshot).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from job_harness import BIN, REPO_ROOT, apply, env, job_command
from local_processes import free_port, stop_group

from featureflow.events import sample
from featureflow.infra import kafka_broker, kafka_client

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SCREENSHOT = REPO_ROOT / "docs" / "img" / "status.png"
COLUMNS, ROWS = 80, 24
BAD_RECORDS = [b"{this is not json", b'{"user_id": "abc", "amount": 1.0}']


def _serves(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def save_png(screen: list[str], path: Path) -> None:
    """The terminal screen as a PNG: DejaVu Sans Mono (shipped with matplotlib), light on
    dark, the first line bold."""
    import matplotlib
    from PIL import Image, ImageDraw, ImageFont

    fonts = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
    regular = ImageFont.truetype(str(fonts / "DejaVuSansMono.ttf"), 15)
    bold = ImageFont.truetype(str(fonts / "DejaVuSansMono-Bold.ttf"), 15)
    cell_w = regular.getbbox("M")[2]
    cell_h, margin = 19, 12
    image = Image.new(
        "RGB", (COLUMNS * cell_w + 2 * margin, len(screen) * cell_h + 2 * margin), "#1e1e2e"
    )
    draw = ImageDraw.Draw(image)
    for row, line in enumerate(screen):
        font = bold if row == 0 else regular
        draw.text((margin, margin + row * cell_h), line, fill="#cdd6f4", font=font)
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, optimize=True)


def test_status_in_tmux_shows_the_lag_falling_to_zero(
    kafka_bootstrap: str, feature_repo_copy: Path, tmp_path: Path
) -> None:
    tmux = shutil.which("tmux")
    assert tmux, "tmux is needed (make system-deps installs it)"
    # Events of the last 15 minutes, so freshness and watermark lag read as in production.
    events = sample.generate(3000, users=40, seed=71, end_ns=time.time_ns(), span_s=900)
    topic = f"test-status-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(kafka_bootstrap, topic, partitions=2)
    kafka_client.produce(kafka_bootstrap, topic, [(b"bad", value) for value in BAD_RECORDS])
    kafka_client.produce(kafka_bootstrap, topic, sample.to_json(events))
    apply(feature_repo_copy, topic)
    port = free_port()
    log_path = tmp_path / "job.log"
    command = job_command(
        feature_repo_copy, kafka_bootstrap, tmp_path / "checkpoint", "--view", "user_txn_stats",
        "--max-offsets-per-trigger", "500", "--trigger", "1 second", "--metrics-port", str(port),
    )  # fmt: skip
    socket_name = f"featureflow-{uuid.uuid4().hex[:8]}"
    tmux_command = [tmux, "-L", socket_name, "-f", "/dev/null"]
    screens: list[list[str]] = []
    totals: list[int] = []
    with log_path.open("wb") as out:
        job = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env(), start_new_session=True
        )
        try:
            deadline = time.monotonic() + 600
            while not _serves(f"http://127.0.0.1:{port}/metrics"):
                assert job.poll() is None, log_path.read_text(errors="replace")[-4000:]
                assert time.monotonic() < deadline, "the job never served its metrics"
                time.sleep(0.5)
            status = f"{BIN / 'featureflow'} status --metrics-port {port} --interval 0.5"
            subprocess.run(
                [*tmux_command, "new-session", "-d", "-s", "status", "-x", str(COLUMNS),
                 "-y", str(ROWS), status],
                check=True, env=env(),
            )  # fmt: skip
            while not (totals and totals[-1] == 0 and any(t > 0 for t in totals)):
                assert job.poll() is None, log_path.read_text(errors="replace")[-4000:]
                assert time.monotonic() < deadline, (totals, screens[-1:])
                time.sleep(0.5)
                screen = subprocess.run(
                    [*tmux_command, "capture-pane", "-p", "-t", "status"],
                    check=True, capture_output=True, text=True,
                ).stdout.splitlines()  # fmt: skip
                lag = next(
                    (re.search(rf"{topic}  total ([\d,]+):", line) for line in screen
                     if f"{topic}  total" in line),
                    None,
                )  # fmt: skip
                if lag:
                    screens.append(screen)
                    totals.append(int(lag.group(1).replace(",", "")))
        finally:
            subprocess.run([*tmux_command, "kill-server"], check=False, capture_output=True)
            stop_group(job)

    # The lag fell as the job caught up, ending at 0; the screen fit the terminal.
    assert totals[0] > 0 and totals[-1] == 0, totals
    first_zero = totals.index(0)
    assert all(t > 0 for t in totals[:first_zero]), totals
    final = "\n".join(screens[-1])
    assert re.search(r"^user_txn_stats\s+\d+", final, re.MULTILINE), final
    assert "not a JSON object: 1;" in final and "entity key is not an integer: 1;" in final, final
    assert all(len(line) <= COLUMNS for screen in screens for line in screen)
    # The job's log carries the same numbers, one JSON line per progress.
    log = log_path.read_text(errors="replace")
    lags = [json.loads(line)["consumer_lag"][topic]
            for line in re.findall(r"featureflow\.lag: (\{.*\})", log)]  # fmt: skip
    assert lags and any(sum(p.values()) > 0 for p in lags), log[-3000:]
    assert set(lags[-1]) == {"0", "1"} and sum(lags[-1].values()) == 0

    # The screenshot: mid-way through the catch-up, without the pane's empty rows.
    middle = next(screens[i] for i, total in enumerate(totals) if total <= totals[0] // 2)
    while middle and not middle[-1].strip():
        middle = middle[:-1]
    save_png(middle, SCREENSHOT)
    assert SCREENSHOT.stat().st_size > 5_000
