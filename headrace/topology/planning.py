"""The placement planner: pure, deterministic, sticky.

Steps, in this order (each sorted by name so the same input gives the same plan):

1. Reserve GPU capacity for one training gang (previous nodes first).
2. Re-admit the previous plan's pods: each keeps its partitions that still exist and are still
   read in-rack, and takes back its old node's slot if it can, else any slot in its group.
   A group that cannot get all its slots drops its highest ordinals (ordinals stay contiguous).
3. Place every free partition: an existing pod with room in one of its replica racks, else a
   new pod in a replica rack, else (explained) a pod near it: same zone first, then anywhere.

A "slot" is one scorer pod's request (GPUs, CPU, memory) counted against a node's allocatable;
slots never exceed a node, so a GPU is never oversubscribed. Costs are linear in partitions x
replication factor plus nodes: eligible node lists are cached per (rack, GPU type, volume) and
walked with a cursor that only moves forward.
"""

from __future__ import annotations

import hashlib
import heapq
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from headrace.topology.cluster import ClusterSpec, Node, Stream, Volume
from headrace.topology.placement import (
    Explanation,
    NodeRequirement,
    Plan,
    PlanStats,
    PodAssignment,
    Reason,
    ScorerGroup,
    TrainerReservation,
)

_MAX_GROUP_NAME = 30  # chart prefixes the release name; StatefulSet names stay <= 52


def group_name(stream: str, rack: str) -> str:
    """A DNS-1123 label for the (stream, rack) group, short and stable."""
    raw = f"{stream}-{rack}".lower()
    name = re.sub(r"[^a-z0-9-]+", "-", raw).strip("-")
    if len(name) > _MAX_GROUP_NAME or name != raw:
        digest = hashlib.sha256(raw.encode()).hexdigest()[:6]
        name = f"{name[: _MAX_GROUP_NAME - 7].rstrip('-')}-{digest}"
    return name


_Key = tuple[str, str | None, str | None]  # (rack, GPU type, volume): one eligible-node list


@dataclass(eq=False)
class _Pod:
    partitions: list[int]
    node: str | None = None


@dataclass
class _Group:
    name: str
    stream: Stream
    rack: str
    key: _Key
    pods: list[_Pod] = field(default_factory=list)
    k: int = 8
    open: list[int] = field(default_factory=list)  # heap of ordinals that may have room
    load: int = 0

    def top(self) -> int | None:
        """The lowest ordinal with room; full pods leave the heap lazily."""
        while self.open and len(self.pods[self.open[0]].partitions) >= self.k:
            heapq.heappop(self.open)
        return self.open[0] if self.open else None


