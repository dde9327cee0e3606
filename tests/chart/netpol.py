"""A small NetworkPolicy evaluator: given rendered NetworkPolicies, is a connection allowed?

It follows the networking.k8s.io/v1 semantics a conforming CNI enforces: a pod selected by no
policy of a direction is open in that direction; otherwise the connection must match a rule of
some selecting policy (policies are a union). A rule matches when one of its ports matches (no
ports: every port; ``endPort``: a range) and one of its peers does (no peers: everywhere). A
``podSelector`` peer alone means pods of the policy's namespace, a ``namespaceSelector`` alone
every pod of the matching namespaces, both together the matching pods of the matching
namespaces; an ``ipBlock`` matches addresses in its CIDR outside its ``except`` list. A pod-to-pod
connection needs the source's egress and the destination's ingress to allow it. Named ports and
``matchExpressions`` are not used by the chart and are refused rather than guessed.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Pod:
    labels: dict[str, str]
    namespace: str = "ml"
    namespace_labels: dict[str, str] = field(default_factory=dict)
    ip: str | None = None

    @property
    def ns_labels(self) -> dict[str, str]:
        return {"kubernetes.io/metadata.name": self.namespace, **self.namespace_labels}


@dataclass(frozen=True)
class Address:
    """A destination outside the cluster's pods (a broker, a link-local DNS cache)."""

    ip: str


Endpoint = Pod | Address


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if selector.get("matchExpressions"):
        raise NotImplementedError("matchExpressions")
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def _peer_matches(peer: dict[str, Any], policy_ns: str, other: Endpoint) -> bool:
    if "ipBlock" in peer:
        if other.ip is None:
            return False
        ip = ipaddress.ip_address(other.ip)
        block = peer["ipBlock"]
        return ip in ipaddress.ip_network(block["cidr"]) and not any(
            ip in ipaddress.ip_network(e) for e in block.get("except", []))
    if not isinstance(other, Pod):
        return False
    if "namespaceSelector" in peer:
        if not _selects(peer["namespaceSelector"], other.ns_labels):
            return False
    elif other.namespace != policy_ns:
        return False
    return _selects(peer.get("podSelector") or {}, other.labels)


def _port_matches(rule_ports: list[dict[str, Any]] | None, port: int, protocol: str) -> bool:
    if not rule_ports:
        return True
    for p in rule_ports:
        if p.get("protocol", "TCP") != protocol:
            continue
        if "port" not in p:
            return True
        if not isinstance(p["port"], int):
            raise NotImplementedError("named ports")
        if p["port"] <= port <= p.get("endPort", p["port"]):
            return True
    return False


def _allowed(policies: list[dict[str, Any]], pod: Pod, other: Endpoint, port: int,
             protocol: str, direction: str) -> bool:
    key, peers_key = ("egress", "to") if direction == "Egress" else ("ingress", "from")
    selecting = [p for p in policies
                 if p["metadata"].get("namespace", "ml") == pod.namespace
                 and direction in p["spec"].get("policyTypes", ["Ingress"])
                 and _selects(p["spec"]["podSelector"], pod.labels)]
    if not selecting:
        return True
    for pol in selecting:
        ns = pol["metadata"].get("namespace", "ml")
        for rule in pol["spec"].get(key) or []:
            peers = rule.get(peers_key) or []
            if _port_matches(rule.get("ports"), port, protocol) and (
                    not peers or any(_peer_matches(p, ns, other) for p in peers)):
                return True
    return False


def allowed(policies: list[dict[str, Any]], src: Pod, dst: Endpoint, port: int,
            protocol: str = "TCP") -> bool:
    """May ``src`` open a connection to ``dst`` on ``port``?"""
    pols = [p for p in policies if p.get("kind") == "NetworkPolicy"]
    if not _allowed(pols, src, dst, port, protocol, "Egress"):
        return False
    return not isinstance(dst, Pod) or _allowed(pols, dst, src, port, protocol, "Ingress")
