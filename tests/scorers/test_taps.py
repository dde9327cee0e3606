"""The scorer's batch taps (``scorers.engine.taps``): a tap sees each batch exactly as production
scored it and its side outputs land in Kafka with the batch; a tap that raises, or whose output the
producer refuses, never costs a production prediction."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from headrace.core.settings import Settings
from headrace.scorers.engine import taps
from headrace.scorers.engine.outputs import SendSide, SideOutput
from headrace.scorers.engine.taps import Scored, TapContext
from headrace.scorers.rollout.state import watch_of
from headrace.streams.clients import KafkaConnection, ensure_topics
from headrace.streams.topics import TopicSpec, catalog, predictions_topic
from tests.fixtures import read_all, read_topic
from tests.scorers.conftest import CLASSES, predictions, publish_tf, ready_scorer, rows, send_json


class Echo:
    """Publishes, per scored row, its source offset and the model's top class."""

    name = "echo"

    def __init__(self, topic: str, *, fail: bool = False, huge: bool = False) -> None:
        self.topic, self.fail, self.huge = topic, fail, huge
        self.closed = False

    def after_scoring(self, scored: Scored) -> None:
        msgs = scored.messages()
        top = np.argmax(scored.scores[0], axis=1)
        assert scored.inputs is not None and len(msgs) == scored.rows == len(top)
        values = [json.dumps({"offset": int(scored.batch.offsets[m]),
                              "partition": int(scored.batch.partitions[m]),
                              "label": CLASSES[int(t)], "version": scored.model.version}).encode()
                  for m, t in zip(msgs.tolist(), top.tolist(), strict=True)]
        if self.huge:
            values = [b"x" * 9_000_000]  # over the producer's 8 MiB message.max.bytes
        scored.add(SideOutput(self.topic, values, [None] * len(values)))
        if self.fail:
            raise RuntimeError("tap bug")

    def close(self) -> None:
        self.closed = True


def _registered(name: str, cls: Any, conn: KafkaConnection, settings: Settings,
                request: pytest.FixtureRequest) -> Iterator[tuple[str, list[Any]]]:
    """Register a tap of ``cls`` (its options from the test's ``param``) writing to its own
    topic; every instance the scorer makes is kept in the list."""
    topic = f"{settings.streams[0]}.{name}"
    ensure_topics(conn, [TopicSpec(topic, 1, "tap output")])
    made: list[Any] = []
    opts: dict[str, Any] = getattr(request, "param", {})

    def factory(ctx: TapContext) -> Any:
        # The rollout's taps made the scorer's one rollout-state follower; a later tap shares it.
        assert ctx.conn is not None and watch_of(ctx) is ctx.shared["rollout"]
        made.append(cls(topic, **opts))
        return made[-1]

    taps.register(name, factory)
    try:
        yield topic, made
    finally:
        taps.unregister(name)


@pytest.fixture
def echo(conn: KafkaConnection, settings: Settings, request: pytest.FixtureRequest
         ) -> Iterator[tuple[str, list[Echo]]]:
    yield from _registered("echo", Echo, conn, settings, request)


def _run(settings: Settings, conn: KafkaConnection, n: int) -> list[dict[str, Any]]:
    stream = settings.streams[0]
    ensure_topics(conn, catalog(settings))
    publish_tf(settings.dfs_root, stream)
    send_json(conn, f"data.{stream}", rows(n))
    with ready_scorer(settings, conn) as scorer:
        msgs = read_topic(conn, predictions_topic(stream), expect=n)
        metrics = scorer.metrics
    return [*predictions(msgs), {"_metrics": metrics}]


def test_a_tap_sees_every_row_as_production_scored_it_and_its_outputs_land(
        settings: Settings, conn: KafkaConnection, echo: tuple[str, list[Echo]]) -> None:
    topic, made = echo
    *preds, _ = _run(settings, conn, 1200)
    side = [json.loads(r.value) for r in read_all(conn, topic)]
    want = {(p["source_partition"], p["source_offset"]): (p["label"], p["model_version"])
            for p in preds}
    got = {(s["partition"], s["offset"]): (s["label"], s["version"]) for s in side}
    assert len(side) == len(got) == 1200  # one per row, none twice
    assert got == want
    assert made and made[0].closed


@pytest.mark.parametrize("echo", [{"fail": True}, {"huge": True}], indirect=True,
                         ids=["raises", "refused"])
def test_a_failing_or_refused_tap_never_costs_a_prediction(
        settings: Settings, conn: KafkaConnection, echo: tuple[str, list[Echo]]) -> None:
    topic, made = echo
    *preds, extra = _run(settings, conn, 600)
    assert len({(p["source_partition"], p["source_offset"]) for p in preds}) == 600
    assert read_all(conn, topic) == []  # a failed tap's outputs are dropped with its batch
    assert read_all(conn, f"data.{settings.streams[0]}.dlq") == []
    m, stream = extra["_metrics"], settings.streams[0]
    if made[0].fail:
        assert m.tap_errors.labels(stream=stream, tap="echo")._value.get() >= 1
    else:
        assert m.side_refused.labels(stream=stream, topic=topic)._value.get() >= 1