class _Capacity:
    """Free resources per node and cursors over cached eligible-node lists."""

    def __init__(self, cluster: ClusterSpec) -> None:
        self.cluster = cluster
        s = cluster.scorer
        self.req = (s.gpus, s.cpu_m, s.memory_mib)
        self.nodes = {n.name: n for n in sorted(cluster.nodes, key=lambda n: n.name)}
        self.free = {n.name: [n.gpus, n.cpu_m, n.memory_mib] for n in self.nodes.values()}
        self.by_rack: dict[str, list[Node]] = defaultdict(list)
        for n in self.nodes.values():
            self.by_rack[n.rack].append(n)
        self.rack_zone = {n.rack: n.zone for n in self.nodes.values()}
        self.racks = sorted(self.by_rack)
        tol = s.effective_tolerations()
        self.allowed = {
            n.name: n.schedulable
            and all(
                t.effect == "PreferNoSchedule" or any(x.tolerates(t) for x in tol) for t in n.taints
            )
            for n in self.nodes.values()
        }
        self.volumes = {v.name: v for v in cluster.volumes}
        # Nodes that constrained streams need (pinned volumes, a required GPU type) come last
        # for everyone else, so flexible streams do not eat the only slots others can use.
        wanted_types = {s.gpu_type for s in cluster.streams if s.gpu_type}
        pins: dict[str, int] = defaultdict(int)
        for v in cluster.volumes:
            for name in v.nodes:
                pins[name] += 1
        self.demand = {
            n.name: (pins[n.name], n.gpu_type in wanted_types) for n in self.nodes.values()
        }
        self._elig: dict[_Key, tuple[list[str], set[str]]] = {}
        self._cursor: dict[_Key, int] = {}

    def key(self, stream: Stream, rack: str) -> _Key:
        return (rack, stream.gpu_type, stream.volume)

    def eligible(self, key: _Key) -> tuple[list[str], set[str]]:
        hit = self._elig.get(key)
        if hit is None:
            rack, gpu_type, volume = key
            vol = self.volumes.get(volume) if volume else None
            names = [n.name for n in self.by_rack.get(rack, ()) if self._node_ok(n, gpu_type, vol)]
            # CPU scorers go to GPU-less nodes first, keeping GPU nodes for GPU work.
            names.sort(key=lambda x: (self.nodes[x].gpus > 0 and not self.req[0],
                                      self.demand[x], x))
            hit = (names, set(names))
            self._elig[key] = hit
        return hit

    def _node_ok(self, n: Node, gpu_type: str | None, vol: Volume | None) -> bool:
        if not self.allowed[n.name]:
            return False
        if self.req[0] and (n.gpus < self.req[0] or (gpu_type and n.gpu_type != gpu_type)):
            return False
        if vol is not None:
            return n.name in vol.nodes if vol.nodes else n.zone in vol.zones
        return True

    def _fits(self, name: str) -> bool:
        f = self.free[name]
        return f[0] >= self.req[0] and f[1] >= self.req[1] and f[2] >= self.req[2]

    def _take(self, name: str) -> str:
        f = self.free[name]
        f[0] -= self.req[0]
        f[1] -= self.req[1]
        f[2] -= self.req[2]
        return name

    def reserve(self, key: _Key, prefer: str | None = None) -> str | None:
        names, members = self.eligible(key)
        if prefer is not None and prefer in members and self._fits(prefer):
            return self._take(prefer)
        i = self._cursor.get(key, 0)
        # Free capacity only shrinks during a run, so a node skipped once never fits again.
        while i < len(names) and not self._fits(names[i]):
            i += 1
        self._cursor[key] = i
        return self._take(names[i]) if i < len(names) else None

    def anywhere(self, stream: Stream) -> bool:
        """Whether any rack has a node this stream could ever use."""
        return any(self.eligible(self.key(stream, r))[0] for r in self.racks)

    def why_not_local(self, stream: Stream, racks: tuple[str, ...]) -> Reason:
        if not racks:
            return "no-replica-racks"
        reasons: list[Reason] = []
        for r in racks:
            if not self.eligible(self.key(stream, r))[0]:
                reasons.append(self._why_empty(stream, r))
        # Only when every replica rack could host the stream is it purely a capacity problem.
        return sorted(reasons)[0] if len(reasons) == len(racks) else "rack-full"

    def _why_empty(self, stream: Stream, rack: str) -> Reason:
        nodes = self.by_rack.get(rack)
        if not nodes:
            return "unknown-rack"
        vol = self.volumes.get(stream.volume) if stream.volume else None
        if vol is not None and not any(self._vol_ok(n, vol) for n in nodes):
            return "volume-elsewhere"
        if self.req[0] and not any(
            n.gpus >= self.req[0] and (not stream.gpu_type or n.gpu_type == stream.gpu_type)
            for n in nodes
        ):
            return "gpu-type-missing"
        return "unschedulable"

    @staticmethod
    def _vol_ok(n: Node, vol: Volume) -> bool:
        return n.name in vol.nodes if vol.nodes else n.zone in vol.zones


def plan_placement(*, cluster: ClusterSpec, previous: Plan | None = None) -> Plan:
    """Plan scorer groups for ``cluster``, keeping ``previous`` ownership where still valid."""
    return _Planner(cluster).run(previous)


