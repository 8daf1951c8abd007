"""``featureflow status``: a live view of a running stream job, from its Prometheus endpoint.

Per view: micro-batches, events/s and duration of the last batch, freshness
p50/p99, dead letters; per topic and partition the consumer lag (latest offset
minus processed offset); per view and partition the watermark lag; dead letters
by reason. Refreshes in place every ``--interval`` seconds until Ctrl-C;
``--once`` prints one screen and exits (for scripts)::

    spark-submit jobs/realtime.py ... --metrics-port 9108
    featureflow status --metrics-port 9108
"""

from __future__ import annotations

import argparse
import shutil
import time

from featureflow.cli.failures import port_number, positive_float
from featureflow.errors import MetricsUnavailableError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``status`` sub-command."""
    parser = subparsers.add_parser(
        "status",
        help="live view of a running job: rate, freshness, dead letters, lag",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--metrics-port", type=port_number, metavar="N",
        help="the job's --metrics-port (on --host)",
    )  # fmt: skip
    where.add_argument(
        "--url", help="the job's metrics endpoint, e.g. http://job-host:9108/metrics"
    )
    parser.add_argument("--host", default="127.0.0.1", help="with --metrics-port")
    parser.add_argument(
        "--interval", type=positive_float, default=1.0, metavar="S",
        help="seconds between refreshes (default 1)",
    )  # fmt: skip
    parser.add_argument("--once", action="store_true", help="print one screen and exit")
    parser.set_defaults(handler=run)


def _screen(status_lines: list[str]) -> str:
    return "\n".join(status_lines)


def run(args: argparse.Namespace) -> int:
    """Show the job's status; exit status 1 (one line) when its endpoint can't be read."""
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    from featureflow.monitoring.scrape import metrics_url, scrape
    from featureflow.monitoring.screen import WIDTH, render

    url = metrics_url(args.metrics_port, args.url, args.host)
    status = scrape(url)  # a first failure is an error: nothing to show
    width = max(40, min(shutil.get_terminal_size((WIDTH, 24)).columns, 120))
    if args.once:
        print(_screen(render(status, clock=time.strftime("%H:%M:%S"), width=width)))
        return 0
    console = Console(width=width, highlight=False)
    note = ""
    with Live(console=console, auto_refresh=False, transient=False) as live:
        try:
            while True:
                lines = render(status, clock=time.strftime("%H:%M:%S"), note=note, width=width)
                live.update(Text(_screen(lines)), refresh=True)
                time.sleep(args.interval)
                try:
                    status, note = scrape(url), ""
                except MetricsUnavailableError as error:
                    note = f"(last screen kept) {error}"
        except KeyboardInterrupt:
            pass
    return 0
