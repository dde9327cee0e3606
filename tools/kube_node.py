"""A real node beside kwok's: containerd and a kubelet (``tools/kube_build.sh node``) joined to a
:class:`~tools.kube_cluster.KubeCluster`, running pods with runc on this machine.

What it changes on the host, and how it leaves the rest alone:

* **Mounts**: containerd and the kubelet share one private mount namespace. In it ``/run``,
  ``/var/lib`` and ``/var/log`` are copy-on-write overlays whose upper layers live in the
  node's folder (shim sockets, runc state, the CNI cache, ``/var/log/containers``), and the
  kernel settings the kubelet insists on (``vm.overcommit_memory=1``, ``kernel.panic=10``,
  ``kernel.panic_on_oops=1``...) read as it wants there, while the machine keeps its own; with
  ``protectKernelDefaults`` the kubelet refuses to start rather than write them. Volumes the
  kubelet mounts (Secrets, projected tokens, emptyDirs) exist in that namespace only, and go
  with it.
* **cgroups** (v1 or v2, as mounted): the kubelet's ``cgroupRoot`` is a folder of its own in
  each hierarchy (``/headrace-NODE``), made here and removed on stop, so two nodes never
  manage each other's pods.
* **Firewall**: none of the kubelet's iptables chains (``makeIPTablesUtilChains: false``).
* **Network**: a bridge with a private /24 (10.88.N.0/24, the first free N) and no route
  anywhere else: the CNI bridge plugin puts each pod's veth on it without a gateway or
  masquerading, and IP forwarding stays as it is (off). A pod reaches its neighbours and the
  host's address on the bridge, which is the node's InternalIP and every pod's
  ``status.hostIP``: a service the host runs for pods (Apache Kafka) listens there. Not host
  networking: Pod Security ``restricted``, which Headrace's namespaces enforce, refuses
  ``hostNetwork``.
* **Images**: the pod sandbox (pause) and a busybox, built by tools/kube_build.sh without a
  registry, are imported into containerd at start; :meth:`RealNode.import_image` adds more
  (``./dev image``'s oci-archive). Nothing is pulled: nothing is reachable.

The node registers with the taint ``headrace.io/real-node:NoSchedule`` so that workloads meant
for the kwok nodes never land on it by chance; a pod for it tolerates the taint (and selects
``kubernetes.io/hostname``). :meth:`RealNode.stop` ends every process in its namespace and
removes the bridge, the cgroups and the folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from headrace.core.ports import free_ports
from tools.kube_cluster import Component, KubeCluster, KubeUnavailable, client_cert

TAINT = {"key": "headrace.io/real-node", "value": "true", "effect": "NoSchedule"}
TOLERATION = {"key": TAINT["key"], "operator": "Equal", "value": TAINT["value"],
              "effect": TAINT["effect"]}
CGROUP_ROOT = Path("/sys/fs/cgroup")
# What the kubelet's container manager requires of the kernel (setupKernelTunables in
# pkg/kubelet/cm/container_manager_linux.go, v1.36): read as such inside the node's namespace.
KERNEL_TUNABLES = {"vm/overcommit_memory": 1, "vm/panic_on_oom": 0, "kernel/panic": 10,
                   "kernel/panic_on_oops": 1, "kernel/keys/root_maxkeys": 1000000,
                   "kernel/keys/root_maxbytes": 25000000}
COPY_ON_WRITE = ("/run", "/var/lib", "/var/log")


def node_bin(bin_dir: Path) -> str | None:
    """Why a real node cannot run from ``bin_dir``, or None."""
    if (bin_dir.parent / ".node-complete").is_file() and all(
            (bin_dir / b).exists() for b in ("kubelet", "containerd", "ctr", "runc")):
        return None
    return "the real node is not built (tools/kube_build.sh node)"


def node_missing() -> str | None:
    """Why this machine cannot run a real node at all (one line), or None."""
    if os.uname().sysname != "Linux":
        return "a real node needs Linux"
    if os.geteuid() != 0:
        return "a real node needs root (mounts, cgroups, network namespaces)"
    for tool in ("unshare", "nsenter", "mount", "ip"):
        if shutil.which(tool) is None:
            return f"a real node needs {tool} (util-linux, iproute2)"
    if not cgroup_hierarchies():
        return f"no cgroup hierarchy is mounted under {CGROUP_ROOT}"
    if "overlay" not in Path("/proc/filesystems").read_text():
        return "the kernel has no overlayfs (containerd's snapshotter)"
    return None


def cgroup_hierarchies() -> list[Path]:
    """Every mounted cgroup hierarchy (v1: one per controller; v2: the unified one)."""
    out = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _dev, mnt, fstype = line.split()[:3]
        if fstype in ("cgroup", "cgroup2") and mnt.startswith(str(CGROUP_ROOT)):
            out.append(Path(mnt))
    return out


def _run(*argv: str, timeout_s: float = 60.0) -> str:
    out = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s)
    if out.returncode != 0:
        raise KubeUnavailable(f"{shlex.join(argv)} failed ({out.returncode}): "
                              f"{(out.stderr or out.stdout).strip()[-1500:]}")
    return out.stdout


def _kill_all(find: Callable[[], set[int]]) -> None:
    """SIGKILL what ``find`` returns until it returns nothing (5 s at most)."""
    for _ in range(50):
        left = find()
        if not left:
            return
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


class RealNode:
    """containerd + kubelet registered as ``name`` in ``cluster``."""

    def __init__(self, cluster: KubeCluster, name: str = "headrace-node") -> None:
        why = node_missing() or node_bin(cluster.bin)
        if why:
            raise KubeUnavailable(why)
        self.cluster = cluster
        self.name = name
        self.bin = cluster.bin
        self.root = cluster.root / f"node-{name}"
        tag = hashlib.sha256(f"{cluster.root}/{name}".encode()).hexdigest()[:8]
        self.bridge = f"hrbr{tag}"
        self.cgroup = f"/headrace-{name}-{tag}"
        self.subnet: ipaddress.IPv4Network | None = None
        self.components: dict[str, Component] = {}
        self.namespace = ""  # the mount namespace (``mnt:[inode]``)
        self.images: dict[str, str] = {}  # image name (pause, busybox) -> its reference
        self.started_s = 0.0

    # -- what callers use -------------------------------------------------------------------

    @property
    def address(self) -> str:
        """The host's address on the pods' bridge: the node's InternalIP and pods' hostIP."""
        assert self.subnet is not None, "not started"
        return str(self.subnet.network_address + 1)

    @property
    def socket(self) -> Path:
        return self.root / "containerd" / "containerd.sock"

    def ctr(self, *args: str, timeout_s: float = 300.0) -> str:
        """containerd's own client on the kubelet's namespace of images and containers, run
        in the node's mount namespace (where its shims look for the client's FIFOs)."""
        return _run("nsenter", f"--mount=/proc/{self._containerd_pid()}/ns/mnt", "--",
                    str(self.bin / "ctr"), "--address", str(self.socket), "--namespace",
                    "k8s.io", *args, timeout_s=timeout_s)

    def import_image(self, archive: Path, *, base_name: str = "",
                     timeout_s: float = 900.0) -> list[str]:
        """Load an image archive (docker-archive, or an oci-archive whose references are
        tags alone, named ``base_name:TAG``) into the node's containerd, as a registry pull
        would; returns the references it now holds."""
        before = set(self.ctr("images", "ls", "-q").split())
        name = ["--base-name", base_name] if base_name else []
        self.ctr("images", "import", *name, str(archive), timeout_s=timeout_s)
        return sorted(set(self.ctr("images", "ls", "-q").split()) - before)

    def node(self) -> dict[str, Any]:
        status, data = self.cluster.request("GET", f"/api/v1/nodes/{self.name}")
        if status != 200:
            raise KubeUnavailable(f"node {self.name}: {status} {data}")
        return dict(data)

    def describe(self) -> str:
        """One line: the node, its kubelet and runtime versions, where pods reach the host."""
        info = self.node()["status"]["nodeInfo"]
        return (f"node: {self.name} (real: kubelet {info['kubeletVersion']}, "
                f"{info['containerRuntimeVersion']}, runc; pods on {self.subnet}, host "
                f"{self.address}; taint {TAINT['key']}:{TAINT['effect']})")

    # -- start and stop ---------------------------------------------------------------------

    def start(self, *, timeout_s: float = 180.0) -> RealNode:
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self._cgroups()
            self._bridge()
            self._start_containerd(deadline)
            self._load_images()
            self._start_kubelet(deadline)
        except BaseException:
            self.stop()
            raise
        self.started_s = time.monotonic() - t0
        return self

    def _cgroups(self) -> None:
        for h in cgroup_hierarchies():
            d = h / self.cgroup.lstrip("/")
            d.mkdir(exist_ok=True)
            # A v1 cpuset group starts with no CPUs or memory nodes: the parent's.
            for f in ("cpuset.cpus", "cpuset.mems"):
                if (d / f).exists() and not (d / f).read_text().strip():
                    (d / f).write_text((h / f).read_text())

    def _bridge(self) -> None:
        """A bridge with the first 10.88.N.0/24 that no interface or route of this machine
        uses (under a lock: two nodes starting at once pick different ones)."""
        lock = Path(tempfile.gettempdir()) / "headrace-node-bridges.lock"
        with open(lock, "a") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            used = []
            for fam in ("addr", "route"):
                for item in json.loads(_run("ip", "-j", "-4", fam, "show") or "[]"):
                    for a in item.get("addr_info", []):
                        used.append(ipaddress.ip_network(f"{a['local']}/{a['prefixlen']}",
                                                         strict=False))
                    dst = item.get("dst")
                    if dst and dst != "default":
                        used.append(ipaddress.ip_network(dst, strict=False))
            for n in range(256):
                net = ipaddress.ip_network(f"10.88.{n}.0/24")
                if not any(net.overlaps(u) for u in used):
                    break
            else:
                raise KubeUnavailable("no free 10.88.N.0/24 for the pods' bridge")
            self.subnet = net  # before it exists: stop() removes whatever was made
            _run("ip", "link", "add", self.bridge, "type", "bridge")
            _run("ip", "addr", "add", f"{self.address}/24", "dev", self.bridge)
            _run("ip", "link", "set", self.bridge, "up")

    def _cni_config(self) -> Path:
        d = self.root / "cni"
        d.mkdir(exist_ok=True)
        assert self.subnet is not None
        path = d / "10-headrace.conflist"
        path.write_text(json.dumps({
            "cniVersion": "1.0.0", "name": "headrace-pods",
            "plugins": [{
                # No isGateway (it would turn IP forwarding on) and no ipMasq: pods get an
                # address on the bridge and no route beyond it.
                "type": "bridge", "bridge": self.bridge, "isGateway": False, "ipMasq": False,
                "ipam": {"type": "host-local",
                         "ranges": [[{"subnet": str(self.subnet), "gateway": self.address}]],
                         "dataDir": str(self.root / "cni-ipam")}}]}, indent=1))
        return d

    def _containerd_config(self) -> Path:
        c = self.root / "containerd"
        c.mkdir(exist_ok=True)
        cni_bin = (self.bin.parent / "cni").resolve()
        path = c / "config.toml"
        pause = self.images.get("pause") or self._image_index()["pause"]
        path.write_text(f'''version = 2
root = "{c / 'root'}"
state = "{c / 'state'}"
[grpc]
  address = "{self.socket}"
[ttrpc]
  address = "{self.socket}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{c / 'opt'}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  # Root here lacks CAP_SYS_RESOURCE: runc cannot lower a process's oom_score_adj (the
  # kubelet asks -998 for sandboxes), so no container goes below containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{self._cni_config()}"
    max_conf_num = 1
''')
        return path

    def _namespace_script(self) -> str:
        """The shell that makes the node's mount namespace, then becomes containerd."""
        lines = ["set -e"]
        for i, path in enumerate(COPY_ON_WRITE):
            up, work = self.root / "cow" / f"{i}-upper", self.root / "cow" / f"{i}-work"
            up.mkdir(parents=True, exist_ok=True)
            work.mkdir(parents=True, exist_ok=True)
            lines.append(f"mount -t overlay overlay -o lowerdir={path},upperdir={up},"
                         f"workdir={work} {path}")
        sysctl = self.root / "sysctl"
        sysctl.mkdir(exist_ok=True)
        for key, want in KERNEL_TUNABLES.items():
            f = sysctl / key.replace("/", ".")
            f.write_text(f"{want}\n")
            lines.append(f"mount --bind {f} /proc/sys/{key}")
        return "\n".join(lines) + "\nexec \"$@\"\n"

    def _start_containerd(self, deadline: float) -> None:
        config = self._containerd_config()
        env_path = f"{self.bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        c = Component("containerd", [
            "env", f"PATH={env_path}", "unshare", "--mount", "--propagation", "private", "--",
            "sh", "-c", self._namespace_script(), "node-namespace",
            str(self.bin / "containerd"), "--config", str(config), "--log-level", "info"],
            self.root / "containerd.log")
        self.components["containerd"] = c
        c.start()
        assert c.proc is not None
        self._wait(lambda: self.socket.exists() and self._ctr_ok(), deadline,
                   "containerd's socket")
        self.namespace = os.readlink(f"/proc/{c.proc.pid}/ns/mnt")
        if self.namespace == os.readlink("/proc/self/ns/mnt"):
            raise KubeUnavailable("containerd did not get a mount namespace of its own")

    def _ctr_ok(self) -> bool:
        try:
            self.ctr("version", timeout_s=10)
        except (KubeUnavailable, subprocess.TimeoutExpired):
            return False
        return True

    def _image_index(self) -> dict[str, str]:
        """tools/kube_build.sh's images: name -> reference (from images/index)."""
        out = {}
        for line in (self.bin.parent / "images" / "index").read_text().splitlines():
            archive, ref = line.split()
            out[archive.removesuffix(".tar")] = ref
        return out

    def _load_images(self) -> None:
        for name, ref in self._image_index().items():
            self.ctr("images", "import", str(self.bin.parent / "images" / f"{name}.tar"))
            self.images[name] = ref

    def _kubelet_config(self) -> Path:
        k = self.root / "kubelet"
        k.mkdir(exist_ok=True)
        port, healthz = free_ports(2)
        pki = self.cluster.root / "pki"
        crt, key = client_cert(pki, f"node-{self.name}", f"system:node:{self.name}",
                               "system:nodes")
        kubeconfig = k / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "node",
            "clusters": [{"name": "c", "cluster": {
                "server": self.cluster.server, "certificate-authority": str(pki / "ca.crt")}}],
            "users": [{"name": "node", "user": {"client-certificate": str(crt),
                                                "client-key": str(key)}}],
            "contexts": [{"name": "node", "context": {"cluster": "c", "user": "node"}}]}))
        kubeconfig.chmod(0o600)
        config = k / "config.yaml"
        config.write_text(json.dumps({
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            # This machine mounts cgroup v1, which kubelets from 1.35 refuse unless told.
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs", "cgroupRoot": self.cgroup,
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "address": self.address, "port": port, "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": healthz,
            # The API server's client certificate, authorized by asking the API server.
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(pki / "ca.crt")}},
            "authorization": {"mode": "Webhook"},
            "protectKernelDefaults": True,
            # No iptables chains (KUBE-FIREWALL and its DROP rule, canaries): they serve
            # kube-proxy, which does not run here, and would outlive the kubelet on the host.
            "makeIPTablesUtilChains": False,
            "registerWithTaints": [TAINT],
            "podLogsDir": str(k / "pod-logs"),
            "resolvConf": "/etc/resolv.conf",
            "failSwapOn": False,
            "maxPods": 30,
            # The disk is shared with everything else here: evict only when nearly full.
            "evictionHard": {"memory.available": "200Mi", "nodefs.available": "2%",
                             "imagefs.available": "2%", "nodefs.inodesFree": "2%"},
            "imageGCHighThresholdPercent": 99, "imageGCLowThresholdPercent": 98,
            "serializeImagePulls": False,
            "nodeStatusReportFrequency": "10s",
            "containerLogMaxSize": "10Mi",
            "shutdownGracePeriod": "0s"}, indent=1))
        return config

    def _start_kubelet(self, deadline: float) -> None:
        config = self._kubelet_config()
        k = self.root / "kubelet"
        c = Component("kubelet", [
            "nsenter", f"--mount=/proc/{self._containerd_pid()}/ns/mnt", "--",
            str(self.bin / "kubelet"), "--config", str(config),
            "--kubeconfig", str(k / "kubeconfig"), "--root-dir", str(k / "root"),
            "--cert-dir", str(k / "pki"), "--hostname-override", self.name,
            "--node-ip", self.address, "--v", "1"],
            self.root / "kubelet.log")
        self.components["kubelet"] = c
        c.start()

        def ready() -> bool:
            status, data = self.cluster.request("GET", f"/api/v1/nodes/{self.name}")
            return status == 200 and any(
                x.get("type") == "Ready" and x.get("status") == "True"
                for x in data.get("status", {}).get("conditions", []))
        self._wait(ready, deadline, f"the kubelet to register {self.name} Ready")

    def _containerd_pid(self) -> int:
        p = self.components["containerd"].proc
        assert p is not None
        return p.pid

    def _wait(self, ok: Any, deadline: float, what: str) -> None:
        while time.monotonic() < deadline:
            for c in self.components.values():
                if c.proc is not None and c.proc.poll() is not None:
                    raise KubeUnavailable(f"{c.name} exited with {c.proc.returncode}:\n"
                                          f"{c.log_tail(3000)}")
            if ok():
                return
            time.sleep(0.25)
        raise KubeUnavailable(f"timed out waiting for {what}\n{self.log_tails()}")

    def check_alive(self) -> None:
        """Raises when the kubelet or containerd has exited."""
        self._wait(lambda: True, time.monotonic() + 1, "")

    def log_tails(self, chars: int = 3000) -> str:
        return "\n".join(f"--- {c.name}\n{c.log_tail(chars)}" for c in self.components.values())

    def _namespace_pids(self) -> set[int]:
        """Every process in the node's mount namespace: containerd, the kubelet, the shims
        and every container's processes."""
        if not self.namespace:
            return set()
        out = set()
        for p in Path("/proc").iterdir():
            if p.name.isdigit():
                with contextlib.suppress(OSError):
                    if os.readlink(p / "ns" / "mnt") == self.namespace:
                        out.add(int(p.name))
        return out

    def _cgroup_pids(self) -> set[int]:
        """Every process in the node's cgroups: its pods' containers (each in a mount
        namespace of its own, so not found by :meth:`_namespace_pids`)."""
        out: set[int] = set()
        for h in cgroup_hierarchies():
            for d, _dirs, _files in os.walk(h / self.cgroup.lstrip("/")):
                with contextlib.suppress(OSError):
                    out.update(int(p) for p in Path(d, "cgroup.procs").read_text().split())
        return out

    def stop(self) -> None:
        """The kubelet, its pods' containers, containerd and its shims; then the bridge, the
        cgroups and the node's folder (its mounts went with its namespace)."""
        kubelet = self.components.get("kubelet")
        if kubelet is not None:
            kubelet.stop()
        # Containers outlive the kubelet and containerd, shims outlive containerd: end them by
        # the cgroups and the mount namespace that are the node's alone.
        _kill_all(self._cgroup_pids)
        ctd = self.components.get("containerd")
        if ctd is not None:
            ctd.stop()
        _kill_all(self._namespace_pids)
        if self.subnet is not None:
            subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=30)
        self._remove_cgroups()
        shutil.rmtree(self.root, ignore_errors=True)

    def _remove_cgroups(self) -> None:
        for h in cgroup_hierarchies():
            top = h / self.cgroup.lstrip("/")
            if not top.is_dir():
                continue
            for d, _dirs, _files in os.walk(top, topdown=False):
                for _ in range(20):  # a group empties a moment after its last process dies
                    try:
                        os.rmdir(d)
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        time.sleep(0.1)

    def __enter__(self) -> RealNode:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
