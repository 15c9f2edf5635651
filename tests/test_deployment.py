"""Deployment files: the Dockerfile (non-root, HEALTHCHECK, lock file), the lock file
against pyproject, the host config for the compose stack, and the Kubernetes kustomize
base validated offline against the Kubernetes schemas (kubernetes-validate) plus the
structure of the Prometheus Operator resources, which those schemas do not cover."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement

from worker.broker import EmbeddedBroker
from worker.config import load_settings

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
BASE = DEPLOY / "k8s" / "base"
KUBERNETES_VERSION = "1.30.0"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_pins() -> dict[str, str]:
    pins = {}
    for line in (DEPLOY / "requirements.lock").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[canonical(name)] = version
    return pins


def test_dockerfile_runs_as_non_root_with_a_healthcheck_from_the_lock_file() -> None:
    text = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    users = re.findall(r"^USER (\S+)", text, flags=re.MULTILINE)
    assert users and users[-1] not in ("root", "0")
    instructions = text.replace("\\\n", " ")  # join continued lines
    installs = re.findall(r"pip install[^\n]*", instructions)
    assert any("-r deploy/requirements.lock" in step and "--no-deps" in step for step in installs)
    assert all("--no-deps" in step for step in installs), "every install must be pinned"
    (healthcheck,) = re.findall(r"^HEALTHCHECK .*", instructions, flags=re.MULTILINE)
    assert "/healthz" in healthcheck
    assert "COPY LICENSE" in text or "LICENSE" in text


def test_the_lock_pins_every_runtime_dependency_within_its_range() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    pins = lock_pins()
    for line in project["dependencies"]:
        requirement = Requirement(line)
        version = pins.get(canonical(requirement.name))
        assert version is not None, f"{requirement.name} is not in the lock"
        assert requirement.specifier.contains(version, prereleases=True), (
            f"{requirement.name}=={version} is outside {requirement.specifier}"
        )
    assert pins["torch"].endswith("+cpu")


def test_the_host_config_feeds_the_compose_stack_from_the_repository_root() -> None:
    local = load_settings(DEPLOY / "config.local.yaml", environ={})
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text(encoding="utf-8"))
    kafka = compose["services"]["kafka"]
    advertised = kafka["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    assert "EXTERNAL://localhost:9094" in advertised and "9094:9094" in kafka["ports"]
    assert local.broker == "kafka://localhost:9094"
    # Paths are relative to the repository root, where the README runs the command.
    assert local.alignment.personas_dir is not None
    assert (REPO / local.alignment.personas_dir).is_dir()
    assert all((REPO / path).is_file() for path in local.extraction.schemas.values())
    container = load_settings(DEPLOY / "config.yaml", environ={})
    assert local.gates == container.gates and local.windows == container.windows


def test_license_is_mit() -> None:
    assert (REPO / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")


def kustomize_build() -> list[dict[str, Any]]:
    """`kubectl kustomize` of the base when kubectl is installed, else the listed resource
    files (the ConfigMap generator is then checked separately)."""
    if shutil.which("kubectl"):
        done = subprocess.run(
            ["kubectl", "kustomize", str(BASE)], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
        return [doc for doc in yaml.safe_load_all(done.stdout) if doc]
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text(encoding="utf-8"))
    return [
        yaml.safe_load((BASE / name).read_text(encoding="utf-8"))
        for name in kustomization["resources"]
    ]


def test_kubernetes_base_validates_against_the_kubernetes_schemas() -> None:
    validate = pytest.importorskip("kubernetes_validate")
    docs = kustomize_build()
    kinds = {doc["kind"] for doc in docs}
    assert {"Deployment", "Service", "ServiceMonitor", "PrometheusRule"} <= kinds
    for doc in docs:
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # CRDs: checked below
        validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_kubernetes_wiring_probes_config_and_scraping() -> None:
    docs = {doc["kind"]: doc for doc in kustomize_build()}
    deployment, service = docs["Deployment"], docs["Service"]
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    labels = pod["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    port_names = {port["name"] for port in service["spec"]["ports"]}
    monitor = docs["ServiceMonitor"]
    assert (
        monitor["spec"]["selector"]["matchLabels"].items()
        <= service["metadata"].get("labels", service["spec"]["selector"]).items()
    )
    assert {endpoint["port"] for endpoint in monitor["spec"]["endpoints"]} <= port_names
    # The job label the alert rules use: up{job="scorestream"}.
    assert labels[monitor["spec"]["jobLabel"]] == "scorestream"
    if "ConfigMap" in docs:  # generated by kustomize
        configmap = docs["ConfigMap"]
        volumes = {volume["name"]: volume for volume in pod["spec"]["volumes"]}
        assert volumes["config"]["configMap"]["name"] == configmap["metadata"]["name"]


def test_kubernetes_config_loads_and_matches_the_compose_gates(tmp_path: Path) -> None:
    config = load_settings(BASE / "config.yaml", environ={})
    container = load_settings(DEPLOY / "config.yaml", environ={})
    assert config.gates == container.gates and config.windows == container.windows
    assert config.kafka.replication_factor == 3 and config.kafka.min_insync_replicas == 2


def test_prometheus_rule_is_generated_from_the_alert_rules_file() -> None:
    rule = yaml.safe_load((BASE / "prometheusrule.yaml").read_text(encoding="utf-8"))
    alerts = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text(encoding="utf-8"))
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["kind"] == "PrometheusRule"
    assert rule["spec"]["groups"] == alerts["groups"], (
        "run `python deploy/k8s/render_rules.py` after editing alerts.yml"
    )


@pytest.mark.integration
def test_the_readme_worker_command_starts_outside_the_container(broker: EmbeddedBroker) -> None:
    """`scorestream worker --config deploy/config.local.yaml` from the repository root
    (here against the test's broker and a free metrics port)."""
    env = {
        **os.environ,
        "SCORESTREAM_BROKER": broker.url,
        "SCORESTREAM_METRICS_PORT": "0",
        "SCORESTREAM_STREAM__SESSION_TIMEOUT": "6",
        "SCORESTREAM_STREAM__REBALANCE_TIMEOUT": "6",
        "SCORESTREAM_STREAM__HEARTBEAT_INTERVAL": "1",
        "PYTHONPATH": str(REPO),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "worker", "worker", "--config", "deploy/config.local.yaml"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output: list[str] = []
    try:
        deadline = time.monotonic() + 120
        assert process.stdout is not None
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            output.append(line)
            if "scorestream worker ready" in line:
                break
        assert any("scorestream worker ready" in line for line in output), "".join(output[-40:])
    finally:
        process.terminate()
        process.wait(30)
