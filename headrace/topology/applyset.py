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
3. create or patch each member, labelled part-of;
4. list each group-kind by the part-of label; delete the members no longer wanted (the
   newest kinds first: a ScaledObject before its Deployment);
5. write the parent with the new group-kinds only.
A dry run does 1 and the reads of 3 and 4 and reports creates, patches and deletes.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import Any

from headrace import __version__
from headrace.core.errors import ConfigError
from headrace.topology.kube_rest import Ref, Rest, parse_group_kind

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
    action: str  # create | patch | delete
    ref: Ref

    def line(self, *, done: bool) -> str:
        verb = {"create": "created", "patch": "patched", "delete": "deleted"}[self.action]
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


def plan_changes(rest: Rest, aset: ApplySet, manifests: list[dict[str, Any]]) -> list[Change]:
    """What an apply would do (reads only)."""
    previous = _previous_kinds(rest, aset)
    changes = [Change("patch" if rest.get(Ref.of(m)) is not None else "create", Ref.of(m))
               for m in manifests]
    wanted = {Ref.of(m) for m in manifests}
    changes += [Change("delete", r)
                for r in _stale(rest, aset, previous | _group_kinds(manifests), wanted)]
    return changes


def apply_set(rest: Rest, aset: ApplySet, manifests: list[dict[str, Any]]) -> list[Change]:
    """Apply ``manifests`` as the whole set: create or patch each, prune the rest."""
    previous = _previous_kinds(rest, aset)                               # 1
    current = _group_kinds(manifests)
    _put(rest, aset.parent(previous | current))                          # 2
    changes = []
    for m in manifests:                                                  # 3
        member = aset.member(m)
        changes.append(Change("create" if rest.create(member) else "patch", Ref.of(m)))
        if changes[-1].action == "patch":
            rest.patch(member)
    wanted = {Ref.of(m) for m in manifests}
    for ref in _stale(rest, aset, previous | current, wanted):           # 4
        rest.delete(ref)
        changes.append(Change("delete", ref))
    _put(rest, aset.parent(current))                                     # 5
    return changes


def _put(rest: Rest, manifest: dict[str, Any]) -> None:
    if not rest.create(manifest):
        rest.patch(manifest)
