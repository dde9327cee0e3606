"""One NetworkPolicy per gang attempt: its pods accept traffic on the gang's ports only from
pods of the same training job, so a job's trainers cannot reach another job's.

NetworkPolicies are a union: the chart's trainer policy allows no ingress to trainer pods
(egress to DNS, Kafka and other trainers stays there), and this one opens the attempt's pods to
their own job. It selects the attempt's pods by the labels its Service selects on
(``headrace.io/job`` and ``headrace.io/attempt``) and is owned by the attempt's owner, so
deleting the attempt deletes it. A single-pod job needs no ingress and gets none.
"""

from __future__ import annotations

from kubernetes import client as k

from headrace.trainers.distributed.plan import GangPlan
from headrace.trainers.executors.kubernetes_gang import PS_PORT, TF_PORT

# ps-lite's servers and workers bind a port the kernel picks (Linux's default ephemeral range).
EPHEMERAL_PORTS = (32768, 60999)


def gang_ingress_ports(plan: GangPlan, framework: str = "tensorflow"
                       ) -> list[k.V1NetworkPolicyPort]:
    """The ports gang members reach each other on: TF_CONFIG's workers, or ps-lite's
    scheduler plus the ephemeral ports its nodes bind; torch's all-reduce: worker 0's store on
    TF_CONFIG's port plus the ephemeral ports gloo's (or NCCL's) pair sockets bind."""
    low, high = EPHEMERAL_PORTS
    if plan.kind == "allreduce":
        tf = [k.V1NetworkPolicyPort(port=TF_PORT, protocol="TCP")]
        if framework != "torch":
            return tf
        return [*tf, k.V1NetworkPolicyPort(port=low, end_port=high, protocol="TCP")]
    return [k.V1NetworkPolicyPort(port=PS_PORT, protocol="TCP"),
            k.V1NetworkPolicyPort(port=low, end_port=high, protocol="TCP")]


def gang_network_policy(*, name: str, namespace: str, job_label: str, attempt: int,
                        plan: GangPlan, labels: dict[str, str], framework: str,
                        annotations: dict[str, str],
                        owner: k.V1OwnerReference | None) -> k.V1NetworkPolicy:
    same_job = {"headrace.io/job": job_label, "app.kubernetes.io/component": "trainer"}
    return k.V1NetworkPolicy(
        api_version="networking.k8s.io/v1", kind="NetworkPolicy",
        metadata=k.V1ObjectMeta(name=name, namespace=namespace, labels=labels,
                                annotations=annotations,
                                owner_references=[owner] if owner else None),
        spec=k.V1NetworkPolicySpec(
            pod_selector=k.V1LabelSelector(match_labels={
                **same_job, "headrace.io/attempt": str(attempt)}),
            policy_types=["Ingress"],
            # The client's parameter is ``_from``; its type stubs call it ``var_from``.
            ingress=[k.V1NetworkPolicyIngressRule(  # type: ignore[call-arg]
                _from=[k.V1NetworkPolicyPeer(
                    pod_selector=k.V1LabelSelector(match_labels=same_job))],
                ports=gang_ingress_ports(plan, framework))],
        ),
    )
