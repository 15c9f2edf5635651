"""Deployment files: the Dockerfile (non-root, HEALTHCHECK, lock file), the lock file
against pyproject, the host config for the compose stack, and the Kubernetes kustomize
base validated offline against the Kubernetes schemas (kubernetes-validate) plus the
structure of the Prometheus Operator resources, which those schemas do not cover."""

from __future__ import annotations

import hashlib
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

from topics.provision import bootstrap_servers
from worker.config import load_settings
from worker.ops.broker import EmbeddedBroker

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
BASE = DEPLOY / "k8s" / "base"
KUBERNETES_VERSION = "1.30.0"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


LOCK = DEPLOY / "requirements.lock"
_LOCK_ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)((?:\s*\\\n\s+--hash=\S+)*)", re.M)


def lock_entries() -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) of every pin in the lock."""
    text = LOCK.read_text(encoding="utf-8")
    return {
        canonical(name): (version, re.findall(r"--hash=(\S+)", hashes))
        for name, version, hashes in _LOCK_ENTRY.findall(text)
    }


def lock_pins() -> dict[str, str]:
    return {name: version for name, (version, _hashes) in lock_entries().items()}


def test_dockerfile_runs_as_non_root_with_a_healthcheck_from_the_lock_file() -> None:
    text = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    users = re.findall(r"^USER (\S+)", text, flags=re.MULTILINE)
    assert users and users[-1] not in ("root", "0")
    instructions = text.replace("\\\n", " ")  # join continued lines
    installs = re.findall(r"pip install[^\n]*", instructions)
    assert any(
        "-r deploy/requirements.lock" in step and "--no-deps" in step and "--require-hashes" in step
        for step in installs
    )
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


def test_the_base_image_is_pinned_by_a_required_digest() -> None:
    """`FROM image@digest`, the digest a build argument without a default (no registry
    could be asked for it here), which compose requires from the environment."""
    text = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    froms = re.findall(r"^FROM\s+(\S+)", text, flags=re.MULTILINE)
    assert froms and all("@" in image for image in froms), froms
    args = dict(
        (match[0], match[1] or None)
        for match in re.findall(r"^ARG\s+(\w+)(?:=(\S*))?", text, flags=re.MULTILINE)
    )
    for image in froms:
        reference, digest = image.split("@")
        assert digest == "${PYTHON_DIGEST}" or re.fullmatch(r"sha256:[0-9a-f]{64}", digest)
        if digest == "${PYTHON_DIGEST}":
            assert args["PYTHON_DIGEST"] is None  # no default: a build without it fails
            assert args.get("PYTHON_IMAGE", reference).startswith("python:3.11-slim")
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text(encoding="utf-8"))
    for name, service in compose["services"].items():
        if "build" in service:
            passed = service["build"]["args"]["PYTHON_DIGEST"]
            assert passed.startswith("${PYTHON_DIGEST:?"), name


def test_every_lock_pin_carries_sha256_hashes() -> None:
    entries = lock_entries()
    body = [
        line
        for line in LOCK.read_text(encoding="utf-8").splitlines()
        if line and not line.startswith(("#", " "))
    ]
    assert len(entries) == len(body) and len(entries) > 50  # every pin parsed
    for name, (_version, hashes) in entries.items():
        assert hashes, f"{name} has no hash"
        assert all(re.fullmatch(r"sha256:[0-9a-f]{64}", item) for item in hashes), name
    torch_wheels = sorted(Path("/opt/wheels").glob("torch-2.13.0+cpu-*.whl"))
    if torch_wheels:  # the CPU wheel this machine installs: its hash is the lock's
        digest = hashlib.sha256(torch_wheels[0].read_bytes()).hexdigest()
        assert f"sha256:{digest}" in entries["torch"][1]


def test_pip_installs_from_the_lock_only_with_matching_hashes(tmp_path: Path) -> None:
    """pip's own hash check on two small pins: the lock's entries pass, and a wrong hash
    fails the install."""
    text = LOCK.read_text(encoding="utf-8")
    entries = [m.group(0) for m in _LOCK_ENTRY.finditer(text) if m.group(1) in ("six", "idna")]
    assert entries, "six or idna is no longer pinned: pick another small pin"
    good = tmp_path / "good.txt"
    good.write_text("\n".join(entries) + "\n", encoding="utf-8")
    bad = tmp_path / "bad.txt"
    bad.write_text(re.sub(r"sha256:[0-9a-f]{64}", "sha256:" + "0" * 64, good.read_text()))

    def download(requirements: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                *(sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes"),
                *("--only-binary", ":all:", "-d", str(tmp_path / requirements.stem)),
                *("-r", str(requirements)),
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )

    passed = download(good)
    assert passed.returncode == 0, passed.stderr[-2000:]
    failed = download(bad)
    assert failed.returncode != 0 and "DO NOT MATCH THE HASHES" in failed.stderr


def test_the_host_config_feeds_the_compose_stack_from_the_repository_root() -> None:
    local = load_settings(DEPLOY / "config.local.yaml", environ={})
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text(encoding="utf-8"))
    kafka = compose["services"]["kafka"]
    advertised = kafka["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    assert "EXTERNAL://localhost:9094" in advertised and "127.0.0.1:9094:9094" in kafka["ports"]
    assert local.broker == "kafka://localhost:9094"
    # Paths are relative to the repository root, where the README runs the command.
    assert local.alignment.personas_dir is not None
    assert (REPO / local.alignment.personas_dir).is_dir()
    assert all((REPO / path).is_file() for path in local.extraction.schemas.values())
    container = load_settings(DEPLOY / "config.yaml", environ={})
    assert local.gates == container.gates and local.windows == container.windows
    # A worker on the host serves /metrics to the host only; in a container, to the
    # container's network (compose publishes nothing of the worker).
    assert local.metrics_host == "127.0.0.1" and container.metrics_host == "0.0.0.0"


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
    assert {"PodDisruptionBudget", "ScaledObject"} <= kinds
    for doc in docs:
        if doc["apiVersion"].startswith(("monitoring.coreos.com/", "keda.sh/")):
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


def test_kubernetes_pods_are_hardened_and_fenced_by_a_network_policy() -> None:
    docs = {doc["kind"]: doc for doc in kustomize_build()}
    pod = docs["Deployment"]["spec"]["template"]
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = spec["containers"]
    assert container["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    policy = docs["NetworkPolicy"]
    selected = policy["spec"]["podSelector"]["matchLabels"]
    assert selected.items() <= pod["metadata"]["labels"].items()
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    # In: the metrics port only, from Prometheus's namespace only.
    container_ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    (rule,) = policy["spec"]["ingress"]
    assert [port["port"] for port in rule["ports"]] == ["metrics"]
    assert "metrics" in container_ports
    assert rule["from"] and all("namespaceSelector" in peer for peer in rule["from"])
    assert all("podSelector" not in peer and "ipBlock" not in peer for peer in rule["from"])
    # Out: DNS, Kafka and HTTPS, no other port.
    allowed = {
        (port["protocol"], port["port"], port.get("endPort", port["port"]))
        for egress in policy["spec"]["egress"]
        for port in egress["ports"]
    }
    assert allowed == {("UDP", 53, 53), ("TCP", 53, 53), ("TCP", 9092, 9094), ("TCP", 443, 443)}


def test_compose_publishes_on_loopback_only_and_grafana_has_no_default_password() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text(encoding="utf-8"))
    published = {name: service.get("ports", []) for name, service in compose["services"].items()}
    assert published["kafka"] and published["alertmanager"] and published["grafana"]
    for name, ports in published.items():
        for port in ports:
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} on every interface"
    grafana = compose["services"]["grafana"]["environment"]
    password = grafana["GF_SECURITY_ADMIN_PASSWORD"]
    # ${VAR:?message}: compose refuses to start when the variable is unset or empty.
    assert re.fullmatch(r"\$\{GRAFANA_ADMIN_PASSWORD:\?[^}]+\}", password), password
    assert grafana.get("GF_AUTH_ANONYMOUS_ORG_ROLE", "Viewer") == "Viewer"
    assert str(grafana.get("GF_USERS_ALLOW_SIGN_UP", "true")).lower() == "false"


# What a graceful stop does besides its bounded steps: finish the batches in hand, commit,
# flush the producers, leave the group, shut the event loop down (3-6 s measured by
# bench/membership.py on a 2-core machine), with room for a loaded node.
STOP_OVERHEAD_S = 15.0


def test_kubernetes_scales_on_the_input_lag_of_the_worker_group() -> None:
    """The KEDA ScaledObject (a CRD: no schema in kubernetes-validate, so its fields are
    checked here): it scales the Deployment on the lag of the worker's consumer group
    (Faust's group id is the app id) on the input topic, at the configured broker, between
    1 or more workers and no more than the input topic has partitions."""
    docs = {doc["kind"]: doc for doc in kustomize_build()}
    scaled, deployment = docs["ScaledObject"], docs["Deployment"]
    settings = load_settings(BASE / "config.yaml", environ={})
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    spec = scaled["spec"]
    target = spec["scaleTargetRef"]
    assert target["name"] == deployment["metadata"]["name"]
    assert target.get("kind", "Deployment") == "Deployment"
    assert target.get("apiVersion", "apps/v1") == "apps/v1"
    assert isinstance(spec["minReplicaCount"], int) and spec["minReplicaCount"] >= 1
    assert isinstance(spec["maxReplicaCount"], int)
    assert spec["minReplicaCount"] <= spec["maxReplicaCount"] <= settings.stream.partitions
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "kafka"
    metadata = trigger["metadata"]
    assert all(isinstance(value, str) for value in metadata.values()), "KEDA wants strings"
    assert metadata["topic"] == settings.topics.input
    assert metadata["consumerGroup"] == settings.app_id
    assert settings.broker is not None
    assert metadata["bootstrapServers"] == bootstrap_servers(settings.broker)
    assert int(metadata["lagThreshold"]) > 0
    assert metadata.get("allowIdleConsumers", "false") == "false"
    assert metadata.get("offsetResetPolicy", "latest") == "earliest"  # Faust's reset policy
    # The replica count belongs to the autoscaler: a `replicas` in the Deployment would
    # reset it on every `kubectl apply`.
    assert "replicas" not in deployment["spec"]


def test_kubernetes_disruptions_and_stops_leave_time_for_the_handover() -> None:
    """One voluntary disruption at a time (the PDB selects the Deployment's pods), a
    rolling deploy that never runs a worker short, a startup probe patient enough for a
    slow start, and a termination grace longer than a graceful stop can take, so SIGKILL
    never cuts the leave from the group short."""
    docs = {doc["kind"]: doc for doc in kustomize_build()}
    deployment, budget = docs["Deployment"], docs["PodDisruptionBudget"]
    pod = deployment["spec"]["template"]
    selector = budget["spec"]["selector"]["matchLabels"]
    assert selector and selector.items() <= pod["metadata"]["labels"].items()
    assert selector == deployment["spec"]["selector"]["matchLabels"]
    assert budget["spec"].get("maxUnavailable") == 1 and "minAvailable" not in budget["spec"]
    rolling = deployment["spec"]["strategy"]["rollingUpdate"]
    assert rolling["maxUnavailable"] == 0 and rolling["maxSurge"] >= 1
    settings = load_settings(BASE / "config.yaml", environ={})
    # The drain of queued evaluation records is bounded by rebalance_timeout; a record
    # being scored by limits.scoring_deadline; the rest by STOP_OVERHEAD_S.
    stop_bound = (
        settings.stream.rebalance_timeout + settings.limits.scoring_deadline + STOP_OVERHEAD_S
    )
    grace = pod["spec"]["terminationGracePeriodSeconds"]
    (container,) = pod["spec"]["containers"]
    pre_stop = container.get("lifecycle", {}).get("preStop")
    pre_stop_s = 0.0
    if pre_stop is not None:  # a sleep before SIGTERM counts against the grace
        assert set(pre_stop) == {"sleep"}, "a preStop other than a sleep has no known length"
        pre_stop_s = float(pre_stop["sleep"]["seconds"])
    assert grace - pre_stop_s > stop_bound, (grace, pre_stop_s, stop_bound)
    # A start that loads slowly (up to 122 s on a loaded 2-core machine) is not taken for
    # a dead worker: the startup probe allows minutes before liveness counts.
    startup = container["startupProbe"]
    assert startup["httpGet"] == container["livenessProbe"]["httpGet"]
    allowed = startup.get("initialDelaySeconds", 0) + startup.get(
        "periodSeconds", 10
    ) * startup.get("failureThreshold", 3)
    assert allowed >= 150, allowed
    # The worker is the container's first process (exec form): SIGTERM reaches it.
    dockerfile = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(r'^ENTRYPOINT \["scorestream"\]', dockerfile, flags=re.MULTILINE)
    assert "command" not in container


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
