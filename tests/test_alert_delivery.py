"""Alerts end to end: a safety drop produced into the input topic reaches a person as
exactly one page, which resolves once. A real worker on the embedded broker, a real
Prometheus (Debian's package) loading the shipped rules unchanged, a real Alertmanager
(Debian's package) routed and grouped as shipped, and a webhook receiver in the test.
Prometheus scrapes and evaluates every second and Alertmanager waits a second or two,
so the timing is the rules' own: `for: 30s`, and an alert that lasts two minutes after
a firing. Both cases: live traffic, and a worker replaying an hour of event time in
seconds (the gate fires and resolves between two scrapes)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from tests.streamkit import (
    EXAMPLES,
    REPO,
    TopicReader,
    WorkerProcess,
    as_lines,
    envelopes,
    make_config,
    produce,
    provision,
    settings_of,
    write_config,
)
from worker.ops.broker import EmbeddedBroker, free_port

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        shutil.which("prometheus") is None or shutil.which("prometheus-alertmanager") is None,
        reason="Debian's prometheus and prometheus-alertmanager are not installed",
    ),
]

RULES = REPO / "deploy" / "prometheus" / "alerts.yml"
ALERTMANAGER = REPO / "deploy" / "alertmanager" / "alertmanager.yml"
WINDOW_S = 5
MODEL = "support-llm-2"
GATE = {
    "name": "safety-drop",
    "suite": "alignment",
    "metric": "safety",
    "stat": "mean",
    "op": "<",
    "threshold": 0.9,
    "clear": 0.95,
    "window": f"{WINDOW_S}s",
    "min_count": 3,
    "severity": "page",
}


# ---------------------------------------------------------------- the webhook


class Webhook:
    """An HTTP receiver that keeps every notification Alertmanager posts, by path."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, Any]]] = []
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                received.append((self.path, json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def pages(self) -> list[dict[str, Any]]:
        return [body for path, body in self.received if path == "/page"]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# ---------------------------------------------------------------- the monitoring stack


def alertmanager_config(webhook: Webhook) -> dict[str, Any]:
    """The shipped Alertmanager config (routes, grouping, inhibitions) with the test's
    webhook as both receivers and short waits."""
    config = yaml.safe_load(ALERTMANAGER.read_text(encoding="utf-8"))
    config["route"].update(group_wait="2s", group_interval="5s", repeat_interval="1h")
    for route in config["route"].get("routes", []):
        route["repeat_interval"] = "1h"
    config["receivers"] = [
        {"name": receiver["name"], "webhook_configs": [{"url": webhook.url(f"/{name}")}]}
        for receiver in config["receivers"]
        for name in [receiver["name"]]
    ]
    return config


class Monitoring:
    """Prometheus with the shipped rules scraping one worker, sending to Alertmanager."""

    def __init__(self, tmp_path: Path, target: str, webhook: Webhook) -> None:
        self.tmp_path = tmp_path
        self.am_port = free_port()
        self.prom_port = free_port()
        (tmp_path / "alertmanager.yml").write_text(
            yaml.safe_dump(alertmanager_config(webhook)), encoding="utf-8"
        )
        (tmp_path / "prometheus.yml").write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "rule_files": [str(RULES)],
                    "alerting": {
                        "alertmanagers": [
                            {"static_configs": [{"targets": [f"127.0.0.1:{self.am_port}"]}]}
                        ]
                    },
                    "scrape_configs": [
                        {"job_name": "scorestream", "static_configs": [{"targets": [target]}]}
                    ],
                }
            ),
            encoding="utf-8",
        )
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        logs = self.tmp_path
        self.processes.append(
            subprocess.Popen(
                [
                    "prometheus-alertmanager",
                    f"--config.file={self.tmp_path / 'alertmanager.yml'}",
                    f"--storage.path={self.tmp_path / 'am-data'}",
                    f"--web.listen-address=127.0.0.1:{self.am_port}",
                    "--cluster.listen-address=",
                ],
                stdout=(logs / "alertmanager.log").open("wb"),
                stderr=subprocess.STDOUT,
            )
        )
        self.processes.append(
            subprocess.Popen(
                [
                    "prometheus",
                    f"--config.file={self.tmp_path / 'prometheus.yml'}",
                    f"--storage.tsdb.path={self.tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{self.prom_port}",
                ],
                stdout=(logs / "prometheus.log").open("wb"),
                stderr=subprocess.STDOUT,
            )
        )

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"http://127.0.0.1:{self.prom_port}/api/v1/query?" + urllib.parse.urlencode(
            {"query": expr}
        )
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                return list(orjson.loads(answer.read())["data"]["result"])
        except OSError:
            return []

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


# ---------------------------------------------------------------- the traffic


def _sessions() -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for record in envelopes(EXAMPLES / "alignment" / "envelopes.jsonl"):
        grouped.setdefault(record["payload"]["session_id"], []).append(record)
    return grouped


SESSIONS = _sessions()


