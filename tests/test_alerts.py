"""The alert rules page right: `promtool test rules` (firing, not firing, resolving for
every alert), and every alert has the fields a person on call needs and a runbook."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
RULES = REPO / "deploy" / "prometheus" / "alerts.yml"
RULE_TESTS = REPO / "deploy" / "prometheus" / "alerts.test.yml"
RUNBOOK_SECTIONS = ("## Meaning", "## What to check", "## How to silence")


def alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def rule_tests() -> list[dict[str, Any]]:
    return list(yaml.safe_load(RULE_TESTS.read_text(encoding="utf-8"))["tests"])


@pytest.mark.skipif(shutil.which("promtool") is None, reason="Debian's prometheus not installed")
def test_promtool_rule_unit_tests_pass() -> None:
    done = subprocess.run(
        ["promtool", "test", "rules", str(RULE_TESTS)],
        capture_output=True,
        text=True,
        check=False,
        cwd=RULE_TESTS.parent,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_has_for_severity_summary_description_and_a_runbook() -> None:
    for rule in alerts():
        name = rule["alert"]
        assert rule.get("for"), f"{name}: no `for:` (pages on a single evaluation)"
        assert rule["labels"]["severity"] in {"page", "ticket"}, name
        annotations = rule["annotations"]
        assert annotations.get("summary") and annotations.get("description"), name
        assert annotations["runbook_url"] == f"docs/runbooks/{name}.md", name
        runbook = (REPO / annotations["runbook_url"]).read_text(encoding="utf-8")
        assert runbook.startswith(f"# {name}"), name
        for section in RUNBOOK_SECTIONS:
            assert section in runbook, f"{name} runbook lacks {section!r}"


def test_every_alert_is_unit_tested_firing_and_not_firing() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in rule_tests():
        for check in case.get("alert_rule_test", []):
            (firing if check["exp_alerts"] else quiet).add(check["alertname"])
    names = {rule["alert"] for rule in alerts()}
    assert names - firing == set(), "alerts never tested firing"
    assert names - quiet == set(), "alerts never tested quiet or resolved"


def test_one_page_per_drop_and_readable_segment_are_tested() -> None:
    """The three defects of the old rules each have a case in the unit tests."""
    checks = [check for case in rule_tests() for check in case.get("alert_rule_test", [])]
    drop = [check for check in checks if check["alertname"] == "ScorestreamSafetyDrop"]
    models = [alert["exp_labels"]["model"] for check in drop for alert in check["exp_alerts"]]
    assert "all models" in models and "" not in models
    # At most one alert per evaluation: the all-cases segment and the model do not both page.
    assert all(len(check["exp_alerts"]) <= 1 for check in drop)
    gate_pages = [
        alert
        for check in checks
        if check["alertname"] == "ScorestreamGateFiring"
        for alert in check["exp_alerts"]
    ]
    assert all(alert["exp_labels"]["gate"] != "safety-drop" for alert in gate_pages)


@pytest.mark.skipif(shutil.which("amtool") is None, reason="prometheus-alertmanager not installed")
def test_alertmanager_config_is_valid_and_routes_pages_apart() -> None:
    config = REPO / "deploy" / "alertmanager" / "alertmanager.yml"
    checked = subprocess.run(
        ["amtool", "check-config", str(config)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    routed = subprocess.run(
        ["amtool", "config", "routes", "test", f"--config.file={config}", "severity=page"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert routed.stdout.strip() == "page", routed.stdout + routed.stderr


def test_compose_runs_alertmanager_and_prometheus_sends_to_it() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text(encoding="utf-8"))
    assert "alertmanager" in compose["services"]
    prometheus = yaml.safe_load(
        (REPO / "deploy" / "prometheus" / "prometheus.yml").read_text(encoding="utf-8")
    )
    targets = prometheus["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert targets == ["alertmanager:9093"]
