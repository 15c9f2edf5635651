"""The `kafka:` section reaches every Kafka client: TLS with a CA and a client certificate
made in the test (a real handshake on loopback), SASL PLAIN / SCRAM settings in the
aiokafka clients and in Faust's credentials, replication of the topics we create.

The embedded broker (Tansu 0.6) cannot serve TLS here, so the TLS peer is a loopback TLS
server that checks the client certificate and reads the first Kafka request."""

from __future__ import annotations

import shutil
import socket
import ssl
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

from topics.provision import new_topics
from worker.config import ConfigError, Settings, load_settings
from worker.ops.kafka_security import aiokafka_options, faust_options, internal_topic_configs

REPO = Path(__file__).resolve().parent.parent
API_VERSIONS = 18  # the first request every Kafka client sends


def settings(**kafka: Any) -> Settings:
    return load_settings(None, overrides={"kafka": kafka}, environ={})


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@dataclass
class Certificates:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


def sign(directory: Path, name: str, subject: str, ca: str, extensions: str) -> None:
    key, csr, cert = (directory / f"{name}.{ext}" for ext in ("key", "csr", "pem"))
    openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
        "-subj", subject,
    )  # fmt: skip
    (directory / f"{name}.ext").write_text(extensions, encoding="utf-8")
    openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(directory / f"{ca}.pem"),
        "-CAkey", str(directory / f"{ca}.key"), "-CAcreateserial", "-out", str(cert),
        "-days", "1", "-extfile", str(directory / f"{name}.ext"),
    )  # fmt: skip


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    directory = tmp_path_factory.mktemp("tls")
    for ca in ("ca", "other-ca"):
        openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", str(directory / f"{ca}.key"), "-out", str(directory / f"{ca}.pem"),
            "-subj", f"/CN=scorestream test {ca}",
        )  # fmt: skip
    sign(directory, "server", "/CN=localhost", "ca", "subjectAltName=IP:127.0.0.1\n")
    sign(directory, "client", "/CN=scorestream-client", "ca", "extendedKeyUsage=clientAuth\n")
    return Certificates(
        ca=directory / "ca.pem",
        server_cert=directory / "server.pem",
        server_key=directory / "server.key",
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
        other_ca=directory / "other-ca.pem",
    )


@dataclass
class TlsPeer:
    """What the loopback TLS server saw."""

    port: int
    client_names: list[str] = field(default_factory=list)
    api_keys: list[int] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