class _Planner:
    def __init__(self, cluster: ClusterSpec) -> None:
        self.cluster = cluster
        self.cap = _Capacity(cluster)
        # Most constrained streams first (pinned volume, then GPU type), then by name.
        pinned = {v.name for v in cluster.volumes if v.nodes}
        self.streams = sorted(
            cluster.streams,
            key=lambda s: (s.volume not in pinned, s.gpu_type is None, s.name),
        )
        self.racks_of = {s.name: s.replica_racks() for s in self.streams}
        self.k_of = {
            s.name: s.max_partitions_per_pod or cluster.scorer.max_partitions_per_pod
            for s in self.streams
        }
        self.groups: dict[tuple[str, str], _Group] = {}
        self.by_name: dict[str, _Group] = {}
        self.prev_owner: dict[tuple[str, int], tuple[str, int]] = {}
        self.free: dict[str, set[int]] = {s.name: set(range(s.partitions)) for s in self.streams}

    def run(self, previous: Plan | None) -> Plan:
        trainer = _reserve_trainer(self.cluster, self.cap, previous)
        if previous is not None:
            self._readmit(previous)
        why: dict[tuple[str, Reason, str | None], list[int]] = defaultdict(list)
        unplaced: dict[str, list[int]] = defaultdict(list)
        for s in self.streams:
            racks = self.racks_of[s.name]
            for p in sorted(self.free[s.name]):
                reps = racks[p]
                if self._place_local(s, p, reps):
                    continue
                reason = self.cap.why_not_local(s, reps)
                g = self._place_near(s, p, reps)
                if g is None:
                    unplaced[s.name].append(p)
                    why[(s.name, _no_room(self.cap, s), None)].append(p)
                else:
                    why[(s.name, reason, g.name)].append(p)
        return _finish(self.cluster, self.cap, self.streams, self.racks_of, self.groups,
                       why, unplaced, trainer)

    # -- group bookkeeping -------------------------------------------------------------

    def _new_group(self, stream: Stream, rack: str, name: str | None = None) -> _Group:
        g = _Group(name or group_name(stream.name, rack), stream, rack,
                   self.cap.key(stream, rack), k=self.k_of[stream.name])
        self.groups[(stream.name, rack)] = g
        self.by_name[g.name] = g
        return g

    def _add(self, g: _Group, ordinal: int, p: int) -> None:
        g.pods[ordinal].partitions.append(p)
        g.load += 1
        self.free[g.stream.name].discard(p)

    def _open_pod(self, g: _Group) -> int | None:
        """An ordinal with room, opening a new pod (a new slot) when all are full."""
        top = g.top()
        if top is not None:
            return top
        node = self.cap.reserve(g.key)
        if node is None:
            return None
        g.pods.append(_Pod(partitions=[], node=node))
        heapq.heappush(g.open, len(g.pods) - 1)
        return len(g.pods) - 1

    # -- step 2: sticky re-admission ---------------------------------------------------

    def _readmit(self, previous: Plan) -> None:
        by_stream = {s.name: s for s in self.streams}
        for pg in sorted(previous.groups, key=lambda g: g.name):
            s = by_stream.get(pg.stream)
            if s is None or (pg.stream, pg.rack) in self.groups:
                continue
            racks = self.racks_of[s.name]
            # Keep the deployed object's name even if naming rules change.
            g = self._new_group(s, pg.rack, name=pg.name)
            for pod in sorted(pg.pods, key=lambda x: x.ordinal):
                keep = []
                for p in pod.partitions:
                    if p >= s.partitions:
                        continue
                    self.prev_owner[(s.name, p)] = (pg.name, len(g.pods))
                    if pg.rack in racks[p]:
                        keep.append(p)
                g.pods.append(_Pod(partitions=keep, node=pod.node))
            while g.pods and not g.pods[-1].partitions:
                g.pods.pop()
        # Hinted slots first, so a pod returns to its node before others fill it.
        pending: list[tuple[_Group, _Pod]] = []
        for key in sorted(self.groups):
            g = self.groups[key]
            for slot in g.pods:
                hint = slot.node
                slot.node = self.cap.reserve(g.key, prefer=hint) if hint in self.cap.nodes else None
                if slot.node is None:
                    pending.append((g, slot))
        for g, slot in pending:
            slot.node = self.cap.reserve(g.key)
        for key in sorted(self.groups):
            g = self.groups[key]
            nodes = [slot.node for slot in g.pods if slot.node is not None]
            kept = g.pods[: len(nodes)]
            # Pods in a group are interchangeable: lost slots drop the highest ordinals.
            g.pods = []
            for ordinal, (old, node) in enumerate(zip(kept, nodes, strict=True)):
                parts = old.partitions
                g.pods.append(_Pod(partitions=[], node=node))
                for p in parts:
                    self._add(g, ordinal, p)
                heapq.heappush(g.open, ordinal)
            if not g.pods:
                del self.groups[key]
                del self.by_name[g.name]

    # -- step 3: free partitions -------------------------------------------------------

    def _place_local(self, s: Stream, p: int, reps: tuple[str, ...]) -> bool:
        # An existing pod with room in a replica rack: the least loaded such group wins.
        best: _Group | None = None
        for r in reps:
            g = self.groups.get((s.name, r))
            if g is not None and g.top() is not None and (
                best is None or (g.load, g.rack) < (best.load, best.rack)
            ):
                best = g
        if best is not None:
            self._add(best, best.open[0], p)
            return True
        loads = {r: g.load if (g := self.groups.get((s.name, r))) else 0 for r in reps}
        return any(self._place_in(s, r, p) for r in sorted(reps, key=lambda r: (loads[r], r)))

    def _place_in(self, s: Stream, rack: str, p: int) -> _Group | None:
        g = self.groups.get((s.name, rack))
        if g is None:
            key = self.cap.key(s, rack)
            if not self.cap.eligible(key)[0]:
                return None
            node = self.cap.reserve(key)
            if node is None:
                return None
            g = self._new_group(s, rack)
            g.pods.append(_Pod(partitions=[], node=node))
            heapq.heappush(g.open, 0)
        ordinal = self._open_pod(g)
        if ordinal is None:
            return None
        self._add(g, ordinal, p)
        return g

    def _place_near(self, s: Stream, p: int, reps: tuple[str, ...]) -> _Group | None:
        old = self.prev_owner.get((s.name, p))
        if old is not None:
            g = self.by_name.get(old[0])
            if g is not None and old[1] < len(g.pods) and len(g.pods[old[1]].partitions) < g.k:
                if old[1] not in g.open:
                    heapq.heappush(g.open, old[1])
                self._add(g, old[1], p)
                return g
        zones = {self.cap.rack_zone.get(r) for r in reps}
        order = sorted(self.cap.racks, key=lambda r: (self.cap.rack_zone[r] not in zones, r))
        for r in order:
            g = self.groups.get((s.name, r))
            if g is not None and g.top() is not None:
                self._add(g, g.open[0], p)
                return g
        for r in order:
            g = self._place_in(s, r, p)
            if g is not None:
                return g
        return None


