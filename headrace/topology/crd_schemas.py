"""JSON Schemas for the custom resources Headrace emits, written from their public CRDs.

kubernetes-validate ships only core schemas. These cover the fields Headrace uses and are strict
(``additionalProperties: false``) where the upstream CRD is structural, so a typo fails:

* KEDA ``ScaledObject`` / ``TriggerAuthentication`` (keda.sh/v1alpha1, KEDA 2.14 CRDs),
* Volcano ``PodGroup`` (scheduling.volcano.sh/v1beta1, Volcano 1.9 CRD),
* Prometheus Operator ``ServiceMonitor`` (monitoring.coreos.com/v1, 0.73 CRD),
* JobSet ``JobSet`` (jobset.x-k8s.io/v1alpha2, JobSet 0.5 CRD; each ReplicatedJob's Job
  template is validated as a ``batch/v1`` Job by ``validation``).
"""

from __future__ import annotations

from typing import Any

_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_STR_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_QUANTITY = {"anyOf": [{"type": "integer"}, {"type": "string", "pattern": r"^[0-9.]+[a-zA-Z]*$"}]}

_METADATA: dict[str, Any] = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "maxLength": 253, "pattern": _DNS_SUBDOMAIN},
        "namespace": {"type": "string", "maxLength": 63},
        "labels": _STR_MAP,
        "annotations": _STR_MAP,
        "ownerReferences": {"type": "array", "items": {
            "type": "object",
            "required": ["apiVersion", "kind", "name", "uid"],
            "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                           "name": {"type": "string"}, "uid": {"type": "string"},
                           "controller": {"type": "boolean"},
                           "blockOwnerDeletion": {"type": "boolean"}},
            "additionalProperties": False}},
    },
    "additionalProperties": False,
}


def _doc(api_version: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": api_version},
            "kind": {"const": kind},
            "metadata": _METADATA,
            "spec": spec,
        },
        "additionalProperties": False,
    }


_INT0 = {"type": "integer", "minimum": 0, "maximum": 2147483647}

SCALED_OBJECT = _doc("keda.sh/v1alpha1", "ScaledObject", {
    "type": "object",
    "required": ["scaleTargetRef", "triggers"],
    "properties": {
        "scaleTargetRef": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "name": {"type": "string", "minLength": 1},
                "envSourceContainerName": {"type": "string"},
            },
            "additionalProperties": False,
        },
        "pollingInterval": _INT0,
        "cooldownPeriod": _INT0,
        "initialCooldownPeriod": _INT0,
        "idleReplicaCount": _INT0,
        "minReplicaCount": _INT0,
        "maxReplicaCount": _INT0,
        "fallback": {
            "type": "object",
            "required": ["failureThreshold", "replicas"],
            "properties": {"failureThreshold": _INT0, "replicas": _INT0},
            "additionalProperties": False,
        },
        "advanced": {
            "type": "object",
            "properties": {
                "restoreToOriginalReplicaCount": {"type": "boolean"},
                "horizontalPodAutoscalerConfig": {"type": "object"},
            },
            "additionalProperties": False,
        },
        "triggers": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["type", "metadata"],
                "properties": {
                    "type": {"type": "string", "minLength": 1},
                    "name": {"type": "string"},
                    "metadata": _STR_MAP,
                    "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                    "useCachedMetrics": {"type": "boolean"},
                    "authenticationRef": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {
                            "name": {"type": "string"},
                            "kind": {"enum": ["TriggerAuthentication",
                                              "ClusterTriggerAuthentication"]},
                        },
                        "additionalProperties": False,
                    },
                },
                "additionalProperties": False,
            },
        },
    },
    "additionalProperties": False,
})

TRIGGER_AUTHENTICATION = _doc("keda.sh/v1alpha1", "TriggerAuthentication", {
    "type": "object",
    "properties": {
        "secretTargetRef": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["parameter", "name", "key"],
                "properties": {
                    "parameter": {"type": "string"},
                    "name": {"type": "string"},
                    "key": {"type": "string"},
                },
                "additionalProperties": False,
            },
        },
    },
    "additionalProperties": False,
})

