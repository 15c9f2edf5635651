"""Operating the worker as a process: a real Prometheus scrapes it. (Two workers and
SIGKILL with downtime are in test_event_time.py.)"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.streamkit import (
    EXAMPLES,
    WorkerProcess,
    as_lines,
    envelopes,
    make_config,
    produce,
    provision,
    retime,
    settings_of,
    write_config,
)
from worker.ops.broker import EmbeddedBroker, free_port

pytestmark = pytest.mark.integration


def safe_cases(count: int, **retime_options: Any) -> list[dict[str, Any]]:
    """`count` distinct SAFE cases made from the examples."""
    base = envelopes(EXAMPLES / "safe" / "envelopes.jsonl")
    cases = []
    for index in range(count):
        case = dict(base[index % len(base)])
        case["id"] = f"case-{index:05d}"
        cases.append(case)
    return retime(cases, **retime_options)


def scrape_total(url: str, name: str) -> float:
    """Sum of a counter's samples in a /metrics page."""
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{")
    )


def workers(
    tmp_path: Path, broker: EmbeddedBroker, config: dict[str, Any], count: int
) -> list[WorkerProcess]:
    path = write_config(tmp_path / "config.yaml", config)
    return [
        WorkerProcess(path, broker.url, tmp_path / f"worker-{index}.log") for index in range(count)
    ]


@pytest.mark.skipif(
    shutil.which("prometheus") is None, reason="Debian's prometheus is not installed"
)
async def test_prometheus_scrapes_the_worker(broker: EmbeddedBroker, tmp_path: Path) -> None:
    config = make_config()
    settings = settings_of(config)
    await provision(settings, broker.url)
    (worker,) = workers(tmp_path, broker, config, 1)
    worker.start()
    prometheus = None
    try:
        worker.wait_ready()
        target = urllib.parse.urlparse(worker.metrics_url()).netloc
        cases = safe_cases(30)
        await produce(broker.bootstrap, settings.topics.input, as_lines(cases))
        await produce(broker.bootstrap, settings.topics.input, [b"not json"])
        port = free_port()
        (tmp_path / "prometheus.yml").write_text(
            "global: {scrape_interval: 1s}\n"
            "scrape_configs:\n"
            f"  - job_name: scorestream\n    static_configs: [{{targets: ['{target}']}}]\n",
            encoding="utf-8",
        )
        prometheus = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        query = "sum(scorestream_cases_total{suite='safe'})"
        url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
        deadline = time.monotonic() + 60
        value = None
        while time.monotonic() < deadline:
            try:
                answer = orjson.loads(urllib.request.urlopen(url, timeout=5).read())
                found = answer["data"]["result"]
                value = float(found[0]["value"][1]) if found else None
            except OSError:
                value = None
            if value == len(cases):
                break
            await asyncio.sleep(1)
        assert value == len(cases), f"Prometheus saw {value} scored cases"
        dlq_url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode(
            {"query": "scorestream_dead_letters_total{reason='invalid_json'}"}
        )
        answer = orjson.loads(urllib.request.urlopen(dlq_url, timeout=5).read())
        assert float(answer["data"]["result"][0]["value"][1]) == 1
        buckets = scrape_total(worker.metrics_url(), "scorestream_score_count")
        assert buckets == len(cases) * 4  # CR, AH, AC, composite per case
    finally:
        if prometheus is not None:
            prometheus.terminate()
            prometheus.wait(10)
        worker.stop()