def _no_room(cap: _Capacity, s: Stream) -> Reason:
    return "no-capacity" if cap.anywhere(s) else "no-eligible-node"


def _reserve_trainer(
    cluster: ClusterSpec, cap: _Capacity, previous: Plan | None
) -> TrainerReservation | None:
    t = cluster.trainer
    if not t.workers:
        return None
    need = (t.gpus_per_worker, t.cpu_m, t.memory_mib)
    ok = [
        n for n in cap.nodes.values()
        if n.schedulable
        and n.gpus >= t.gpus_per_worker
        and (not t.gpu_type or n.gpu_type == t.gpu_type)
    ]
    before = list(previous.trainer.nodes) if previous and previous.trainer else []
    rank = {name: i for i, name in enumerate(before)}
    # Previous nodes first (no churn), then the biggest nodes (fewest hosts per gang).
    ok.sort(key=lambda n: (rank.get(n.name, len(rank)), cap.demand[n.name][0], -n.gpus, n.name))
    chosen: list[str] = []
    for n in ok:
        f = cap.free[n.name]
        while len(chosen) < t.workers and all(f[i] >= need[i] for i in range(3)):
            for i in range(3):
                f[i] -= need[i]
            chosen.append(n.name)
        if len(chosen) == t.workers:
            break
    return TrainerReservation(
        workers=t.workers, gpus_per_worker=t.gpus_per_worker, gpu_type=t.gpu_type,
        nodes=tuple(chosen),
    )


