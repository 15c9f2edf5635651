"""The Grafana dashboard as code: its files are consistent with compose and the worker's
metrics, and, against a real Prometheus scraping a real worker on a real (Tansu) stream,
every panel's PromQL query returns data. The same run checks `/healthz`, `/readyz` and
the worker's JSON log lines."""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from tests.streamkit import (
    EXAMPLES,
    WorkerProcess,
    as_lines,
    envelopes,
    live,
    make_config,
    produce,
    provision,
    settings_of,
    write_config,
)
from worker.demo.settings import DEFAULT_CONFIG as DEMO_CONFIG
from worker.demo.settings import demo_settings
from worker.ops.broker import EmbeddedBroker, free_port
from worker.ops.telemetry import Telemetry
from worker.stream import gate_windows
from worker.suites import registry

REPO = Path(__file__).resolve().parent.parent
GRAFANA = REPO / "deploy" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "scorestream.json"
RATE_INTERVAL = "20s"  # Grafana's $__rate_interval at a 1 s scrape interval


def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text(encoding="utf-8")))


def default_variables() -> dict[str, str]:
    """What Grafana substitutes for each variable at its default: "All" is the variable's
    `allValue`, a multi-value selection `(a|b)`."""
    values = {"$__rate_interval": RATE_INTERVAL}
    for variable in dashboard()["templating"]["list"]:
        current = variable["current"]["value"]
        if current == "$__all" or current == ["$__all"]:
            values["$" + variable["name"]] = variable["allValue"]
        elif isinstance(current, list):
            values["$" + variable["name"]] = "(" + "|".join(current) + ")"
        else:
            values["$" + variable["name"]] = current
    return values


