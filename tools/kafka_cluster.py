"""A real Apache Kafka (KRaft) cluster on loopback, started from the jars tools/kafka_jars.sh
resolves: N combined broker+controller nodes, data on disk, readiness checked.

    python tools/kafka_cluster.py [--brokers N] [--dir DIR]   (or ./dev kafka [--brokers N])

prints one line ``bootstrap: HOST:PORT,...`` once the cluster answers, and stops it on Ctrl-C or
SIGTERM. Tests import :class:`KafkaCluster` to stop, kill and restart single nodes.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from headrace.core.child_process import die_with_parent
from headrace.core.ports import free_port

HERE = Path(__file__).resolve().parent
JARS_SCRIPT = HERE / "kafka_jars.sh"
HEAP = "-Xmx384m"

_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.cleaner.name = kafka.log.LogCleaner
logger.cleaner.level = INFO
"""


class KafkaUnavailable(RuntimeError):
    """Java or Maven is missing, or the jars cannot be resolved."""


def java_and_maven_missing() -> str | None:
    """Why a cluster cannot be started here, or None."""
    missing = [t for t in ("java", "mvn") if shutil.which(t) is None]
    return f"{' and '.join(missing)} not installed" if missing else None


def resolve_jars(version: str | None = None) -> Path:
    """The lib folder holding Apache Kafka's jars (resolved with Maven on first use)."""
    why = java_and_maven_missing()
    if why:
        raise KafkaUnavailable(why)
    env = {**os.environ, **({"KAFKA_VERSION": version} if version else {})}
    out = subprocess.run(["bash", str(JARS_SCRIPT)], env=env, capture_output=True, text=True,
                         timeout=900)
    if out.returncode != 0:
        raise KafkaUnavailable(f"tools/kafka_jars.sh failed: {out.stderr.strip()[-2000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


def _cluster_id() -> str:
    """A random cluster id as Kafka writes them; never starting with '-', which the storage
    tool's argument parser would take for an option (as Kafka's own Uuid.randomUuid avoids)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


@dataclass
class KafkaNode:
    """One combined broker+controller node: its ports, its directory, its JVM."""

    node_id: int
    port: int
    controller_port: int
    home: Path
    lib: Path
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.home / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.home / "server.log"

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    def java(self, main: str, *args: str) -> list[str]:
        return ["java", HEAP, "-Xms64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={self.home.parent / 'log4j2.properties'}",
                f"-Dkafka.logs.dir={self.home}", "-cp", f"{self.lib}/*", main, *args]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        """Start the JVM on the node's existing data (formatted by the cluster)."""
        if self.alive():
            return
        self.starts += 1
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child holds it
        log.write(f"\n==== start {self.starts} ====\n".encode())
        log.flush()
        self.proc = subprocess.Popen(self.java("kafka.Kafka", str(self.config_path)),
                                     stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
        log.close()

    def signal(self, sig: int) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(sig)

    def wait(self, timeout_s: float) -> bool:
        """Whether the JVM exited within ``timeout_s``."""
        if self.proc is None:
            return True
        try:
            self.proc.wait(timeout_s)
            return True
        except subprocess.TimeoutExpired:
            return False

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM (a controlled shutdown), wait, then SIGKILL."""
        self.signal(signal.SIGTERM)
        if not self.wait(timeout_s):
            self.kill()

    def kill(self) -> None:
        """SIGKILL: the node dies as in a power cut; its data stays on disk."""
        self.signal(signal.SIGKILL)
        self.wait(30)

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def _server_properties(node: KafkaNode, voters: str, n: int) -> str:
    rf = min(3, n)
    props: dict[str, Any] = {
        "process.roles": "broker,controller",
        "node.id": node.node_id,
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:"
                     f"{node.controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(node.data_dir),
        "num.partitions": 1,
        "default.replication.factor": rf,
        "min.insync.replicas": min(2, n),
        "offsets.topic.replication.factor": rf,
        # Fewer internal partitions than the defaults (50): the cluster is ready sooner.
        "offsets.topic.num.partitions": 6,
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": min(2, n),
        "transaction.state.log.num.partitions": 6,
        "share.coordinator.state.topic.replication.factor": rf,
        "share.coordinator.state.topic.min.isr": min(2, n),
        "group.initial.rebalance.delay.ms": 0,
        "num.network.threads": 2,
        "num.io.threads": 4,
        "log.cleaner.threads": 1,
        "log.cleaner.dedupe.buffer.size": 8 * 1024 * 1024,
        "log.cleaner.backoff.ms": 1000,
        # A stopped node is noticed (and its leaderships moved) within seconds, not 9 s.
        "broker.session.timeout.ms": 6000,
        "broker.heartbeat.interval.ms": 1000,
        "controlled.shutdown.enable": "true",
    }
    return "".join(f"{k}={v}\n" for k, v in props.items())


@dataclass
class KafkaCluster:
    """N KRaft nodes (each a broker and a voter), on free loopback ports, data under ``root``."""

    brokers: int = 3
    root: Path | None = None
    version: str | None = None
    nodes: list[KafkaNode] = field(default_factory=list)
    cluster_id: str = ""
    started_s: float = 0.0
    _own_root: bool = False

    @property
    def bootstrap(self) -> str:
        return ",".join(n.address for n in self.nodes)

    def node(self, node_id: int) -> KafkaNode:
        return next(n for n in self.nodes if n.node_id == node_id)

    def _prepare(self) -> None:
        lib = resolve_jars(self.version)
        if self.root is None:
            self.root = Path(tempfile.mkdtemp(prefix="headrace-kafka-"))
            self._own_root = True
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "log4j2.properties").write_text(_LOG4J2)
        self.cluster_id = _cluster_id()
        self.nodes = [KafkaNode(i, free_port(), free_port(), self.root / f"node{i}", lib)
                      for i in range(1, self.brokers + 1)]
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)
        for n in self.nodes:
            n.home.mkdir(parents=True, exist_ok=True)
            n.config_path.write_text(_server_properties(n, voters, self.brokers))
        # Format every node's storage at once (one JVM each): the voters are static.
        fmts = [subprocess.Popen(n.java("kafka.tools.StorageTool", "format", "-t",
                                        self.cluster_id, "-c", str(n.config_path)),
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                for n in self.nodes]
        for n, p in zip(self.nodes, fmts, strict=True):
            out, _ = p.communicate(timeout=120)
            if p.returncode != 0:
                raise KafkaUnavailable(f"formatting node {n.node_id} failed: "
                                       f"{out.decode(errors='replace')[-2000:]}")

    def start(self, *, timeout_s: float = 90.0) -> KafkaCluster:
        t0 = time.monotonic()
        try:
            self._prepare()
            for n in self.nodes:
                n.start()
            self.wait_ready(timeout_s=timeout_s)
        except BaseException:
            self.stop()
            raise
        self.started_s = time.monotonic() - t0
        return self

    def wait_ready(self, *, timeout_s: float = 90.0, nodes: Sequence[int] | None = None) -> None:
        """Every (listed) node is registered and serving, and a replicated write reads back."""
        from confluent_kafka.admin import AdminClient

        want = set(nodes or [n.node_id for n in self.nodes])
        deadline = time.monotonic() + timeout_s
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "logger": _quiet()})
        seen: set[int] = set()
        while time.monotonic() < deadline:
            self._check_alive()
            with contextlib.suppress(Exception):
                seen = set(admin.list_topics(timeout=2).brokers)
                if want <= seen:
                    break
            time.sleep(0.2)
        else:
            raise TimeoutError(f"brokers {sorted(want - seen)} not registered after "
                               f"{timeout_s:.0f}s\n{self.log_tails()}")
        self._round_trip(deadline)

    def _round_trip(self, deadline: float) -> None:
        # acks=all on a fully replicated topic, read back by a consumer group: the partitions,
        # the group coordinator and __consumer_offsets all work.
        from confluent_kafka import Consumer, Producer
        from confluent_kafka.admin import AdminClient, NewTopic

        topic = "headrace.ready"
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "logger": _quiet()})
        alive = sum(n.alive() for n in self.nodes)
        fs = admin.create_topics([NewTopic(topic, 1, min(3, alive))], request_timeout=10)
        for f in fs.values():
            with contextlib.suppress(Exception):
                f.result()
        token = uuid.uuid4().hex.encode()
        while True:
            self._check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"no produce/consume round trip\n{self.log_tails()}")
            p = Producer({"bootstrap.servers": self.bootstrap, "acks": "all",
                          "message.timeout.ms": 10_000, "logger": _quiet()})
            errs: list[Any] = []

            def acked(err: Any, _msg: Any, errs: list[Any] = errs) -> None:
                errs.append(err)

            p.produce(topic, token, on_delivery=acked)
            p.flush(12)
            if errs == [None]:
                break
            time.sleep(0.5)
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"ready-{token.decode()}",
                      "auto.offset.reset": "earliest", "logger": _quiet()})
        try:
            c.subscribe([topic])
            while time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is not None and m.error() is None and m.value() == token:
                    c.commit(message=m, asynchronous=False)
                    return
            raise TimeoutError(f"the round trip's record never read back\n{self.log_tails()}")
        finally:
            c.close()

    def _check_alive(self) -> None:
        # A node that exited by itself (not stopped or killed by us) failed to start.
        for n in self.nodes:
            rc = n.proc.poll() if n.proc is not None else None
            if rc is not None and rc not in (0, 143, -signal.SIGTERM, -signal.SIGKILL):
                raise KafkaUnavailable(f"node {n.node_id} exited {rc}:\n{n.log_tail()}")

    def log_tails(self, chars: int = 2500) -> str:
        return "\n".join(f"--- node {n.node_id} ({n.log_path}):\n{n.log_tail(chars)}"
                         for n in self.nodes)

    def keep_logs(self, dest: Path) -> Path:
        """Copy every node's server.log and config to ``dest`` (for a failed run's post-mortem)."""
        dest.mkdir(parents=True, exist_ok=True)
        for n in self.nodes:
            for f in (n.log_path, n.config_path):
                if f.exists():
                    shutil.copy(f, dest / f"node{n.node_id}-{f.name}")
        return dest

    def leader(self, topic: str, partition: int = 0) -> int:
        """The node that leads ``topic``'s partition now."""
        from confluent_kafka.admin import AdminClient

        md = AdminClient({"bootstrap.servers": self.bootstrap, "logger": _quiet()}).list_topics(
            topic, timeout=10)
        return int(md.topics[topic].partitions[partition].leader)

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM every node at once, wait, SIGKILL the rest; remove our temp dir. (Nodes
        stopping together can wait out their quorum's graceful-shutdown timeouts: not for long.)"""
        for n in self.nodes:
            n.signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for n in self.nodes:
            if not n.wait(max(0.1, deadline - time.monotonic())):
                n.kill()
        if self._own_root and self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


def _quiet() -> Any:
    import logging

    log = logging.getLogger("headrace.tools.kafka_cluster.librdkafka")
    log.setLevel(logging.CRITICAL)
    return log


@contextlib.contextmanager
def running_cluster(brokers: int = 3, root: Path | None = None) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster(brokers=brokers, root=root).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kafka", description="Start an Apache Kafka KRaft cluster "
                                 "on loopback until Ctrl-C or SIGTERM.")
    ap.add_argument("--brokers", type=int, default=3, help="nodes (each a broker and a voter)")
    ap.add_argument("--dir", type=Path, default=None,
                    help="keep the data and logs here (default: a temp dir, removed on exit)")
    ap.add_argument("--version", default=None, help="Apache Kafka 4.x version (Maven)")
    args = ap.parse_args(argv)
    if not 1 <= args.brokers <= 9:
        print("kafka: --brokers must be between 1 and 9", file=sys.stderr)
        return 2
    stopping = False

    def on_signal(_sig: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    cluster = KafkaCluster(brokers=args.brokers, root=args.dir, version=args.version)
    try:
        cluster.start()
    except (KafkaUnavailable, TimeoutError) as exc:
        print(f"kafka: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    print(f"started {args.brokers} node(s) in {cluster.started_s:.1f}s; data in {cluster.root}; "
          "Ctrl-C stops", file=sys.stderr)
    print(f"bootstrap: {cluster.bootstrap}", flush=True)
    try:
        while not stopping:
            if not all(n.alive() for n in cluster.nodes):
                print("kafka: a node exited; stopping", file=sys.stderr)
                break
            time.sleep(0.5)
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