def partition_ranges(partitions: Iterable[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``; ``"-"`` for none."""
    parts = sorted(partitions)
    if not parts:
        return "-"
    out: list[str] = []
    start = prev = parts[0]
    for p in [*parts[1:], None]:
        if p is not None and p == prev + 1:
            prev = p
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if p is not None:
            start = prev = p
    return ",".join(out)


_MESSAGES: dict[Reason, str] = {
    "no-replica-racks": "no replica racks known; placed in {rack} (zone {zone})",
    "rack-full": "replica racks have no free scorer slot; placed in {rack} (zone {zone})",
    "gpu-type-missing": "no {gpu} node in the replica racks; placed in {rack} (zone {zone})",
    "volume-elsewhere": "volume {volume} is not reachable from the replica racks; "
    "placed in {rack} (zone {zone}) where it is",
    "unschedulable": "replica racks hold only cordoned or untolerated tainted nodes; "
    "placed in {rack} (zone {zone})",
    "unknown-rack": "replica racks have no Kubernetes nodes; placed in {rack} (zone {zone})",
    "no-capacity": "not placed: every eligible node is full (each pod needs {need})",
    "no-eligible-node": "not placed: no node has {gpu}{volume_note} and tolerable taints",
    "trainer-reservation": "",
}


def _finish(
    cluster: ClusterSpec,
    cap: _Capacity,
    streams: list[Stream],
    racks_of: dict[str, list[tuple[str, ...]]],
    groups: dict[tuple[str, str], _Group],
    why: dict[tuple[str, Reason, str | None], list[int]],
    unplaced: dict[str, list[int]],
    trainer: TrainerReservation | None,
) -> Plan:
    lab = cluster.labels
    tol = cluster.scorer.effective_tolerations()
    out: list[ScorerGroup] = []
    in_rack = placed = 0
    for key in sorted(groups, key=lambda k: groups[k].name):
        g: _Group = groups[key]
        s: Stream = g.stream
        pods = tuple(
            PodAssignment(ordinal=i, partitions=tuple(sorted(pod.partitions)), node=pod.node)
            for i, pod in enumerate(g.pods)
        )
        reps = racks_of[s.name]
        placed += sum(len(pod.partitions) for pod in pods)
        in_rack += sum(1 for pod in pods for p in pod.partitions if g.rack in reps[p])
        aff = [NodeRequirement(key=lab.rack, values=(g.rack,))]
        if s.gpu_type and cap.req[0]:
            aff.append(NodeRequirement(key=lab.gpu_type, values=(s.gpu_type,)))
        vol = cap.volumes.get(s.volume) if s.volume else None
        if vol is not None and vol.nodes:
            hosts = sorted(set(vol.nodes) & {n.name for n in cap.by_rack[g.rack]})
            aff.append(NodeRequirement(key=lab.hostname, values=tuple(hosts)))
        elif vol is not None:
            aff.append(NodeRequirement(key=lab.zone, values=tuple(sorted(vol.zones))))
        out.append(ScorerGroup(
            name=g.name, stream=s.name, rack=g.rack, zone=cap.rack_zone[g.rack],
            client_rack=g.rack, gpus=cap.req[0], gpu_type=s.gpu_type, cpu_m=cap.req[1],
            memory_mib=cap.req[2], volume=s.volume, volume_claim=vol.claim_name if vol else None,
            affinity=tuple(aff), tolerations=tol, pods=pods,
        ))
    zone_of = {g.name: g.zone for g in out}
    rack_of = {g.name: g.rack for g in out}
    vol_of = {s.name: s.volume for s in streams}
    gpu_of = {s.name: s.gpu_type or "GPU" for s in streams}
    need = f"{cap.req[0]} GPU, {cap.req[1]}m CPU, {cap.req[2]}Mi memory"
    expl: list[Explanation] = []
    for (stream, reason, gname), parts in sorted(
        why.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or "")
    ):
        msg = _MESSAGES[reason].format(
            rack=rack_of.get(gname or "", "-"), zone=zone_of.get(gname or "", "-"),
            volume=vol_of.get(stream), gpu=gpu_of.get(stream), need=need,
            volume_note=f" and reaches volume {vol_of[stream]}" if vol_of.get(stream) else "",
        )
        expl.append(Explanation(
            stream=stream, reason=reason, partitions=tuple(sorted(parts)), group=gname,
            message=f"{stream} partitions {partition_ranges(parts)}: {msg}",
        ))
    if trainer is not None and not trainer.satisfied:
        expl.append(Explanation(
            stream="-", reason="trainer-reservation",
            message=f"training gang needs {trainer.workers} x {trainer.gpus_per_worker} "
            f"{trainer.gpu_type or 'GPU'}; only {len(trainer.nodes)} worker(s) fit",
        ))
    total = sum(s.partitions for s in streams)
    stats = PlanStats(
        partitions=total, placed=placed, in_rack=in_rack,
        pods=sum(len(g.pods) for g in out), gpus=sum(len(g.pods) * g.gpus for g in out),
    )
    return Plan(
        groups=tuple(out), unplaced={k: tuple(v) for k, v in sorted(unplaced.items())},
        explanations=tuple(expl), trainer=trainer, stats=stats,
    )
