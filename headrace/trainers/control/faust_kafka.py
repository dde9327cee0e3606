"""librdkafka client settings (``HEADRACE_KAFKA_CONFIG``) translated for faust/aiokafka, so the
control plane talks to a secured cluster with the same settings as every other client.

Supported: ``security.protocol`` PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL;
``sasl.mechanism(s)`` PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512 with ``sasl.username`` /
``sasl.password``; ``ssl.ca.location``, ``ssl.certificate.location`` + ``ssl.key.location``
(+ ``ssl.key.password``), ``enable.ssl.certificate.verification`` and
``ssl.endpoint.identification.algorithm=none``. Anything else that changes how to connect
(GSSAPI, OAUTHBEARER, PEM strings inline) is refused at start with one line rather than
connecting without it.

``client.rack`` (``HEADRACE_CLIENT_RACK`` or in the config): faust 0.15 has no setting for
it, so :class:`ControlApp` uses a transport whose aiokafka consumer gets ``client_rack``
before it starts (fetch from the nearest replica, KIP-392), like the confluent-kafka clients.
"""

from __future__ import annotations

import ssl
from typing import Any, ClassVar

import faust
from faust.transport import drivers
from faust.transport.drivers import aiokafka as faust_aiokafka

from headrace.core.errors import ConfigError
from headrace.streams.clients import KafkaConnection
from headrace.trainers.control import undecodable

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_UNSUPPORTED = ("ssl.ca.pem", "ssl.certificate.pem", "ssl.key.pem", "sasl.oauthbearer.config",
                "sasl.kerberos.service.name", "sasl.jaas.config")


def broker_urls(conn: KafkaConnection) -> list[str]:
    hosts = [h.strip() for h in conn.bootstrap.split(",") if h.strip()]
    if not hosts:
        raise ConfigError("no Kafka bootstrap servers for the control plane")
    return [f"kafka://{h}" for h in hosts]


Credentials = faust.SASLCredentials | faust.SSLCredentials


def broker_credentials(conn: KafkaConnection) -> Credentials | None:
    """faust's ``broker_credentials`` for ``conn``'s librdkafka settings (None: plaintext)."""
    cfg = {k.lower(): v for k, v in conn.extra.items()}
    for key in _UNSUPPORTED:
        if key in cfg:
            raise ConfigError(f"HEADRACE_KAFKA_CONFIG: {key} is not supported by the control "
                              "plane's Kafka client (aiokafka); use files (*.location)")
    protocol = cfg.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise ConfigError(f"HEADRACE_KAFKA_CONFIG: security.protocol {protocol!r} is not one of "
                          f"{', '.join(PROTOCOLS)}")
    context = ssl_context(cfg) if protocol in ("SSL", "SASL_SSL") else None
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        mechanism = (cfg.get("sasl.mechanism") or cfg.get("sasl.mechanisms") or "").upper()
        if mechanism not in MECHANISMS:
            raise ConfigError(f"HEADRACE_KAFKA_CONFIG: sasl.mechanism {mechanism or '(unset)'!r}"
                              f" is not one of {', '.join(MECHANISMS)}")
        username, password = cfg.get("sasl.username"), cfg.get("sasl.password")
        if not username or not password:
            raise ConfigError("HEADRACE_KAFKA_CONFIG: SASL needs sasl.username and a password "
                              "(sasl.password or HEADRACE_KAFKA_PASSWORD_FILE)")
        return faust.SASLCredentials(username=username, password=password,
                                     ssl_context=context, mechanism=mechanism)
    if context is not None:
        return faust.SSLCredentials(context)
    return None


def ssl_context(cfg: dict[str, str]) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(cafile=cfg.get("ssl.ca.location") or None)
        cert, key = cfg.get("ssl.certificate.location"), cfg.get("ssl.key.location")
        if cert or key:
            if not (cert and key):
                raise ConfigError("HEADRACE_KAFKA_CONFIG: ssl.certificate.location and "
                                  "ssl.key.location go together")
            context.load_cert_chain(cert, key, password=cfg.get("ssl.key.password") or None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"HEADRACE_KAFKA_CONFIG: TLS files unusable: {exc}") from None
    if cfg.get("ssl.endpoint.identification.algorithm", "https").lower() == "none":
        context.check_hostname = False
    if cfg.get("enable.ssl.certificate.verification", "true").lower() == "false":
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def faust_broker_settings(conn: KafkaConnection) -> dict[str, Any]:
    """The keyword arguments of :class:`ControlApp` that say where Kafka is, how to log in,
    and which rack the consumer is in."""
    return {"broker": broker_urls(conn), "broker_credentials": broker_credentials(conn),
            "client_rack": client_rack(conn)}


def client_rack(conn: KafkaConnection) -> str | None:
    return conn.extra.get("client.rack") or conn.client_rack


class _RackConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    rack: ClassVar[str | None] = None

    def _create_consumer(self, loop: Any) -> Any:
        consumer = super()._create_consumer(loop)
        # Read by AIOKafkaConsumer.start() when it builds its fetcher.
        consumer._client_rack = self.app.conf.headrace_client_rack
        return consumer


class _RackConsumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> Any:
        return _RackConsumerThread(self, loop=self.loop, beacon=self.beacon)


class _RackTransport(faust_aiokafka.Transport):
    Consumer = _RackConsumer


class ControlApp(faust.App):
    """A faust app whose Kafka consumer also gets ``client.rack`` and skips record batches it
    cannot decode (``undecodable``)."""

    def __init__(self, *args: Any, client_rack: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        undecodable.install()  # an undecodable batch is skipped and counted, never a crash loop
        self.conf.headrace_client_rack = client_rack

    def _new_transport(self) -> Any:
        url = self.conf.broker_consumer[0]
        if drivers.by_url(url) is not faust_aiokafka.Transport:
            return super()._new_transport()
        return _RackTransport(self.conf.broker_consumer, self)
