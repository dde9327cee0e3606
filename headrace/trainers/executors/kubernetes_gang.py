"""A distributed training job's pods on Kubernetes: one indexed Job per role of the gang.

A gang has up to three roles, each with its own pod template and resources (as JobSet's
ReplicatedJobs): ``worker`` (``W`` pods, 0 is the chief), and for parameter servers ``server``
(``S`` pods, CPU-only unless asked) and ``scheduler`` (one small pod). Each role is an indexed
Job named ``<attempt>-<role>-0`` -- the name JobSet gives a ReplicatedJob's first Job -- so a
pod's DNS name is ``<attempt>-<role>-0-<index>.<attempt>`` with or without JobSet (the
subdomain is the attempt's headless Service, or the one JobSet makes under the same name).

Every pod runs a short shell entrypoint: it reads ``JOB_COMPLETION_INDEX``, exports its role
and peers -- TF_CONFIG naming every worker, or ``DMLC_*`` naming the scheduler -- and execs.
ps-lite binds the scheduler's socket to the literal ``DMLC_PS_ROOT_URI``, which a pod cannot
bind when it is a DNS name; ``DMLC_USE_KUBERNETES=1`` makes the scheduler bind ``0.0.0.0``
(what Kubeflow's MXJob sets), while workers and servers bind their pod IP and report it.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from headrace.trainers.distributed.peers import Role, dmlc_env, tf_config, thread_env
from headrace.trainers.distributed.plan import GangPlan
from headrace.trainers.executors.base import job_command, ps_node_command

TF_PORT = 2222
PS_PORT = 9091


@dataclass(frozen=True)
class RoleTemplate:
    """One role of a gang: how many pods and what each one requests."""

    role: Role
    count: int
    cpu: str
    memory: str
    gpus: int = 0


def pod_count(plan: GangPlan) -> int:
    return plan.workers + (plan.servers + 1 if plan.kind == "parameter_server" else 0)


def role_job_name(job_name: str, role: Role) -> str:
    """The Job of one role in an attempt (JobSet's ``<jobset>-<replicatedJob>-<index>``)."""
    return f"{job_name}-{role}-0"


def peer_host(job_name: str, role: Role, index: int) -> str:
    """A gang pod's DNS name: its hostname ``<role job>-<index>`` under the attempt's
    headless Service (subdomain ``job_name``)."""
    return f"{role_job_name(job_name, role)}-{index}.{job_name}"


def static_env(plan: GangPlan, role: Role, *, job_name: str, cpus: int) -> dict[str, str]:
    """What every pod of one role shares (the container's ``env``)."""
    env = {"HEADRACE_WORKERS": str(plan.workers), "HEADRACE_STRATEGY": plan.kind,
           "HEADRACE_GANG_ROLE": role, **thread_env(max(1, cpus))}
    if plan.kind == "parameter_server":
        env.update(dmlc_env(role, root_host=peer_host(job_name, "scheduler", 0),
                            root_port=PS_PORT, workers=plan.workers, servers=plan.servers))
        env["DMLC_USE_KUBERNETES"] = "1"
    return env


def entrypoint(plan: GangPlan, role: Role, *, job_id: str, job_name: str) -> list[str]:
    """The container command: this member's index from ``$JOB_COMPLETION_INDEX``, then exec."""
    lines = ['export HEADRACE_WORKER_INDEX="$JOB_COMPLETION_INDEX"']
    if role == "worker" and plan.kind == "allreduce":
        peers = [f"{peer_host(job_name, 'worker', i)}:{TF_PORT}" for i in range(plan.workers)]
        cfg = tf_config(peers, "__INDEX__").replace("__INDEX__", "'\"$JOB_COMPLETION_INDEX\"'")
        lines.append(f"export TF_CONFIG='{cfg}'")
    command = job_command(job_id, python="python") if role == "worker" else ps_node_command(
        python="python")
    lines.append(f"exec {shlex.join(command)}")
    return ["/bin/sh", "-c", "\n".join(lines)]


def ports(plan: GangPlan) -> list[tuple[str, int]]:
    return [("tf-worker", TF_PORT)] if plan.kind == "allreduce" else [("ps-root", PS_PORT)]
