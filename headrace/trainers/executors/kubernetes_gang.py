"""A distributed training job's pods on Kubernetes: one indexed Job, one pod per gang member.

Indices ``0..W-1`` are the workers (0 is the chief), then, for parameter servers, ``W..W+S-1``
the servers and ``W+S`` the scheduler. Every pod runs the same shell entrypoint: it reads its
``JOB_COMPLETION_INDEX`` (set by the Job controller), exports its role and its peers -- TF_CONFIG
naming every worker by its stable DNS name under the headless Service, or ``DMLC_ROLE`` with the
scheduler's DNS name in ``DMLC_PS_ROOT_URI`` -- and execs the trainer or the ps-lite node.
"""

from __future__ import annotations

import shlex

from headrace.trainers.distributed.peers import dmlc_env, member_env, tf_config, thread_env
from headrace.trainers.distributed.plan import GangPlan
from headrace.trainers.executors.base import job_command, ps_node_command

TF_PORT = 2222
PS_PORT = 9091


def pod_count(plan: GangPlan) -> int:
    return plan.workers + (plan.servers + 1 if plan.kind == "parameter_server" else 0)


def peer_host(job_name: str, service: str, index: int) -> str:
    """An indexed pod's DNS name: ``<job>-<index>.<service>`` (hostname + subdomain)."""
    return f"{job_name}-{index}.{service}"


def static_env(plan: GangPlan, *, job_name: str, service: str, cpus: int) -> dict[str, str]:
    """What every pod of the gang shares (the container's ``env``)."""
    env = {"HEADRACE_WORKERS": str(plan.workers), "HEADRACE_STRATEGY": plan.kind,
           **thread_env(max(1, cpus))}
    if plan.kind == "parameter_server":
        sched = peer_host(job_name, service, plan.workers + plan.servers)
        env.update({k: v for k, v in dmlc_env("worker", root_host=sched, root_port=PS_PORT,
                                               workers=plan.workers,
                                               servers=plan.servers).items()
                    if k != "DMLC_ROLE"})
    return env


def entrypoint(plan: GangPlan, *, job_id: str, job_name: str, service: str) -> list[str]:
    """The container command: role and peers from ``$JOB_COMPLETION_INDEX``, then exec."""
    train = shlex.join(job_command(job_id, python="python"))
    ps_node = shlex.join(ps_node_command(python="python"))
    worker = member_env(role="worker", index=0, workers=plan.workers, strategy=plan.kind)
    lines = ['i="$JOB_COMPLETION_INDEX"',
             f'if [ "$i" -lt {plan.workers} ]; then',
             f'  export HEADRACE_GANG_ROLE={worker["HEADRACE_GANG_ROLE"]} '
             'HEADRACE_WORKER_INDEX="$i"']
    if plan.kind == "allreduce":
        peers = [f"{peer_host(job_name, service, i)}:{TF_PORT}" for i in range(plan.workers)]
        cfg = tf_config(peers, "__INDEX__").replace("__INDEX__", "'\"$i\"'")
        lines.append(f"  export TF_CONFIG='{cfg}'")
        lines += [f"  exec {train}", "fi", 'echo "no gang member at index $i" >&2', "exit 65"]
    else:
        lines += ["  export DMLC_ROLE=worker", f"  exec {train}",
                  f'elif [ "$i" -lt {plan.workers + plan.servers} ]; then',
                  "  export HEADRACE_GANG_ROLE=server DMLC_ROLE=server",
                  f"  exec {ps_node}",
                  "fi",
                  "export HEADRACE_GANG_ROLE=scheduler DMLC_ROLE=scheduler",
                  f"exec {ps_node}"]
    return ["/bin/sh", "-c", "\n".join(lines)]


def ports(plan: GangPlan) -> list[tuple[str, int]]:
    return [("tf-worker", TF_PORT)] if plan.kind == "allreduce" else [("ps-root", PS_PORT)]
