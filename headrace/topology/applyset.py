"""``topology apply`` as a Kubernetes ApplySet (KEP-3659): what it applied before and no longer
wants is pruned.

The parent is a ConfigMap (``headrace-topology`` in the target namespace) labelled
``applyset.kubernetes.io/id`` and annotated with the tooling and the group-kinds its members
may have (``contains-group-kinds``); every member carries ``applyset.kubernetes.io/part-of``.
The id is the KEP's: ``applyset-`` + unpadded URL-safe base64 of the sha256 of
``<name>.<namespace>.<kind>.<group>`` + ``-v1``, so ``kubectl`` recognises the set too.

An apply, in the KEP's order:
1. read the parent; refuse a parent another tool manages;
2. write the parent with the union of the old and new group-kinds (a crash after this still
   leaves every member findable);
3. apply each member, labelled part-of: server-side apply as field manager ``headrace``
   (a field another manager changed is a conflict, taken over only with ``force``), or,
   client-side, create it or patch it with a strategic merge;
4. list each group-kind by the part-of label; delete the members no longer wanted (the
   newest kinds first: a ScaledObject before its Deployment);
5. write the parent with the new group-kinds only.
A dry run does 1 and the reads of 3 and 4 and reports creates, patches and deletes.

Server-side apply is the default: a field an earlier apply set and this one no longer renders
(a GPU limit of a scorer turned CPU-only) is removed by the server; a strategic merge patch
keeps it (client-side, kept for clusters or proxies without server-side apply).
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import Any

from headrace import __version__
from headrace.core.errors import ConfigError
from headrace.topology.kube_rest import (
    CLIENT_SIDE_MANAGERS,
    FIELD_MANAGER,
    Ref,
    Rest,
    parse_group_kind,
)

PARENT_NAME = "headrace-topology"
TOOLING = f"headrace/v{__version__}"
ID_LABEL = "applyset.kubernetes.io/id"
PART_OF = "applyset.kubernetes.io/part-of"
TOOLING_ANN = "applyset.kubernetes.io/tooling"
KINDS_ANN = "applyset.kubernetes.io/contains-group-kinds"
MANAGED_BY = "app.kubernetes.io/managed-by"
# Creation order of the applied kinds; deletes go the other way.
_ORDER = ("ServiceAccount", "Role", "RoleBinding", "Service", "StatefulSet", "Deployment",
          "PodDisruptionBudget", "TriggerAuthentication", "ScaledObject", "ServiceMonitor")


def applyset_id(*, name: str, namespace: str, kind: str = "ConfigMap", group: str = "") -> str:
    digest = hashlib.sha256(f"{name}.{namespace}.{kind}.{group}".encode()).digest()
    return f"applyset-{base64.urlsafe_b64encode(digest).decode().rstrip('=')}-v1"


@dataclass(frozen=True)
class ApplySet:
    namespace: str
    name: str = PARENT_NAME

    @property
    def id(self) -> str:
        return applyset_id(name=self.name, namespace=self.namespace)

    @property
    def parent_ref(self) -> Ref:
        return Ref("", "ConfigMap", self.namespace, self.name)

    def parent(self, group_kinds: set[str]) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": self.name, "namespace": self.namespace,
                             "labels": {ID_LABEL: self.id, MANAGED_BY: "headrace"},
                             "annotations": {TOOLING_ANN: TOOLING,
                                             KINDS_ANN: ",".join(sorted(group_kinds))}}}

    def member(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """``manifest`` labelled as a member (and as managed by headrace, not by Helm: no
        Helm release owns what apply creates)."""
        meta = manifest["metadata"]
        labels = {**meta.get("labels", {}), PART_OF: self.id, MANAGED_BY: "headrace"}
        return {**manifest, "metadata": {**meta, "labels": labels}}


@dataclass(frozen=True)
class Change:
    action: str  # create | patch | unchanged | delete
    ref: Ref

    def line(self, *, done: bool) -> str:
        verb = {"create": "created", "patch": "patched", "unchanged": "unchanged",
                "delete": "deleted"}[self.action]
        return f"{verb if done else self.action} {self.ref}"


def _order(ref: Ref) -> int:
    return _ORDER.index(ref.kind) if ref.kind in _ORDER else len(_ORDER)


def _group_kinds(manifests: list[dict[str, Any]]) -> set[str]:
    return {Ref.of(m).group_kind for m in manifests}


def _previous_kinds(rest: Rest, aset: ApplySet) -> set[str]:
    parent = rest.get(aset.parent_ref)
    if parent is None:
        return set()
    meta = parent.get("metadata") or {}
    tooling = (meta.get("annotations") or {}).get(TOOLING_ANN, "")
    if (meta.get("labels") or {}).get(ID_LABEL) != aset.id or not tooling.startswith(
            "headrace/"):
        raise ConfigError(f"ConfigMap {aset.namespace}/{aset.name} exists but is not a headrace "
                          f"ApplySet parent (tooling {tooling or 'unset'}): rename or remove it")
    kinds = (meta.get("annotations") or {}).get(KINDS_ANN, "")
    return {k for k in kinds.split(",") if k}


def _stale(rest: Rest, aset: ApplySet, kinds: set[str],
           wanted: set[Ref]) -> list[Ref]:
    stale = []
    for gk in kinds:
        probe = parse_group_kind(gk, aset.namespace)
        for name in rest.names(probe, label_selector=f"{PART_OF}={aset.id}"):
            ref = Ref(probe.group, probe.kind, aset.namespace, name)
            if ref not in wanted:
                stale.append(ref)
    return sorted(stale, key=lambda r: (-_order(r), r.name))


def plan_changes(rest: Rest, aset: ApplySet, manifests: list[dict[str, Any]], *,
                 server_side: bool = True, force: bool = False) -> list[Change]:
    """What an apply would do, writing nothing. Server-side, each existing member is applied
    as a server dry run: ``unchanged`` when the server's answer is the object as it is, and a
    conflict is refused as the apply would refuse it."""
    previous = _previous_kinds(rest, aset)
    changes = [Change(_would(rest, aset.member(m), server_side=server_side, force=force),
                      Ref.of(m)) for m in manifests]
    wanted = {Ref.of(m) for m in manifests}
    changes += [Change("delete", r)
                for r in _stale(rest, aset, previous | _group_kinds(manifests), wanted)]
    return changes


def _would(rest: Rest, member: dict[str, Any], *, server_side: bool, force: bool) -> str:
    live = rest.get(Ref.of(member))
    if live is None:
        return "create"
    if not server_side or _client_side_owned(live, member["apiVersion"]):
        return "patch"  # (taking a client-side apply's fields over is a write)
    _, after = rest.apply(member, force=force, dry_run=True)
    return "unchanged" if _applied(after, member) == _applied(live, member) else "patch"


def _applied(obj: dict[str, Any], manifest: dict[str, Any]) -> Any:
    """What an apply of ``manifest`` can change in ``obj``: the values at the manifest's own
    fields (as the server stored them) and the fields our manager owns. A controller writes
    status, and annotations of its own, between a read and an apply that changes nothing."""
    ours = [e.get("fieldsV1") for e in (obj.get("metadata") or {}).get("managedFields") or []
            if _entry_of(e, (FIELD_MANAGER,), "Apply", manifest["apiVersion"])]
    return _at(obj, manifest), ours


def _at(obj: Any, shape: Any) -> Any:
    if isinstance(shape, dict) and isinstance(obj, dict):
        return {k: _at(obj.get(k), v) for k, v in shape.items()}
    return obj


def apply_set(rest: Rest, aset: ApplySet, manifests: list[dict[str, Any]], *,
              server_side: bool = True, force: bool = False) -> list[Change]:
    """Apply ``manifests`` as the whole set: apply each, prune the rest. ``server_side``:
    server-side apply (``force``: take over fields other managers set); else create or
    strategic-merge patch each."""
    previous = _previous_kinds(rest, aset)                               # 1
    current = _group_kinds(manifests)
    put = Writer(rest, server_side=server_side, force=force)
    put(aset.parent(previous | current))                                 # 2
    changes = [Change(put(aset.member(m)), Ref.of(m)) for m in manifests]  # 3
    wanted = {Ref.of(m) for m in manifests}
    for ref in _stale(rest, aset, previous | current, wanted):           # 4
        rest.delete(ref)
        changes.append(Change("delete", ref))
    put(aset.parent(current))                                            # 5
    return changes


@dataclass(frozen=True)
class Writer:
    """Writes one object; says whether it was created, patched or left unchanged."""

    rest: Rest
    server_side: bool = True
    force: bool = False

    def __call__(self, manifest: dict[str, Any]) -> str:
        if not self.server_side:
            if self.rest.create(manifest):
                return "create"
            self.rest.patch(manifest)
            return "patch"
        before = self.rest.get(Ref.of(manifest))
        if before is not None:
            before = upgrade_client_side(self.rest, manifest, before)
        created, after = self.rest.apply(manifest, force=self.force)
        if created or before is None:
            return "create"
        # Not the resourceVersion: a controller may write the status between read and apply.
        return "unchanged" if _applied(after, manifest) == _applied(before, manifest) else "patch"


def upgrade_client_side(rest: Rest, manifest: dict[str, Any],
                        live: dict[str, Any]) -> dict[str, Any]:
    """Hand the fields an earlier client-side apply owns to the server-side manager, as
    ``kubectl apply --server-side`` does after ``kubectl apply``: otherwise the first
    server-side apply conflicts with them (the server stored ``1Gi`` for ``1024Mi``), and a
    field the render drops later stays, still owned by the old manager. Returns ``live`` as
    it is now."""
    meta = live.get("metadata") or {}
    entries = list(meta.get("managedFields") or [])
    version = manifest["apiVersion"]
    old = _client_side_owned(live, version)
    if not old:
        return live
    applied = [e for e in entries if _entry_of(e, (FIELD_MANAGER,), "Apply", version)]
    fields: dict[str, Any] = {}
    for e in old + applied:
        _union(fields, e.get("fieldsV1") or {})
    merged = {"manager": FIELD_MANAGER, "operation": "Apply", "apiVersion": version,
              "time": (old + applied)[-1].get("time"), "fieldsType": "FieldsV1",
              "fieldsV1": fields}
    keep = [e for e in entries if e not in old and e not in applied]
    rest.json_patch(Ref.of(manifest), [
        {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]},
        {"op": "replace", "path": "/metadata/managedFields", "value": [*keep, merged]}])
    return rest.get(Ref.of(manifest)) or live


def _entry_of(e: dict[str, Any], managers: tuple[str, ...], op: str, version: str) -> bool:
    return (e.get("manager") in managers and e.get("operation") == op
            and not e.get("subresource") and e.get("apiVersion") == version)


def _client_side_owned(live: dict[str, Any], version: str) -> list[dict[str, Any]]:
    """The object's field-ownership entries a client-side apply wrote."""
    return [e for e in (live.get("metadata") or {}).get("managedFields") or []
            if _entry_of(e, CLIENT_SIDE_MANAGERS, "Update", version)]


def _union(into: dict[str, Any], more: dict[str, Any]) -> None:
    for key, sub in more.items():
        _union(into.setdefault(key, {}), sub or {})
