"""Settings: layering, the seed's SAFE_V0_* variables, errors that name the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from worker.config import ConfigError, format_duration, load_settings, parse_duration


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_match_the_interface(tmp_path: Path) -> None:
    settings = load_settings(environ={}, safe_config_json=tmp_path / "none.json")
    assert settings.metrics_port == 9108
    assert settings.grace == 10.0
    assert settings.max_record_bytes == 1024 * 1024
    assert settings.dlq_max_raw_bytes == 64 * 1024
    assert settings.safe.thresholds.AH.pass_ == 1.0
    assert settings.alignment.max_expected_variance == 0.1
    assert settings.extraction.metrics.relaxed.match_mode == "include_or_char_overlap"


def test_flag_beats_environment_beats_file(tmp_path: Path) -> None:
    config = write(tmp_path / "c.yaml", "metrics_port: 1111\nsegment_by: [tenant]\n")
    env = {"SCORESTREAM_METRICS_PORT": "2222"}
    settings = load_settings(config, environ=env, safe_config_json=tmp_path / "none.json")
    assert settings.metrics_port == 2222
    assert settings.segment_by == ["tenant"]
    flagged = load_settings(
        config, overrides={"metrics_port": 3333}, environ=env, safe_config_json=tmp_path / "n"
    )
    assert flagged.metrics_port == 3333


def test_seed_environment_and_safe_config_json(tmp_path: Path) -> None:
    safe_json = write(
        tmp_path / "safe.config.json",
        json.dumps({"weights": {"CR": 1.0, "AH": 1.5, "AC": 1.0}, "strictAH": False}),
    )
    env = {"SAFE_V0_CR_PASS": "0.9", "SAFE_V0_AH_STRICT": "true"}
    settings = load_settings(environ=env, safe_config_json=safe_json)
    assert settings.safe.weights.AH == 1.5
    assert settings.safe.thresholds.CR.pass_ == 0.9
    assert settings.safe.strict_ah is True  # environment beats the file


@pytest.mark.parametrize(
    ("yaml_text", "key"),
    [
        ("alignment: {max_expected_variance: -1}", "alignment.max_expected_variance"),
        ("windows: [{size: soon}]", "windows.0.size"),
        ("safe: {weights: {CR: 0, AH: 0, AC: 0}}", "safe.weights"),
        ("extraction: {metrics: {relaxed: {match_mode: fuzzy}}}", "relaxed.match_mode"),
        ("brokr: kafka://x:1", "brokr"),
        ("suites: [safe, alignmnet]", "suites"),
    ],
)
def test_bad_config_names_the_key(tmp_path: Path, yaml_text: str, key: str) -> None:
    config = write(tmp_path / "bad.yaml", yaml_text)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")) as info:
        load_settings(config, environ={}, safe_config_json=tmp_path / "none.json")
    assert str(config) in str(info.value)


def test_durations_round_trip() -> None:
    assert parse_duration("5m") == 300.0
    assert parse_duration("250ms") == 0.25
    assert parse_duration(90) == 90.0
    assert format_duration(3600) == "1h"
    assert format_duration(10) == "10s"
    with pytest.raises(ValueError):
        parse_duration("-1s")


def test_a_wait_may_be_zero_where_a_window_may_not() -> None:
    settings = load_settings(None, overrides={"stream": {"producer_linger": "0s"}}, environ={})
    assert settings.stream.producer_linger == 0.0
    with pytest.raises(ConfigError, match="producer_linger"):
        load_settings(None, overrides={"stream": {"producer_linger": -0.5}}, environ={})
    with pytest.raises(ConfigError, match="windows"):
        load_settings(None, overrides={"windows": [{"size": 0}]}, environ={})


@pytest.mark.parametrize(
    "secret",
    [
        "pass #word",  # YAML took everything after " #" as a comment: "pass"
        "yes",  # YAML 1.1: a boolean
        "0123",  # YAML: the number 123 (or 83)
        "[not, a, list]",
        "{a: b}",
        "null",
        "&anchor value",
        "'quoted'",
        " padded ",
    ],
)
def test_secrets_from_the_environment_are_taken_as_plain_strings(
    tmp_path: Path, secret: str
) -> None:
    env = {
        "SCORESTREAM_KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
        "SCORESTREAM_KAFKA__SASL_MECHANISM": "SCRAM-SHA-512",
        "SCORESTREAM_KAFKA__SASL_USERNAME": secret,
        "SCORESTREAM_KAFKA__SASL_PASSWORD": secret,
        "SCORESTREAM_KAFKA__SSL_KEY_PASSWORD": secret,
    }
    settings = load_settings(environ=env, safe_config_json=tmp_path / "none.json")
    kafka = settings.kafka
    assert kafka.sasl_password is not None and kafka.sasl_password.get_secret_value() == secret
    assert kafka.ssl_key_password is not None
    assert kafka.ssl_key_password.get_secret_value() == secret
    assert kafka.sasl_username == secret


def test_other_settings_from_the_environment_are_still_decoded(tmp_path: Path) -> None:
    env = {
        "SCORESTREAM_SEGMENT_BY": "[model, tenant]",
        "SCORESTREAM_METRICS_PORT": "9200",
        "SCORESTREAM_SAFE__STRICT_AH": "true",
        "SCORESTREAM_METRICS_HOST": "127.0.0.1",
        "SCORESTREAM_BROKER": "kafka://broker:9092 #primary",
    }
    settings = load_settings(environ=env, safe_config_json=tmp_path / "none.json")
    assert settings.segment_by == ["model", "tenant"]
    assert settings.metrics_port == 9200
    assert settings.safe.strict_ah is True
    assert settings.metrics_host == "127.0.0.1"
    assert settings.broker == "kafka://broker:9092 #primary"  # text: as given
