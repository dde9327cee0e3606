"""The control plane's faust app uses the same Kafka settings as every other client.

What could and could not be shown here: the embedded broker (Tansu 0.6) has no way to
provision SASL users (its ``--authentication`` switch has no user store we can fill before a
client can log in), so no SASL handshake is made. Shown instead: a SASL_SSL / SCRAM-SHA-512
client config (password from ``HEADRACE_KAFKA_PASSWORD_FILE``, CA from ``ssl.ca.location``)
becomes the faust app's ``broker_credentials`` and the exact aiokafka connection arguments;
unsupported settings stop the start with one line; and a control plane given an explicit
PLAINTEXT client config consumes train requests from the real broker and answers /livez and
/readyz, and fails /livez when its broker goes away.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import faust
import pytest
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

from headrace.contracts import JobEventKind
from headrace.core.errors import ConfigError
from headrace.core.settings import load_settings
from headrace.streams.broker import EmbeddedBroker
from headrace.streams.clients import KafkaConnection
from headrace.streams.connection import connection_for
from headrace.streams.producing import send_events
from headrace.streams.topics import ControlTopics
from headrace.trainers import jobs
from headrace.trainers.control.app import build_app
from headrace.trainers.control.app_config import ControlAppConfig, ControlHooks, topic_specs
from headrace.trainers.control.faust_kafka import broker_credentials
from headrace.trainers.control.health import ControlHealth
from tests.fixtures import eventually
from tests.trainers.conftest import REPO, job_env, request, stop, wait_events

HOOKS = ControlHooks(on_request=lambda record, table: None, on_tick=lambda table: None)


@pytest.fixture(scope="module")
def ca_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test CA")
    d = tmp_path_factory.mktemp("ca")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=headrace-test-ca", "-keyout", str(d / "ca.key"),
                    "-out", str(d / "ca.crt")], check=True, capture_output=True)
    return d / "ca.crt"


def test_sasl_ssl_scram_config_becomes_the_faust_apps_credentials(
        tmp_path: Path, ca_file: Path) -> None:
    password = tmp_path / "password"
    password.write_text("s3cret-from-the-secret\n")
    settings = load_settings(
        bootstrap="k1:9093,k2:9093", kafka_password_file=password, replication_factor=3,
        min_insync_replicas=2,
        kafka_config=json.dumps({"security.protocol": "SASL_SSL",
                                 "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "svc",
                                 "ssl.ca.location": str(ca_file), "client.rack": "r1"}))
    conn = connection_for(settings)
    assert conn.base()["sasl.password"] == "s3cret-from-the-secret"  # librdkafka clients too
    cfg = ControlAppConfig(conn=conn, replication_factor=settings.replication_factor,
                           topic_config=settings.topic_config(), datadir=tmp_path / "data")
    app = build_app(cfg, HOOKS)
    creds = app.conf.broker_credentials
    assert isinstance(creds, faust.SASLCredentials)
    assert [str(u) for u in app.conf.broker] == ["kafka://k1:9093", "kafka://k2:9093"]
    assert app.conf.topic_replication_factor == 3
    auth = credentials_to_aiokafka_auth(creds)
    context = auth.pop("ssl_context")
    assert auth == {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                    "sasl_plain_username": "svc",
                    "sasl_plain_password": "s3cret-from-the-secret"}
    assert [c["subject"] for c in context.get_ca_certs()] == [
        ((("commonName", "headrace-test-ca"),),)]
    assert context.check_hostname is True
    # client.rack reaches faust's aiokafka consumer too (faust has no setting for it).
    assert app.conf.headrace_client_rack == "r1"
    # Every topic it creates (its changelogs included) gets the durability settings.
    specs = topic_specs(cfg)
    assert {s.name for s in specs} >= {"events.train-requests", "headrace-control-jobs-changelog"}
    assert all(s.config["min.insync.replicas"] == "2" for s in specs)


def test_client_rack_reaches_the_aiokafka_consumer_faust_builds(tmp_path: Path) -> None:
    conn = KafkaConnection("127.0.0.1:9", client_rack="rack-7")
    app = build_app(ControlAppConfig(conn=conn, datadir=tmp_path), HOOKS)

    async def build() -> str | None:
        consumer = app.consumer._thread._create_consumer(asyncio.get_running_loop())
        rack = consumer._client_rack
        await consumer.stop()
        return rack

    assert asyncio.run(build()) == "rack-7"


@pytest.mark.parametrize(("config", "protocol", "mechanism", "tls"), [
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
      "sasl.username": "u", "sasl.password": "p"}, "SASL_PLAINTEXT", "PLAIN", False),
    ({"security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "u",
      "sasl.password": "p", "enable.ssl.certificate.verification": "false"},
     "SASL_SSL", "SCRAM-SHA-256", True),
    ({"security.protocol": "SSL"}, "SSL", None, True),
    ({"client.id": "x"}, "PLAINTEXT", None, False),
])
def test_each_protocol_maps_to_aiokafka_arguments(
        config: dict[str, str], protocol: str, mechanism: str | None, tls: bool) -> None:
    creds = broker_credentials(KafkaConnection("k:9092", extra=config))
    auth: dict[str, Any] = dict(credentials_to_aiokafka_auth(creds))
    assert auth["security_protocol"] == protocol
    assert auth.get("sasl_mechanism") == mechanism
    assert (auth.get("ssl_context") is not None) == tls


@pytest.mark.parametrize(("config", "message"), [
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}, "sasl.mechanism 'GSSAPI'"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "u"},
     "SASL needs sasl.username and a password"),
    ({"security.protocol": "SSL", "ssl.ca.location": "/nonexistent/ca.crt"},
     "TLS files unusable"),
    ({"security.protocol": "KERBEROS"}, "security.protocol 'KERBEROS'"),
    ({"ssl.key.pem": "-----BEGIN"}, "ssl.key.pem is not supported"),
])
def test_unusable_security_settings_stop_the_start_with_one_line(
        config: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        broker_credentials(KafkaConnection("k:9092", extra=config))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_liveness_fails_on_a_lost_session_a_stuck_agent_or_no_ticks() -> None:
    now = [0.0]
    h = ControlHealth(liveness_s=10, clock=lambda: now[0])
    assert h.live()[0] and not h.ready()[0]  # starting
    h.tick(session=True)
    h.recovered = True
    assert h.live()[0] and h.ready()[0]
    now[0] = 5.0
    h.tick(session=False)  # the session is lost: not ready at once, dead after liveness_s
    assert h.live()[0] and not h.ready()[0]
    now[0] = 16.0
    h.tick(session=False)
    ok, info = h.live()
    assert not ok and info["problems"] == ["no Kafka group session for 16s"]
    h.tick(session=True)
    h.busy_since = 17.0
    now[0] = 30.0
    # No tick since 16 s: the last session seen is that old too.
    assert h.live()[1]["problems"] == ["control loop has not ticked for 14s",
                                       "no Kafka group session for 14s",
                                       "an agent is stuck on one request for 13s"]


def _get(port: int, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _wait(pred: Any, timeout: float = 60.0) -> Any:
    return eventually(pred, timeout_s=timeout, what="the control plane")


@pytest.mark.slow
def test_plaintext_control_plane_consumes_requests_and_answers_probes(
        tmp_path: Path, dfs: Path) -> None:
    broker = EmbeddedBroker(log_path=tmp_path / "tansu.log").start()  # ours: we stop it
    conn = KafkaConnection(broker.bootstrap, timeout_s=15.0)
    topics = ControlTopics.with_prefix("probe")
    cfg = {"root": str(dfs), "bootstrap": broker.bootstrap, "prefix": topics.prefix,
           "kafka_config": {"security.protocol": "PLAINTEXT", "client.id": "headrace-test"}}
    env = {**job_env(broker.bootstrap, dfs), "HEADRACE_CONTROL_LIVENESS_S": "5"}
    log_path = tmp_path / "control.log"
    proc = subprocess.Popen([sys.executable, "-m", "tests.trainers.control_proc",
                             json.dumps(cfg)], cwd=REPO, stdout=log_path.open("wb"),
                            stderr=subprocess.STDOUT, env=env)
    try:
        port = int(_wait(lambda: re.search(r"probes on port (\d+)", log_path.read_text())
                         ).group(1))
        missing = request("datasets/missing.parquet", key="plain-1")
        _wait(lambda: topics.train_requests in _topics(conn))
        send_events(conn, topics.train_requests, [missing])
        jid = jobs.job_id_for("plain-1")
        wait_events(conn, topics.jobs, lambda evs: any(
            e.job_id == jid and e.kind == JobEventKind.FAILED for e in evs), timeout=90)
        _, ready = _wait(lambda: (r := _get(port, "/readyz"))[0] == 200 and r)
        assert ready == {"ok": True, "tables_recovered": True, "kafka_session": True}
        assert _get(port, "/livez")[0] == 200
        broker.stop()  # the Kafka session is lost for good
        _, live = _wait(lambda: (r := _get(port, "/livez"))[0] == 503 and r, timeout=90)
        assert any("no Kafka group session" in p for p in live["problems"]), live
    finally:
        stop(proc)
        broker.stop()


def _topics(conn: KafkaConnection) -> set[str]:
    from headrace.streams.clients import list_topics

    return set(list_topics(conn))
