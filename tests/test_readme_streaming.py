"""The README's "Streaming on one machine" commands, run as written.

The block after `<!-- readme-test: streaming -->` in README.md is the test's script:
`scorestream broker` and `scorestream worker` run in the background as the README's
terminals do, every other line must exit 0, in order. The only change is the environment:
`SCORESTREAM_BROKER` and `SCORESTREAM_METRICS_PORT` name free ports (the environment
outranks the config file, as the README says), so that parallel runs do not fight over
9092 and 9108. Then every produced record must have a result, and the aggregates of the
re-timed history must count every case (none late) and close windows.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.streamkit import TopicReader
from worker.ops.broker import free_port, wait_for_port

REPO = Path(__file__).resolve().parent.parent
MARK = "<!-- readme-test: streaming -->"
BACKGROUND = {"broker", "worker"}  # commands that run until Ctrl-C


def readme_commands(text: str) -> list[list[str]]:
    """The command lines of the fenced block after MARK, without their comments."""
    after = text.split(MARK, 1)[1]
    block = re.search(r"```bash\n(.*?)```", after, flags=re.DOTALL)
    assert block is not None, "no ```bash block after the README's test mark"
    commands = []
    for line in block.group(1).splitlines():
        words = shlex.split(line, comments=True)
        if words:
            commands.append(words)
    return commands


def test_the_block_is_the_local_streaming_recipe() -> None:
    commands = readme_commands((REPO / "README.md").read_text(encoding="utf-8"))
    assert [words[:2] for words in commands] == [
        ["scorestream", "broker"],
        ["scorestream", "topics"],
        ["scorestream", "produce"],
        ["scorestream", "worker"],
    ]


@pytest.fixture
def background(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes the README starts in a terminal of their own; stopped as Ctrl-C would."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in reversed(started):
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)


def latest_aggregates(values: list[dict[str, Any]]) -> dict[float, dict[str, Any]]:
    """The newest SAFE all-cases 60 s aggregate of each window (final wins)."""
    newest: dict[float, dict[str, Any]] = {}
    for value in values:
        if value["suite"] != "safe" or value["segment"] or value["window"]["size_s"] != 60:
            continue
        start = value["window"]["start"]
        if not newest.get(start, {}).get("final"):
            newest[start] = value
    return newest


@pytest.mark.integration
async def test_readme_streaming_commands_run_as_written(
    tmp_path: Path, background: list[subprocess.Popen[bytes]]
) -> None:
    commands = readme_commands((REPO / "README.md").read_text(encoding="utf-8"))
    port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith("SCORESTREAM_")}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        SCORESTREAM_BROKER=f"kafka://127.0.0.1:{port}",
        SCORESTREAM_METRICS_PORT=str(free_port()),
        PYTHONUNBUFFERED="1",
    )
    produced = 0
    logs: dict[str, Path] = {}
    for words in commands:
        if words[1] in BACKGROUND:
            logs[words[1]] = log = tmp_path / f"{words[1]}.log"
            with log.open("wb") as out:
                background.append(
                    subprocess.Popen(
                        words,
                        cwd=REPO,
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
            if words[1] == "broker":
                wait_for_port("127.0.0.1", port, 30)
            continue
        done = subprocess.run(
            words, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, f"{shlex.join(words)}:\n{done.stderr}{done.stdout}"
        if words[1] == "produce":
            produced += int(re.findall(r"produced (\d+) records", done.stderr)[0])
    assert produced == 20
    broker_said = logs["broker"].read_text(encoding="utf-8")
    assert f"broker: kafka://127.0.0.1:{port}" in broker_said
    assert "exact_changelog_ends: true" in broker_said

    async with TopicReader(
        f"127.0.0.1:{port}", "llm.eval.results.v1", "llm.eval.aggregates.v1"
    ) as reader:

        def everything_counted(r: TopicReader) -> bool:
            ids = {value["id"] for value in r.values("llm.eval.results.v1")}
            newest = latest_aggregates(r.values("llm.eval.aggregates.v1"))
            counted = sum(value["count"] for value in newest.values())
            finals = sum(1 for value in newest.values() if value["final"])
            return len(ids) == produced and counted == produced and finals >= 2

        try:
            await reader.until(everything_counted, timeout=150, what="results and aggregates")
        except AssertionError as error:
            log = logs["worker"].read_text()[-3000:]
            raise AssertionError(f"{error}\nworker log:\n{log}") from None
    worker_log = logs["worker"].read_text(encoding="utf-8")
    assert "late:" not in worker_log