@pytest.fixture
def tls_peer(certificates: Certificates) -> Iterator[TlsPeer]:
    """A TLS server on loopback that requires a client certificate from the test CA,
    reads the first Kafka request header and never answers."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(certificates.ca))
    context.load_cert_chain(str(certificates.server_cert), str(certificates.server_key))
    context.verify_mode = ssl.CERT_REQUIRED
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    peer = TlsPeer(int(listener.getsockname()[1]))
    stop = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        while not stop.is_set():
            try:
                raw, _ = listener.accept()
            except OSError:
                continue
            raw.settimeout(10)
            try:
                tls = context.wrap_socket(raw, server_side=True)
                subject = dict(item[0] for item in tls.getpeercert()["subject"])
                peer.client_names.append(subject["commonName"])
                header = tls.recv(6)  # int32 size, int16 api_key
                peer.api_keys.append(struct.unpack(">ih", header)[1])
                held.append(tls)
            except (OSError, ssl.SSLError) as exc:
                peer.failures.append(type(exc).__name__)
                raw.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield peer
    finally:
        stop.set()
        thread.join(2)
        for connection in held:
            connection.close()
        listener.close()


def run_command(args: list[str], config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "PYTHONPATH": str(REPO)},
        cwd=config.parent,
    )


def tls_config(path: Path, port: int, certificates: Certificates, ca: Path) -> Path:
    path.write_text(
        f"broker: kafka://127.0.0.1:{port}\n"
        "stream: {connect_timeout: 3s}\n"
        "kafka:\n"
        "  security_protocol: SSL\n"
        f"  ssl_cafile: {ca}\n"
        f"  ssl_certfile: {certificates.client_cert}\n"
        f"  ssl_keyfile: {certificates.client_key}\n",
        encoding="utf-8",
    )
    return path


@pytest.mark.system
@pytest.mark.parametrize(
    "args", [["topics", "list"], ["produce", str(REPO / "examples/safe/envelopes.jsonl")]]
)
def test_commands_speak_tls_with_the_client_certificate(
    args: list[str], tls_peer: TlsPeer, certificates: Certificates, tmp_path: Path
) -> None:
    config = tls_config(tmp_path / "tls.yaml", tls_peer.port, certificates, certificates.ca)
    done = run_command(args, config)
    # The handshake verified both sides; the peer then never answers the Kafka request.
    assert tls_peer.client_names and set(tls_peer.client_names) == {"scorestream-client"}
    assert tls_peer.api_keys[0] == API_VERSIONS
    assert done.returncode == 3
    assert "did not answer within 3s" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.system
def test_a_server_certificate_from_another_ca_is_refused(
    tls_peer: TlsPeer, certificates: Certificates, tmp_path: Path
) -> None:
    config = tls_config(tmp_path / "tls.yaml", tls_peer.port, certificates, certificates.other_ca)
    done = run_command(["topics", "list"], config)
    assert done.returncode == 3 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert tls_peer.client_names == [] and tls_peer.api_keys == []


async def test_sasl_scram_over_tls_reaches_the_aiokafka_client(
    certificates: Certificates,
) -> None:
    options = aiokafka_options(
        settings(
            security_protocol="SASL_SSL",
            ssl_cafile=str(certificates.ca),
            sasl_mechanism="SCRAM-SHA-512",
            sasl_username="scorer",
            sasl_password="s3cret",
        )
    )
    admin = AIOKafkaAdminClient(bootstrap_servers="127.0.0.1:1", **options)
    client = admin._client
    assert client._security_protocol == "SASL_SSL"
    assert client._sasl_mechanism == "SCRAM-SHA-512"
    assert client._sasl_plain_username == "scorer"
    assert client._sasl_plain_password == "s3cret"
    subjects = [
        dict(item[0] for item in ca["subject"]) for ca in client._ssl_context.get_ca_certs()
    ]
    assert {"commonName": "scorestream test ca"} in subjects


def test_sasl_plain_without_tls_reaches_faust_credentials() -> None:
    options = faust_options(
        settings(
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_username="scorer",
            sasl_password="s3cret",
            replication_factor=3,
        )
    )
    assert options["topic_replication_factor"] == 3
    auth = credentials_to_aiokafka_auth(options["broker_credentials"])
    assert auth == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "scorer",
        "sasl_plain_password": "s3cret",
        "ssl_context": None,
    }


def test_tls_reaches_faust_credentials(certificates: Certificates) -> None:
    options = faust_options(
        settings(
            security_protocol="SSL",
            ssl_cafile=str(certificates.ca),
            ssl_certfile=str(certificates.client_cert),
            ssl_keyfile=str(certificates.client_key),
        )
    )
    auth = credentials_to_aiokafka_auth(options["broker_credentials"])
    assert auth["security_protocol"] == "SSL"
    assert auth["ssl_context"].verify_mode == ssl.CERT_REQUIRED


def test_replication_and_min_insync_replicas_for_catalog_and_internal_topics() -> None:
    chosen = settings(replication_factor=3, min_insync_replicas=2)
    topics = new_topics(None, None, chosen.kafka.replication_factor, 2)
    assert {topic.replication_factor for topic in topics} == {3}
    assert {topic.topic_configs["min.insync.replicas"] for topic in topics} == {"2"}
    assert internal_topic_configs(chosen) == {"min.insync.replicas": "2"}
    assert internal_topic_configs(settings()) == {}
    assert {topic.replication_factor for topic in new_topics()} == {1}


@pytest.mark.parametrize(
    ("kafka", "message"),
    [
        ({"security_protocol": "SASL_SSL"}, "needs sasl_mechanism"),
        ({"sasl_mechanism": "PLAIN"}, "needs security_protocol SASL"),
        ({"security_protocol": "SSL", "ssl_certfile": "c.pem"}, "go together"),
        ({"ssl_cafile": "ca.pem"}, "need security_protocol SSL"),
        ({"replication_factor": 1, "min_insync_replicas": 2}, "must not exceed"),
        ({"sasl_mechanism": "GSSAPI"}, "kafka.sasl_mechanism"),
    ],
)
def test_inconsistent_kafka_settings_fail_naming_the_section(
    kafka: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match="kafka") as failure:
        settings(**kafka)
    assert message in str(failure.value)


def test_a_missing_ca_file_is_a_config_error_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"kafka\.ssl_cafile"):
        aiokafka_options(settings(security_protocol="SSL", ssl_cafile=str(tmp_path / "nope")))