POD_GROUP = _doc("scheduling.volcano.sh/v1beta1", "PodGroup", {
    "type": "object",
    "required": ["minMember"],
    "properties": {
        "minMember": {"type": "integer", "minimum": 1, "maximum": 2147483647},
        "minTaskMember": {"type": "object", "additionalProperties": _INT0},
        "minResources": {"type": "object", "additionalProperties": _QUANTITY},
        "queue": {"type": "string"},
        "priorityClassName": {"type": "string"},
    },
    "additionalProperties": False,
})

_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"

JOB_SET = _doc("jobset.x-k8s.io/v1alpha2", "JobSet", {
    "type": "object",
    "required": ["replicatedJobs"],
    "properties": {
        "suspend": {"type": "boolean"},
        "ttlSecondsAfterFinished": {"type": "integer", "minimum": 0},
        "network": {"type": "object", "properties": {
            "enableDNSHostnames": {"type": "boolean"},
            "subdomain": {"type": "string", "maxLength": 63, "pattern": _DNS_LABEL},
            "publishNotReadyAddresses": {"type": "boolean"}}, "additionalProperties": False},
        "successPolicy": {"type": "object", "required": ["operator"], "properties": {
            "operator": {"enum": ["All", "Any"]},
            "targetReplicatedJobs": {"type": "array", "items": {"type": "string"}}},
            "additionalProperties": False},
        "failurePolicy": {"type": "object", "properties": {
            "maxRestarts": {"type": "integer", "minimum": 0}}, "additionalProperties": False},
        "replicatedJobs": {"type": "array", "minItems": 1, "items": {
            "type": "object",
            "required": ["name", "template"],
            "properties": {
                "name": {"type": "string", "maxLength": 63, "pattern": _DNS_LABEL},
                "replicas": {"type": "integer", "minimum": 1},
                "template": {"type": "object", "required": ["spec"], "properties": {
                    "metadata": {"type": "object", "properties": {
                        "labels": _STR_MAP, "annotations": _STR_MAP},
                        "additionalProperties": False},
                    "spec": {"type": "object"}}, "additionalProperties": False},
            },
            "additionalProperties": False,
        }},
    },
    "additionalProperties": False,
})

_ENDPOINT = {
    "type": "object",
    "properties": {
        "port": {"type": "string"},
        "targetPort": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        "path": {"type": "string"},
        "scheme": {"enum": ["http", "https"]},
        "interval": {"type": "string", "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?"
                     r"(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"},
        "scrapeTimeout": {"type": "string"},
        "honorLabels": {"type": "boolean"},
    },
    "additionalProperties": False,
}

SERVICE_MONITOR = _doc("monitoring.coreos.com/v1", "ServiceMonitor", {
    "type": "object",
    "required": ["selector"],
    "properties": {
        "endpoints": {"type": "array", "items": _ENDPOINT},
        "selector": {
            "type": "object",
            "properties": {
                "matchLabels": _STR_MAP,
                "matchExpressions": {"type": "array", "items": {"type": "object"}},
            },
            "additionalProperties": False,
        },
        "namespaceSelector": {
            "type": "object",
            "properties": {
                "any": {"type": "boolean"},
                "matchNames": {"type": "array", "items": {"type": "string"}},
            },
            "additionalProperties": False,
        },
        "jobLabel": {"type": "string"},
    },
    "additionalProperties": False,
})

CRD_SCHEMAS: dict[tuple[str, str], dict[str, Any]] = {
    ("keda.sh/v1alpha1", "ScaledObject"): SCALED_OBJECT,
    ("keda.sh/v1alpha1", "TriggerAuthentication"): TRIGGER_AUTHENTICATION,
    ("scheduling.volcano.sh/v1beta1", "PodGroup"): POD_GROUP,
    ("monitoring.coreos.com/v1", "ServiceMonitor"): SERVICE_MONITOR,
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): JOB_SET,
}
