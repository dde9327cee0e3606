"""Pod Security "restricted" settings shared by every pod Headrace builds in Python (training
Jobs); the Helm chart renders the same values for every pod it deploys.

* a fixed non-root uid/gid (the image's ``headrace`` user) and ``fsGroup`` so the RWX DFS
  volume is group-writable where the storage honours it (NFS often does not: see
  docs/topology.md, "The DFS volume");
* seccomp ``RuntimeDefault``, every capability dropped, no privilege escalation;
* a read-only root filesystem: ``/tmp`` is an ``emptyDir`` and ``HOME`` (and the caches that
  TensorFlow, MXNet and matplotlib write) point there;
* no ServiceAccount token unless the pod talks to the API server (only the control plane does).
"""

from __future__ import annotations

from kubernetes import client as k

UID = 10001
GID = 10001
TMP = "/tmp"
KAFKA_TLS_DIR = "/etc/headrace/kafka-tls"
KAFKA_SASL_DIR = "/etc/headrace/kafka-sasl"
KAFKA_CLIENT_DIR = "/etc/headrace/kafka-client"  # the chart's ssl.certificate/key.location
# Writable locations for a read-only root filesystem, all under the /tmp emptyDir.
TMP_ENV: tuple[tuple[str, str], ...] = (
    ("HOME", TMP),
    ("TMPDIR", TMP),
    ("XDG_CACHE_HOME", f"{TMP}/.cache"),
    ("MPLCONFIGDIR", f"{TMP}/.matplotlib"),
    ("KERAS_HOME", f"{TMP}/.keras"),
    ("MXNET_HOME", f"{TMP}/.mxnet"),
)


def pod_security_context() -> k.V1PodSecurityContext:
    return k.V1PodSecurityContext(
        run_as_non_root=True, run_as_user=UID, run_as_group=GID, fs_group=GID,
        # Re-own the volume only when its root does not match: a big DFS is not walked on
        # every pod start.
        fs_group_change_policy="OnRootMismatch",
        seccomp_profile=k.V1SeccompProfile(type="RuntimeDefault"),
    )


def container_security_context() -> k.V1SecurityContext:
    return k.V1SecurityContext(
        allow_privilege_escalation=False, privileged=False, read_only_root_filesystem=True,
        run_as_non_root=True, capabilities=k.V1Capabilities(drop=["ALL"]),
    )


def tmp_volume() -> k.V1Volume:
    return k.V1Volume(name="tmp", empty_dir=k.V1EmptyDirVolumeSource(size_limit="2Gi"))


def tmp_mount() -> k.V1VolumeMount:
    return k.V1VolumeMount(name="tmp", mount_path=TMP)


def tmp_env() -> list[k.V1EnvVar]:
    return [k.V1EnvVar(name=n, value=v) for n, v in TMP_ENV]


def kafka_volumes(*, kafka_secret: str | None, password_file: str | None,
                  ca_secret: str | None, client_cert_secret: str | None = None,
                  ) -> tuple[list[k.V1Volume], list[k.V1VolumeMount]]:
    """The SASL password (key ``password`` of the Kafka Secret), the CA and the mTLS client
    certificate and key (``user.crt``/``user.key``) as files, read-only.

    The password is mounted only when the pod's settings name a password file, at the same
    path the control plane uses, so one ``HEADRACE_KAFKA_PASSWORD_FILE`` serves every pod.
    """
    volumes: list[k.V1Volume] = []
    mounts: list[k.V1VolumeMount] = []
    if kafka_secret and password_file:
        directory, _, name = password_file.rpartition("/")
        volumes.append(k.V1Volume(name="kafka-sasl", secret=k.V1SecretVolumeSource(
            secret_name=kafka_secret, default_mode=0o440,
            items=[k.V1KeyToPath(key="password", path=name)])))
        mounts.append(k.V1VolumeMount(name="kafka-sasl", mount_path=directory or "/",
                                      read_only=True))
    if ca_secret:
        volumes.append(k.V1Volume(name="kafka-tls", secret=k.V1SecretVolumeSource(
            secret_name=ca_secret, default_mode=0o444)))
        mounts.append(k.V1VolumeMount(name="kafka-tls", mount_path=KAFKA_TLS_DIR,
                                      read_only=True))
    if client_cert_secret:  # only the certificate and its key (a KafkaUser's Secret has more)
        volumes.append(k.V1Volume(name="kafka-client-cert", secret=k.V1SecretVolumeSource(
            secret_name=client_cert_secret, default_mode=0o440,
            items=[k.V1KeyToPath(key=f, path=f) for f in ("user.crt", "user.key")])))
        mounts.append(k.V1VolumeMount(name="kafka-client-cert", mount_path=KAFKA_CLIENT_DIR,
                                      read_only=True))
    return volumes, mounts
