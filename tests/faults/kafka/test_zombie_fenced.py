"""A zombie transactional scorer: SIGSTOPped mid-stream until its group gives its partitions to
another scorer, then SIGCONTed. Apache Kafka fences it (its open transaction is aborted when it
times out, its offsets' generation is stale), so its late transaction never becomes visible: a
fresh read_committed reader sees exactly one prediction of every acknowledged record; the zombie
exits with the fatal code and one line, not a traceback.

The same with a canary running: the candidate's routed predictions, written in the same
transactions as production's, are never doubled either, and every prediction's version is the
one the salted routing picks for its key."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from headrace.contracts import RolloutRole
from headrace.core.errors import FatalError
from headrace.ops.rollout.canary import start_canary
from headrace.rollout import routing
from headrace.scorers.rollout.canary import ROLE_HEADER
from headrace.store.versions import read_alias
from headrace.streams.clients import KafkaConnection
from tests.faults.conftest import needs_scorer
from tests.faults.harness import (
    LoadGenerator,
    Out,
    Scorers,
    Stream,
    TopicReader,
    commit_ends,
    committed,
    figures,
    publish_tiny_model,
    settle,
)
from tests.fixtures import eventually
from tests.scorers.canary_helpers import CONTROL
from tools.kafka_cluster import KafkaCluster

pytestmark = [pytest.mark.slow, pytest.mark.kafka, needs_scorer]
TXN_TIMEOUT_MS = 10_000  # how long the zombie's open transaction can hold read_committed back
TOTAL = 5000
CANARY_PERCENT = 40.0


def routed_as_salted(preds: list[Out], salt: bytes, production: int, candidate: int) -> int:
    """Assert every prediction's version and role are the routing's for its key; the number the
    candidate scored."""
    to_candidate = 0
    for r in preds:
        p = json.loads(r.value)
        want = routing.to_candidate(p["key"].encode(), salt, CANARY_PERCENT)
        assert p["model_version"] == (candidate if want else production), p
        assert (r.headers.get(ROLE_HEADER) == RolloutRole.CANARY.value) == want, (r.headers, p)
        to_candidate += want
    return to_candidate


@pytest.mark.parametrize("role", ["production", "canary"])
def test_a_zombie_transactional_scorer_is_fenced_and_its_late_transaction_never_visible(
        kafka_cluster: KafkaCluster, conn: KafkaConnection, stream: Stream, scorers: Scorers,
        dfs: Path, model: str, tmp_path: Path, role: str) -> None:
    t0 = time.monotonic()
    salt, cand_version = b"", 0
    if role == "canary":  # before the scorers start: they load the candidate before scoring
        candidate = publish_tiny_model(dfs, model, seed=1, alias=None)
        st = start_canary(conn=conn, topics=CONTROL, root=dfs,
                          ref=f"{model}:{candidate.version}", stream=stream.name,
                          percent=CANARY_PERCENT, min_records=1_000_000)
        assert st.canary is not None
        salt, cand_version = st.canary.salt.encode(), candidate.version
    # Each process its own transactional.id (the default, GROUP.HOST.PID): only the group's
    # generation and the transaction timeout fence the zombie, nothing it shares with the new one.
    env = {"HEADRACE_SCORER_TRANSACTIONAL": "true",
           "HEADRACE_KAFKA_CONFIG": json.dumps({"transaction.timeout.ms": str(TXN_TIMEOUT_MS)})}
    load = LoadGenerator(conn, stream, rate=250, total=TOTAL).start()
    preds = TopicReader(conn, stream.predictions)
    zombie = scorers.start(extra_env=env)
    try:
        zombie.wait_ready(timeout_s=90)
        eventually(lambda: preds.poll(0.2) >= 0 and len(preds.records) >= 400, timeout_s=60,
                   what="committed predictions before the stop")
        zombie.signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        seen = len(preds.records)
        heir = scorers.start(extra_env=env)
        heir.wait_ready(timeout_s=90)
        # The heir's predictions become visible once the zombie's transaction is aborted.
        eventually(lambda: preds.poll(0.2) >= 0 and len(preds.records) >= seen + 400,
                   timeout_s=90, what="the heir's committed predictions")
        taken_over_s = time.monotonic() - stopped_at
        # Woken only after the coordinator aborted its transaction (bumping its producer epoch).
        eventually(lambda: time.monotonic() - stopped_at > TXN_TIMEOUT_MS / 1000 + 5,
                   timeout_s=60, interval_s=0.2, what="the zombie's transaction timeout")
        zombie.signal(signal.SIGCONT)
        # Fenced (its epoch bumped) it exits: a fatal error, one line, the fatal exit code. Had
        # it no transaction open when stopped, its next one is refused for its stale group
        # generation, aborted, and it rejoins the group: a member again, it stops cleanly later.
        try:
            zombie_rc: int | None = zombie.proc.wait(30)
        except subprocess.TimeoutExpired:
            zombie_rc = None
        load.join(120)
        acked = load.all_acked()
        dlq = TopicReader(conn, stream.dlq)
        c = settle(preds, dlq, acked, data_topic=stream.data, alive=heir.alive, idle_s=2.0)
        heir_alive = heir.alive()
        heir_rc, _ = heir.terminate()
        rejoined = zombie_rc is None
        if rejoined:
            zombie_rc, _ = zombie.terminate()
        zombie_log = zombie.log_path.read_text(errors="replace")
        ends = commit_ends(acked)
        commits = committed(conn, stream.group, stream.data)
        routed = 0
        if role == "canary":
            production = read_alias(dfs, model)
            assert production is not None
            routed = routed_as_salted(preds.records, salt, production.version, cand_version)
        figures(f"kafka_zombie_fenced_{role}", **c.summary(),
                taken_over_s=round(taken_over_s, 1), zombie_exit=zombie_rc,
                zombie_rejoined=rejoined, routed_to_candidate=routed,
                test_s=round(time.monotonic() - t0, 1))
        if role == "canary":
            assert 0.3 < routed / len(preds.records) < 0.5, (routed, len(preds.records))
        assert len(acked) == TOTAL and not load.failed, load.failed[:3]
        assert heir_alive, heir.log_tail()
        assert not c.missing, f"{len(c.missing)} acknowledged records unscored: {c.missing[:10]}"
        assert c.duplicates == 0, (f"{c.duplicates} duplicate predictions visible to "
                                   f"read_committed: {c.duplicated_offsets[:10]}\n"
                                   f"{zombie.log_tail()}")
        assert not c.dead_letters
        assert commits == ends, (commits, ends)
        assert heir_rc == 0, heir.log_tail()
        want = 0 if rejoined else FatalError.exit_code
        assert zombie_rc == want and "Traceback" not in zombie_log, (
            f"the fenced zombie exited {zombie_rc}:\n{zombie_log[-12000:]}")
    finally:
        load.stop()
        preds.close()
        zombie.signal(signal.SIGCONT)
