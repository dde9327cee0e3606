"""The Pod Security Standards "restricted" profile (Kubernetes 1.30), written out as checks.

The pod-security admission controller enforces these on a namespace labelled
``pod-security.kubernetes.io/enforce: restricted``; no API server runs here, so the chart tests
and ``headrace topology`` apply the same rules to rendered manifests. Each rule is one
function over the pod spec; :func:`violations` returns one line per failure (empty: passes).
Source: kubernetes.io/docs/concepts/security/pod-security-standards (baseline + restricted).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job",
             "ReplicationController"}
ALLOWED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                   "persistentVolumeClaim", "projected", "secret"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
                "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t",
                 "container_engine_t"}


def pod_spec_of(manifest: dict[str, Any]) -> dict[str, Any] | None:
    """The pod spec inside a workload manifest (None for kinds that run no pods)."""
    kind = manifest.get("kind")
    spec = manifest.get("spec") or {}
    if kind == "Pod":
        return spec
    if kind in WORKLOADS:
        return ((spec.get("template") or {}).get("spec")) or {}
    if kind == "CronJob":
        job = (spec.get("jobTemplate") or {}).get("spec") or {}
        return ((job.get("template") or {}).get("spec")) or {}
    return None


def _containers(pod: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from pod.get(key) or []


def violations(pod: dict[str, Any]) -> list[str]:
    """Every way ``pod`` (a camelCase pod spec) fails the restricted profile."""
    out: list[str] = []
    psc = pod.get("securityContext") or {}
    containers = list(_containers(pod))
    # -- baseline ---------------------------------------------------------------------------
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(flag):
            out.append(f"host namespaces: {flag}=true")
    if (psc.get("windowsOptions") or {}).get("hostProcess"):
        out.append("hostProcess pod")
    for v in pod.get("volumes") or []:
        kinds = set(v) - {"name"}
        if "hostPath" in kinds:
            out.append(f"volume {v.get('name')}: hostPath")
        elif not kinds <= ALLOWED_VOLUMES:
            out.append(f"volume {v.get('name')}: type {sorted(kinds)} not allowed")
    for s in psc.get("sysctls") or []:
        if s.get("name") not in SAFE_SYSCTLS:
            out.append(f"sysctl {s.get('name')} not allowed")
    out += _selinux("pod", psc)
    out += _seccomp_not_unconfined("pod", psc)
    out += _apparmor("pod", psc)
    # -- restricted: pod level ----------------------------------------------------------------
    pod_nonroot = psc.get("runAsNonRoot") is True
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type") in ("RuntimeDefault", "Localhost")
    if psc.get("runAsUser") == 0:
        out.append("pod runAsUser=0")
    for c in containers:
        name = f"container {c.get('name')}"
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            out.append(f"{name}: privileged")
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            out.append(f"{name}: hostProcess")
        if sc.get("procMount") not in (None, "Default"):
            out.append(f"{name}: procMount {sc.get('procMount')}")
        for p in c.get("ports") or []:
            if p.get("hostPort"):
                out.append(f"{name}: hostPort {p['hostPort']}")
        out += _selinux(name, sc)
        out += _seccomp_not_unconfined(name, sc)
        out += _apparmor(name, sc)
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{name}: allowPrivilegeEscalation must be false")
        if sc.get("runAsNonRoot") is False or not (pod_nonroot or sc.get("runAsNonRoot")):
            out.append(f"{name}: runAsNonRoot must be true (pod or container)")
        if sc.get("runAsUser") == 0:
            out.append(f"{name}: runAsUser=0")
        c_seccomp = (sc.get("seccompProfile") or {}).get("type")
        if not (c_seccomp in ("RuntimeDefault", "Localhost") or (pod_seccomp and not c_seccomp)):
            out.append(f"{name}: seccompProfile must be RuntimeDefault or Localhost")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"{name}: capabilities must drop ALL")
        added = set(caps.get("add") or []) - {"NET_BIND_SERVICE"}
        if added:
            out.append(f"{name}: capabilities added {sorted(added)}")
    return out


def _selinux(where: str, sc: dict[str, Any]) -> list[str]:
    se = sc.get("seLinuxOptions") or {}
    out = []
    if se.get("type", "") not in SELINUX_TYPES:
        out.append(f"{where}: seLinuxOptions.type {se.get('type')}")
    if se.get("user") or se.get("role"):
        out.append(f"{where}: seLinuxOptions user/role set")
    return out


def _seccomp_not_unconfined(where: str, sc: dict[str, Any]) -> list[str]:
    if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
        return [f"{where}: seccompProfile Unconfined"]
    return []


def _apparmor(where: str, sc: dict[str, Any]) -> list[str]:
    t = (sc.get("appArmorProfile") or {}).get("type")
    if t in (None, "RuntimeDefault", "Localhost"):
        return []
    return [f"{where}: appArmorProfile {t}"]


def manifest_violations(manifest: dict[str, Any]) -> list[str]:
    """``violations`` of a workload manifest, prefixed with kind/name (empty for non-pods)."""
    pod = pod_spec_of(manifest)
    if pod is None:
        return []
    where = f"{manifest.get('kind')}/{(manifest.get('metadata') or {}).get('name')}"
    return [f"{where}: {v}" for v in violations(pod)]
