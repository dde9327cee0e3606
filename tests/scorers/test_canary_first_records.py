"""Issue 34: a canary started on a running scorer routed none of the first 1,000-1,500 keyed
records to its loaded candidate: the candidate was ready, but routing then waited for the
canary's label counts to be read back (started only at that moment). They are now read back
while the candidate loads, so routing starts with the first batch after it is ready: counted
here on the predictions topic, record by record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from headrace.core.settings import Settings
from headrace.ops.rollout.canary import start_canary
from headrace.rollout import routing
from headrace.scorers.rollout.canary import CanaryRole
from headrace.streams.clients import KafkaConnection
from tests.fixtures import ready_scorer
from tests.scorers.canary_helpers import CONTROL, is_canary, wait_predictions
from tests.scorers.conftest import eventually, publish_tf, rows, send_json


def test_a_canary_routes_from_the_first_batch_after_its_candidate_is_ready(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str) -> None:
    v1 = publish_tf(dfs, stream, seed=1)
    v2 = publish_tf(dfs, stream, seed=2, alias=False)
    n = 600
    with ready_scorer(settings, conn) as scorer:
        assert scorer.worker is not None
        [role] = [r for r in scorer.worker.routes if isinstance(r, CanaryRole)]
        st = start_canary(conn=conn, topics=CONTROL, root=dfs, ref=f"{stream}:{v2.version}",
                          stream=stream, percent=50, min_records=1_000_000)
        assert st.canary is not None
        eventually(lambda: role.watch.current == st, what="the scorer sees the canary")
        nudges = [0]

        def loaded() -> bool:
            if role.loader.loaded is not None:
                return True
            # A batch asks for the candidate (it loads in the background meanwhile).
            send_json(conn, data, rows(1, seed=nudges[0]), key_prefix="nudge", start=nudges[0])
            nudges[0] += 1
            return False

        eventually(loaded, timeout_s=60, interval_s=0.5, what="the candidate loaded")
        send_json(conn, data, rows(n, seed=7), key_prefix="user")
        preds = wait_predictions(conn, stream, nudges[0] + n)
    first: list[tuple[Any, dict[str, Any]]] = [
        (m, p) for m, p in preds if m.key.startswith(b"user")]
    assert len(first) == n
    salt = st.canary.salt.encode()
    routed = [m.key for m, p in first if p["model_version"] == v2.version]
    wanted = [m.key for m, _ in first if routing.to_candidate(m.key, salt, 50)]
    assert 0.4 * n < len(wanted) < 0.6 * n
    # Every record the routing sends to the candidate went to it, from the first one.
    assert sorted(routed) == sorted(wanted), (len(routed), len(wanted))
    assert all(is_canary(m) == (p["model_version"] == v2.version) for m, p in first)
    assert {p["model_version"] for m, p in first} == {v1.version, v2.version}
