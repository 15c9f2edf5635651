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


RECORDED = {
    rule["record"]: rule["expr"]
    for group in yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    for rule in group["rules"]
    if "record" in rule
}


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
        if name == "ScorestreamGateFiring":  # the gate's configured severity
            assert "severity" in rule["expr"] + RECORDED["scorestream:gate_alert"]
        else:
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


def test_gates_are_the_one_source_of_score_alerts() -> None:
    """No rule re-derives a threshold from the window values: score alerts come from the
    gates, which page by their own severity (safety-drop pages), with a drill-down."""
    text = RULES.read_text(encoding="utf-8")
    rules = [rule for group in yaml.safe_load(text)["groups"] for rule in group["rules"]]
    assert all("scorestream_window_value" not in rule["expr"] for rule in rules)
    assert "safety-drop" not in "".join(rule["expr"] for rule in rules)
    [gate_alert] = [rule for rule in alerts() if rule["alert"] == "ScorestreamGateFiring"]
    assert "scorestream results --gate" in gate_alert["annotations"]["drilldown"]
    checks = [check for case in rule_tests() for check in case.get("alert_rule_test", [])]
    gate_checks = [check for check in checks if check["alertname"] == "ScorestreamGateFiring"]
    fired = [alert["exp_labels"] for check in gate_checks for alert in check["exp_alerts"]]
    assert {"page", "ticket"} == {labels["severity"] for labels in fired}
    assert "all models" in {labels["model"] for labels in fired}
    # At most one alert per evaluation: the all-cases segment and the model do not both page.
    assert all(len(check["exp_alerts"]) <= 1 for check in gate_checks)


def test_shipped_configs_page_on_the_safety_drop_gate_only() -> None:
    shipped = (
        REPO / "deploy" / "config.yaml",
        REPO / "deploy" / "config.local.yaml",
        REPO / "deploy" / "config.embedded.yaml",
        REPO / "deploy" / "k8s" / "base" / "config.yaml",
        REPO / "examples" / "demo" / "config.yaml",
        REPO / "examples" / "backfill" / "config.yaml",
        REPO / "examples" / "gates.yaml",
    )
    for path in shipped:
        gates = yaml.safe_load(path.read_text(encoding="utf-8"))["gates"]
        severities = {gate["name"]: gate.get("severity", "ticket") for gate in gates}
        assert severities["safety-drop"] == "page", path
        assert {name for name, level in severities.items() if level == "page"} == {"safety-drop"}, (
            path
        )


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