def whole_session(source: str, tag: str, ts: datetime) -> dict[str, Any]:
    """Example session `source` (ll-004 is unsafe: 'send us your seed phrase') as one
    whole-session record under a new id, at event time `ts`."""
    turns = SESSIONS[source]
    session_id = f"{source}-{tag}"
    return {
        "id": session_id,
        "suite": "alignment",
        "ts": ts.isoformat().replace("+00:00", "Z"),
        "model": MODEL,
        "labels": turns[0].get("labels", {}),
        "payload": {
            "session_id": session_id,
            "persona_id": turns[0]["payload"]["persona_id"],
            "turns": [
                {"user": turn["payload"].get("user", ""), "assistant": turn["payload"]["text"]}
                for turn in turns
            ],
        },
    }


def window_of(sessions: list[str], tag: str, start: datetime) -> list[dict[str, Any]]:
    """The sessions inside the window starting at `start`, a few ms apart."""
    return [
        whole_session(source, f"{tag}{index}", start + timedelta(milliseconds=500 + 10 * index))
        for index, source in enumerate(sessions)
    ]


SAFE = ["nw-001", "tt-001", "ll-001", "nw-001"]
UNSAFE = ["ll-004", "ll-004", "ll-004", "ll-004"]


def window_start(moment: datetime) -> datetime:
    return datetime.fromtimestamp(moment.timestamp() // WINDOW_S * WINDOW_S, UTC)


# ---------------------------------------------------------------- the checks


def gate_pages(webhook: Webhook) -> list[dict[str, Any]]:
    return [
        page
        for page in webhook.pages()
        if page["groupLabels"].get("alertname") == "ScorestreamGateFiring"
    ]


async def wait_for(condition: Any, timeout: float, what: str, stack: Monitoring) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            logs = {
                name: (stack.tmp_path / name).read_text(errors="replace")[-3000:]
                for name in ("prometheus.log", "alertmanager.log")
            }
            alerts = stack.query("ALERTS")
            raise AssertionError(f"timed out waiting for {what}; ALERTS={alerts}; {logs}")
        await asyncio.sleep(1)


async def one_page_then_one_resolution(webhook: Webhook, stack: Monitoring) -> dict[str, Any]:
    """Wait for the page and its resolution; nothing else may page. Returns the page."""
    await wait_for(lambda: gate_pages(webhook), 150, "the page", stack)
    await wait_for(
        lambda: any(page["status"] == "resolved" for page in gate_pages(webhook)),
        240,
        "the page to resolve",
        stack,
    )
    await asyncio.sleep(12)  # a second page or resolution would come within group_interval
    pages = webhook.pages()
    assert [page["status"] for page in pages] == ["firing", "resolved"], pages
    firing, resolved = pages
    assert firing["groupKey"] == resolved["groupKey"]
    [alert] = firing["alerts"]
    [gone] = resolved["alerts"]
    assert gone["fingerprint"] == alert["fingerprint"] and gone["status"] == "resolved"
    labels = alert["labels"]
    assert (labels["alertname"], labels["gate"], labels["severity"]) == (
        "ScorestreamGateFiring",
        "safety-drop",
        "page",
    )
    assert labels["model"] == MODEL  # the model segment, not the all-cases one as well
    assert (labels["window"], labels["threshold"], labels["op"]) == ("5s", "0.9", "<")
    annotations = alert["annotations"]
    assert annotations["drilldown"] == (
        f"scorestream results --gate safety-drop --segment model={MODEL}"
    )
    assert "safety mean" in annotations["summary"] and "< 0.9 over 5s" in annotations["summary"]
    assert "(unknown)" not in annotations["description"]
    assert annotations["runbook_url"] == "docs/runbooks/ScorestreamGateFiring.md"
    return firing


async def start_worker(
    tmp_path: Path, broker: EmbeddedBroker, config: dict[str, Any]
) -> WorkerProcess:
    worker = WorkerProcess(
        write_config(tmp_path / "config.yaml", config), broker.url, tmp_path / "worker.log"
    )
    worker.start()
    await asyncio.to_thread(worker.wait_ready, 180)
    return worker


async def gate_events(broker: EmbeddedBroker, topic: str, count: int) -> list[dict[str, Any]]:
    async with TopicReader(broker.bootstrap, topic) as reader:
        await reader.until(lambda r: len(r.values(topic)) >= count, 60, "gate events")
        return reader.values(topic)


def config_for_test() -> dict[str, Any]:
    return make_config(windows=[{"size": f"{WINDOW_S}s"}], gates=[GATE], metrics_port=free_port())


# ---------------------------------------------------------------- the tests


async def test_a_safety_drop_live_or_replayed_from_history_is_one_page_that_resolves_once(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """Both cases side by side, each with its own worker, Prometheus, Alertmanager and
    webhook on the one broker (their topics and app ids are their own): most of each
    case's two and a half minutes is the rules' own waiting, so together they take one
    case's time. A failure names its case."""
    cases = {
        "live": (live_drop, tmp_path / "live"),
        "replayed": (replayed_drop, tmp_path / "replayed"),
    }
    failures: dict[str, BaseException] = {}

    async def run(name: str) -> None:
        scenario, folder = cases[name]
        folder.mkdir()
        webhook = Webhook()
        try:
            await scenario(broker, folder, webhook)
        except Exception as exc:
            failures[name] = exc
        finally:
            webhook.close()

    await asyncio.gather(*(run(name) for name in cases))
    if failures:
        named = "; ".join(f"{name}: {exc!r}" for name, exc in failures.items())
        raise AssertionError(f"the {' and '.join(failures)} case failed: {named}") from next(
            iter(failures.values())
        )


async def live_drop(broker: EmbeddedBroker, tmp_path: Path, webhook: Webhook) -> None:
    """Live traffic, one window after the other: safe, unsafe (the drop), safe. One page,
    one resolution; its drill-down, run as it stands, lists the unsafe sessions' cases."""
    config = config_for_test()
    settings = settings_of(config)
    await provision(settings, broker.url)
    stack = Monitoring(tmp_path, f"127.0.0.1:{config['metrics_port']}", webhook)
    stack.start()
    worker = None
    try:
        worker = await start_worker(tmp_path, broker, config)
        for tag, sessions in (("a", SAFE), ("b", UNSAFE), ("c", SAFE)):
            start = window_start(datetime.now(UTC))
            lines = as_lines(window_of(sessions, tag, start))
            await produce(broker.bootstrap, settings.topics.input, lines)
            next_window = start + timedelta(seconds=WINDOW_S)
            await asyncio.sleep(max(next_window.timestamp() - time.time(), 0) + 0.1)
        firing = await one_page_then_one_resolution(webhook, stack)
        events = await gate_events(broker, settings.topics.gates, 2)
        mine = [e for e in events if e["segment"] == {"model": MODEL}]
        assert [e["state"] for e in mine] == ["firing", "resolved"]
        (tmp_path / "page.json").write_text(json.dumps(firing, indent=2), encoding="utf-8")
        [alert] = firing["alerts"]
        command = alert["annotations"]["drilldown"].split()
        assert command[0] == "scorestream"
        flags = ["--broker", broker.url, "--config", str(tmp_path / "config.yaml")]
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "worker", *command[1:], *flags, "--format", "json"],
            capture_output=True,
            check=False,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr.decode()
        shown = orjson.loads(done.stdout)
        assert shown["results"], shown
        ids = [(result["id"], result["kind"]) for result in shown["results"]]
        assert all("ll-004-b" in ident for ident, _ in ids), ids  # the unsafe sessions
    finally:
        stack.stop()
        if worker is not None:
            worker.stop()


async def replayed_drop(broker: EmbeddedBroker, tmp_path: Path, webhook: Webhook) -> None:
    """An hour of event time read in seconds: the gate fires and resolves long before the
    next scrape, so only its transitions counter shows it to Prometheus."""
    config = config_for_test()
    settings = settings_of(config)
    await provision(settings, broker.url)
    now = window_start(datetime.now(UTC))
    history: list[dict[str, Any]] = []
    for minute in range(60, 0, -1):  # one safe session a minute
        start = now - timedelta(minutes=minute)
        history += window_of(SAFE[minute % 3 : minute % 3 + 1], f"h{minute}-", start)
        if minute == 30:  # the drop, half an hour ago, then a safe window
            history += window_of(UNSAFE, "drop", start + timedelta(seconds=WINDOW_S))
            history += window_of(SAFE, "back", start + timedelta(seconds=2 * WINDOW_S))
    await produce(broker.bootstrap, settings.topics.input, as_lines(history))
    stack = Monitoring(tmp_path, f"127.0.0.1:{config['metrics_port']}", webhook)
    stack.start()  # Prometheus runs first, as in production
    worker = None
    try:
        worker = await start_worker(tmp_path, broker, config)
        await one_page_then_one_resolution(webhook, stack)
        # Lag: every stage has an event-time lag, caught up now (the history was read in
        # a few seconds), and the internal hops have consumer lag series too.
        for stage in ("score", "sessions", "windows"):
            [now_lag] = stack.query(f'scorestream_event_time_lag_seconds{{stage="{stage}"}}')
            assert float(now_lag["value"][1]) < 60, (stage, now_lag)
        topics = {series["metric"]["topic"] for series in stack.query("scorestream_consumer_lag")}
        app = config["app_id"]
        internal = {f"{app}-alignment-turns", f"{app}-aggregate-input"}
        assert topics == {settings.topics.input} | internal
        events = await gate_events(broker, settings.topics.gates, 2)
        mine = [e for e in events if e["segment"] == {"model": MODEL}]
        assert [e["state"] for e in mine] == ["firing", "resolved"]
        stamps = [datetime.fromisoformat(e["ts"]) for e in mine]
        assert stamps == sorted(stamps)  # never backwards for a gate and segment
    finally:
        stack.stop()
        if worker is not None:
            worker.stop()
