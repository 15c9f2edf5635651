"""Kafka connection options from the `kafka:` config section: TLS (CA, client certificate),
SASL PLAIN / SCRAM-SHA-256 / SCRAM-SHA-512, replication of the topics scorestream creates.

Two views of the same settings: `aiokafka_options` for the clients the commands open
(admin, producer) and `faust_options` for the worker's Faust app, plus
`internal_topic_configs` for Faust's internal and changelog topics.
OAUTHBEARER is not offered: aiokafka needs a token-provider object, not configuration.
"""

from __future__ import annotations

import ssl
from typing import Any

from faust.auth import SASLCredentials, SSLCredentials

from worker.config import ConfigError, KafkaSettings, Settings


def ssl_context(kafka: KafkaSettings) -> ssl.SSLContext | None:
    """A client TLS context (system CAs unless `ssl_cafile`), or None without TLS."""
    if not kafka.security_protocol.endswith("SSL"):
        return None
    try:
        context = ssl.create_default_context(
            cafile=str(kafka.ssl_cafile) if kafka.ssl_cafile else None
        )
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"kafka.ssl_cafile: cannot load {kafka.ssl_cafile}: {exc}") from None
    context.check_hostname = kafka.ssl_check_hostname
    if kafka.ssl_certfile is not None:
        password = kafka.ssl_key_password
        try:
            context.load_cert_chain(
                str(kafka.ssl_certfile),
                str(kafka.ssl_keyfile),
                password.get_secret_value() if password else None,
            )
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"kafka.ssl_certfile/ssl_keyfile: cannot load {kafka.ssl_certfile}: {exc}"
            ) from None
    return context


def aiokafka_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for `AIOKafkaAdminClient` / `AIOKafkaProducer` /
    `AIOKafkaConsumer`: security and the request timeout (`stream.connect_timeout`)."""
    kafka = settings.kafka
    options: dict[str, Any] = {
        "security_protocol": kafka.security_protocol,
        "request_timeout_ms": int(settings.stream.connect_timeout * 1000),
    }
    context = ssl_context(kafka)
    if context is not None:
        options["ssl_context"] = context
    if kafka.security_protocol.startswith("SASL_"):
        assert kafka.sasl_password is not None  # checked by KafkaSettings
        options["sasl_mechanism"] = kafka.sasl_mechanism
        options["sasl_plain_username"] = kafka.sasl_username
        options["sasl_plain_password"] = kafka.sasl_password.get_secret_value()
    return options


def faust_options(settings: Settings) -> dict[str, Any]:
    """Faust `App` options: broker credentials and the replication factor of Faust's
    internal and changelog topics. Merge into the app's options (`options.update(...)`)."""
    kafka = settings.kafka
    options: dict[str, Any] = {"topic_replication_factor": kafka.replication_factor}
    context = ssl_context(kafka)
    if kafka.security_protocol.startswith("SASL_"):
        assert kafka.sasl_password is not None  # checked by KafkaSettings
        options["broker_credentials"] = SASLCredentials(
            username=kafka.sasl_username,
            password=kafka.sasl_password.get_secret_value(),
            ssl_context=context,
            mechanism=kafka.sasl_mechanism,
        )
    elif context is not None:
        options["broker_credentials"] = SSLCredentials(context)
    return options


def internal_topic_configs(settings: Settings) -> dict[str, str]:
    """Topic configs for Faust's internal and changelog topics (`min.insync.replicas`):
    pass as `extra_topic_configs=` to tables and `config=` to internal `app.topic`s."""
    if settings.kafka.min_insync_replicas is None:
        return {}
    return {"min.insync.replicas": str(settings.kafka.min_insync_replicas)}


__all__ = ["aiokafka_options", "faust_options", "internal_topic_configs", "ssl_context"]