class Later(Echo):
    """Echo in two phases: ``after_scoring`` keeps the batch's records and ``before_delivery``
    adds them (as the shadow tap adds its candidate's predictions)."""

    name = "later"

    def __init__(self, topic: str, *, fail: bool = False, huge: bool = False) -> None:
        super().__init__(topic, fail=False, huge=huge)
        self.fail_late = fail
        self.started: list[tuple[Any, list[SideOutput]]] = []  # (outputs, what they get)
        self.delivered = 0
        self.early: list[Any] = []  # outputs given their side outputs early

    def after_scoring(self, scored: Scored) -> None:
        before = len(scored.out.side)
        super().after_scoring(scored)
        self.started.append((scored.out, scored.out.side[before:]))
        del scored.out.side[before:]  # not yet: at delivery

    def before_delivery(self, out: Any, wait: bool = True) -> None:
        mine = [i for i, (o, _) in enumerate(self.started) if o is out]
        if not mine and any(o is out for o in self.early):
            return  # added early (``wait=False``) already
        assert len(mine) == 1, "before_delivery for outputs no scored batch made"
        _, side = self.started.pop(mine[0])
        out.side.extend(side)
        self.delivered += 1
        if not wait:
            self.early.append(out)
        if self.fail_late:
            raise RuntimeError("tap bug at delivery")


@pytest.fixture
def later(conn: KafkaConnection, settings: Settings, request: pytest.FixtureRequest
          ) -> Iterator[tuple[str, list[Later]]]:
    yield from _registered("later", Later, conn, settings, request)


def test_a_two_phase_tap_adds_its_outputs_at_delivery_and_every_batch_is_delivered_once(
        settings: Settings, conn: KafkaConnection, later: tuple[str, list[Later]]) -> None:
    topic, made = later
    *preds, extra = _run(settings, conn, 1200)
    side = [json.loads(r.value) for r in read_all(conn, topic)]
    want = {(p["source_partition"], p["source_offset"]): p["label"] for p in preds}
    got = {(s["partition"], s["offset"]): s["label"] for s in side}
    assert len(side) == len(got) == 1200 and got == want
    tap = made[0]
    assert tap.started == [] and tap.delivered >= 1 and tap.closed  # each batch once
    assert extra["_metrics"].tap_errors.labels(stream=settings.streams[0],
                                               tap="later")._value.get() == 0


@pytest.mark.parametrize("later", [{"fail": True}], indirect=True, ids=["raises"])
def test_a_tap_raising_at_delivery_loses_its_outputs_never_a_prediction(
        settings: Settings, conn: KafkaConnection, later: tuple[str, list[Later]]) -> None:
    topic, _ = later
    *preds, extra = _run(settings, conn, 600)
    assert len({(p["source_partition"], p["source_offset"]) for p in preds}) == 600
    assert read_all(conn, topic) == []
    assert read_all(conn, f"data.{settings.streams[0]}.dlq") == []
    assert extra["_metrics"].tap_errors.labels(stream=settings.streams[0],
                                               tap="later")._value.get() >= 1


class Sending(Later):
    """Later whose own thread produces its outputs as soon as the batch is scored
    (``bind_sender``, as the shadow tap sends its candidate's predictions), and adds them,
    sent, at delivery."""

    name = "sending"

    def __init__(self, topic: str, *, huge: bool = False) -> None:
        super().__init__(topic, huge=huge)
        self.send: SendSide | None = None
        self.pool = ThreadPoolExecutor(1)
        self.jobs: list[tuple[Any, Future[list[SideOutput]]]] = []
        self.added: list[SideOutput] = []

    def bind_sender(self, send: SendSide) -> None:
        self.send = send

    def after_scoring(self, scored: Scored) -> None:
        super().after_scoring(scored)
        out, side = self.started.pop()
        send = self.send
        assert send is not None, "the scorer binds a sender outside transactions"
        self.jobs.append((out, self.pool.submit(lambda: [p for s in side for p in send(s)])))

    def before_delivery(self, out: Any, wait: bool = True) -> None:
        mine = [i for i, (o, job) in enumerate(self.jobs) if o is out and (wait or job.done())]
        if mine:
            got = self.jobs.pop(mine[0])[1].result()
            out.side.extend(got)
            self.added += got
            self.delivered += 1


@pytest.mark.parametrize("huge", [False, True], ids=["sent", "refused"])
def test_outputs_a_tap_produces_from_its_thread_land_once_and_a_refused_one_costs_nothing(
        settings: Settings, conn: KafkaConnection, huge: bool) -> None:
    topic = f"{settings.streams[0]}.sending"
    ensure_topics(conn, [TopicSpec(topic, 1, "tap output")])
    made: list[Sending] = []
    taps.register("sending", lambda ctx: made.append(Sending(topic, huge=huge)) or made[-1])
    try:
        *preds, extra = _run(settings, conn, 600 if huge else 1200)
    finally:
        taps.unregister("sending")
    tap, m, stream = made[0], extra["_metrics"], settings.streams[0]
    assert tap.jobs == [] and tap.delivered >= 1 and tap.closed
    if huge:  # refused as it was sent: handed back unsent, dropped by the scorer at delivery
        assert len({(p["source_partition"], p["source_offset"]) for p in preds}) == 600
        assert read_all(conn, topic) == []
        assert read_all(conn, f"data.{stream}.dlq") == []
        assert m.side_refused.labels(stream=stream, topic=topic)._value.get() >= 1
        assert any(s.sent is None for s in tap.added)
        return
    side = [json.loads(r.value) for r in read_all(conn, topic)]
    want = {(p["source_partition"], p["source_offset"]): p["label"] for p in preds}
    got = {(s["partition"], s["offset"]): s["label"] for s in side}
    assert len(side) == len(got) == 1200 and got == want  # sent early, never produced again
    assert tap.added and all(s.sent is not None for s in tap.added)
