"""The deployment files stay consistent with the code: config loads, compose commands
parse, and every metric the alert rules query is one the worker exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from worker.commands.cli import build_parser
from worker.config import load_settings
from worker.ops.telemetry import Telemetry

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"


def test_deploy_config_is_valid(tmp_path: Path) -> None:
    settings = load_settings(DEPLOY / "config.yaml", environ={}, safe_config_json=tmp_path / "n")
    assert settings.broker == "kafka://kafka:9092"
    assert {gate.name for gate in settings.gates} == {
        "safe-ci-gate",
        "safety-drop",
        "safety-coverage",
    }


def test_compose_commands_are_scorestream_commands() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text(encoding="utf-8"))
    for name in ("topics", "worker"):
        args = build_parser().parse_args(compose["services"][name]["command"])
        assert args.command == name
    assert "kafka" in compose["services"] and "prometheus" in compose["services"]


def test_alert_rules_query_exported_metrics() -> None:
    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text(encoding="utf-8"))
    exported = Telemetry(["model"]).render().decode()
    families = set(re.findall(r"^# TYPE (\S+) ", exported, flags=re.MULTILINE))
    series = {name + suffix for name in families for suffix in ("", "_bucket", "_total")}
    for group in rules["groups"]:
        for rule in group["rules"]:
            name = rule.get("alert") or rule["record"]
            names = set(re.findall(r"\b(scorestream_[a-z_]+)", rule["expr"]))
            assert names or "up{" in rule["expr"] or ":" in rule["expr"], name
            assert names <= series, f"{name} queries unknown metrics {names - series}"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="Debian's prometheus not installed")
def test_promtool_accepts_the_alert_rules() -> None:
    done = subprocess.run(
        ["promtool", "check", "rules", str(DEPLOY / "prometheus" / "alerts.yml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