def panel_queries() -> list[tuple[str, str]]:
    """(panel title / target ref, PromQL with the variables at their defaults) for every
    target."""
    variables = sorted(default_variables().items(), key=lambda item: -len(item[0]))
    queries = []
    for panel in dashboard()["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for name, value in variables:
                expr = expr.replace(name, value)
            assert "$" not in expr, f"{panel['title']}: unknown variable in {expr}"
            queries.append((f"{panel['title']} / {target['refId']}", expr))
    return queries


def test_dashboard_is_provisioned_from_the_files_compose_mounts() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text(encoding="utf-8"))
    mounts = {
        volume.split(":")[1]: volume.split(":")[0]
        for volume in compose["services"]["grafana"]["volumes"]
    }
    assert mounts["/etc/grafana/provisioning"] == "./deploy/grafana/provisioning"
    assert mounts["/var/lib/grafana/dashboards"] == "./deploy/grafana/dashboards"
    provider = yaml.safe_load(
        (GRAFANA / "provisioning" / "dashboards" / "scorestream.yml").read_text(encoding="utf-8")
    )
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    sources = yaml.safe_load(
        (GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text(encoding="utf-8")
    )
    (source,) = sources["datasources"]
    assert source["url"] == "http://prometheus:9090"
    board = dashboard()
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        assert panel["datasource"]["uid"] == source["uid"], panel["title"]
        assert panel["targets"], panel["title"]


def test_panels_query_only_metrics_the_worker_exports() -> None:
    exported = Telemetry(["model"]).render().decode()
    families = set(re.findall(r"^# TYPE (\S+) ", exported, flags=re.MULTILINE))
    suffixes = ("", "_bucket", "_count", "_sum", "_total")
    series = {name + suffix for name in families for suffix in suffixes}
    for title, expr in panel_queries():
        names = set(re.findall(r"\b(scorestream_[a-z_]+)", expr))
        assert names <= series, f"{title} queries unknown metrics {names - series}"


def test_dashboard_covers_what_an_operator_watches() -> None:
    text = " ".join(expr for _title, expr in panel_queries())
    for needed in (
        'stat="mean"',
        'stat="ci_low"',
        'stat="ci_high"',
        'metric="pass_rate"',
        "scorestream_cases_total",
        "scorestream_gate_firing",
        "scorestream_dead_letters_total",
        "scorestream_end_to_end_latency_seconds_bucket",
        "scorestream_consumer_lag",
    ):
        assert needed in text, needed


def test_score_panels_default_to_each_suites_headline_metrics() -> None:
    (metric,) = [v for v in dashboard()["templating"]["list"] if v["name"] == "metric"]
    headline = [name for spec in registry.specs() for name in spec.headline]
    assert sorted(metric["current"]["value"]) == sorted(headline)
    assert metric["multi"] and metric["includeAll"]


def test_latency_panels_show_only_suites_with_observations() -> None:
    """histogram_quantile over an interval without observations is NaN: each quantile is
    kept only where its histogram counted something."""
    for title, expr in panel_queries():
        for histogram in re.findall(r"\b(scorestream_\w+)_bucket\b", expr):
            assert f"rate({histogram}_count" in expr and expr.endswith("> 0)"), title


class JsonLogWorker(WorkerProcess):
    """`scorestream worker --log-format json`."""

    def __init__(self, config_path: Path, broker_url: str, log_path: Path) -> None:
        super().__init__(config_path, broker_url, log_path)
        self.args = [*self.args, "--log-format", "json"]


def http_get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def prometheus_query(port: int, expr: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    answer = orjson.loads(urllib.request.urlopen(url, timeout=5).read())
    assert answer["status"] == "success", answer
    return list(answer["data"]["result"])


def write_scrape_config(tmp_path: Path, target: str) -> None:
    """Prometheus's configuration: scrape `target` (host:port) every second."""
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: scorestream\n"
        f"    static_configs: [{{targets: ['{target}']}}]\n",
        encoding="utf-8",
    )


def start_prometheus(tmp_path: Path, target: str, port: int) -> subprocess.Popen[bytes]:
    """Debian's Prometheus on `port`, scraping `target` (host:port) every second."""
    write_scrape_config(tmp_path, target)
    return subprocess.Popen(
        [
            "prometheus",
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def prometheus_range(port: int, expr: str, start: float, end: float) -> list[dict[str, Any]]:
    """Every series of `expr` between `start` and `end`, a point a second (as a
    dashboard over that time range shows it)."""
    query = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": "1"}
    url = f"http://127.0.0.1:{port}/api/v1/query_range?" + urllib.parse.urlencode(query)
    answer = orjson.loads(urllib.request.urlopen(url, timeout=10).read())
    assert answer["status"] == "success", answer
    return list(answer["data"]["result"])


def finite(result: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [item for item in result if math.isfinite(float(item["value"][1]))]


def bursts_of_every_suite() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Two bursts of the example envelopes of all suites (bad records are added when
    they are produced)."""
    records = []
    for suite in ("safe", "extraction", "alignment"):
        records.extend(envelopes(EXAMPLES / suite / "envelopes.jsonl"))
    half = len(records) // 2
    return records[:half], records[half:]


def live_lines(records: list[dict[str, Any]], *bad: bytes) -> list[bytes]:
    """The records timed from now on, as live traffic (an idle input's watermark follows
    the wall clock, so records timed in the past would be late), then `bad`."""
    return [*as_lines(live(records)), *bad]


@pytest.mark.integration
@pytest.mark.skipif(
    shutil.which("prometheus") is None, reason="Debian's prometheus is not installed"
)
async def test_every_panel_query_returns_data_from_a_real_prometheus(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    config = make_config(
        windows=[{"size": "10s"}],  # windows close, and gates judge them, within seconds
        gates=[
            {
                "name": "busy",
                "suite": "safe",
                "metric": "cases",
                "stat": "count",
                "op": ">",
                "threshold": 1,
                "window": "10s",
            }
        ],
    )
    settings = settings_of(config)
    await provision(settings, broker.url)
    worker = JsonLogWorker(
        write_config(tmp_path / "config.yaml", config), broker.url, tmp_path / "worker.log"
    )
    worker.start()
    prometheus = None
    try:
        worker.wait_ready()
        metrics_url = worker.metrics_url()
        base = metrics_url.removesuffix("/metrics")
        assert http_get(base + "/healthz")[0] == 200
        port = free_port()
        prometheus = start_prometheus(tmp_path, urllib.parse.urlparse(metrics_url).netloc, port)
        first, second = bursts_of_every_suite()
        # Two bursts a few scrapes apart, so that rates and quantiles see increases.
        await asyncio.sleep(3)
        await produce(broker.bootstrap, settings.topics.input, live_lines(first, b"not json"))
        await asyncio.sleep(4)
        bad = (b"not json", b'{"suite": "nope"}')
        await produce(broker.bootstrap, settings.topics.input, live_lines(second, *bad))

        pending = dict(panel_queries())
        trend = "Headline scores: window mean (all cases) / A"
        suites = {"safe", "extraction", "alignment"}
        seen: dict[str, list[dict[str, Any]]] = {}
        deadline = time.monotonic() + 120
        next_burst = time.monotonic() + 5
        while pending and time.monotonic() < deadline:
            if time.monotonic() > next_burst:  # traffic keeps flowing: rates stay above 0
                await produce(broker.bootstrap, settings.topics.input, live_lines(first, *bad))
                next_burst = time.monotonic() + 5
            for title, expr in list(pending.items()):
                try:
                    found = finite(prometheus_query(port, expr))
                except OSError:
                    continue  # Prometheus still starting
                if title == trend and {item["metric"]["suite"] for item in found} != suites:
                    continue  # alignment results come after the session idle timeout
                if "rate(" in expr and not any(float(item["value"][1]) > 0 for item in found):
                    continue  # a rate panel should show the records going through
                if found:
                    seen[title] = found
                    del pending[title]
            await asyncio.sleep(1)
        for title, found in sorted(seen.items()):
            values = ", ".join(
                f"{ {k: v for k, v in item['metric'].items() if k not in ('job', 'instance')} }"
                f"={float(item['value'][1]):.3g}"
                for item in found[:4]
            )
            print(f"{title}: {len(found)} series, e.g. {values}")
        assert not pending, f"panels without data: {sorted(pending)}"

        status, body = http_get(base + "/readyz")
        assert status == 200
        assert orjson.loads(body) == {"ready": True, "started": True, "broker": "connected"}
    finally:
        if prometheus is not None:
            prometheus.terminate()
            prometheus.wait(10)
        worker.stop()
    log_lines = [line for line in worker.log().splitlines() if line.startswith("{")]
    entries = [orjson.loads(line) for line in log_lines]
    assert any(entry["message"] == "scorestream worker ready" for entry in entries)
    assert all({"ts", "level", "logger", "message"} <= set(entry) for entry in entries)
    assert not re.search(r"^\[\d{4}-\d\d-\d\d", worker.log(), flags=re.MULTILINE), (
        "text log lines next to JSON ones"
    )


@pytest.mark.integration
@pytest.mark.skipif(
    shutil.which("prometheus") is None, reason="Debian's prometheus is not installed"
)
def test_every_panel_tells_the_truth_on_the_demo_stream(tmp_path: Path) -> None:
    """Small data: the demo's 89 records, caught up on in a burst. Every panel has data
    over the demo's time range, none a NaN, every rate panel sees the burst, and the
    default score panel has one series per headline metric and window."""
    metrics_port, port = free_port(), free_port()
    prometheus = start_prometheus(tmp_path, f"127.0.0.1:{metrics_port}", port)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCORESTREAM_")}
    env.update(SCORESTREAM_METRICS_PORT=str(metrics_port), PYTHONUNBUFFERED="1")
    started = time.time()
    demo = subprocess.Popen(
        [sys.executable, "-m", "worker", "demo", "--follow", "--config", str(DEMO_CONFIG)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert demo.stderr is not None
        said = ""
        while "Next steps" not in said:
            line = demo.stderr.readline()
            assert line, f"the demo ended early:\n{said}"
            said += line
            served = re.search(r"metrics on http://([\d.]+:(\d+))/metrics", line)
            if served and int(served[2]) != metrics_port:
                # The port was taken (by another test) before the demo bound it; the demo
                # serves on another one and says which: scrape that one instead.
                write_scrape_config(tmp_path, served[1])
                prometheus.send_signal(signal.SIGHUP)
        time.sleep(3)  # a few more scrapes after the last window closed
        ended = time.time()
        found = {
            title: prometheus_range(port, expr, started, ended) for title, expr in panel_queries()
        }
    finally:
        os.killpg(demo.pid, signal.SIGINT)
        demo.wait(60)
        prometheus.terminate()
        prometheus.wait(10)
    empty = [title for title, series in found.items() if not any(i["values"] for i in series)]
    assert not empty, f"panels without data after the demo's stream: {empty}\n{said}"
    for (title, expr), series in zip(panel_queries(), found.values(), strict=True):
        points = [float(value) for item in series for _at, value in item["values"]]
        print(f"{title}: {len(series)} series, {len(points)} points")
        assert all(math.isfinite(point) for point in points), f"{title}: NaN or infinity"
        if "rate(" in expr:
            assert any(point > 0 for point in points), f"{title}: the burst is not seen"
    headline = found["Headline scores: window mean (all cases) / A"]
    metrics = {name for spec in registry.specs() for name in spec.headline}
    windows = {window.name for window in gate_windows(demo_settings(str(DEMO_CONFIG)))}
    assert {(s["metric"]["metric"], s["metric"]["window"]) for s in headline} == {
        (metric, window) for metric in metrics for window in windows
    }
