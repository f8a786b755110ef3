"""Names, labels and annotations of the objects the controller owns, and Kubernetes' own name rules.

A Job's name is derived from the Grove job id and the attempt (`fj-<job id>-<attempt>`), so applying
the same job twice, or after a controller restart, addresses the same object: never a duplicate Job.
kubernetes-validate checks structure and types only; the DNS and label-value rules are checked here.
"""

from __future__ import annotations

import re

from forest_agent.errors import AgentError

DOMAIN = "forest.dev"
MANAGED_BY = "app.kubernetes.io/managed-by"
CONTROLLER = "forest-controller"
FIELD_MANAGER = "forest-controller"

LABEL_JOB_ID = f"{DOMAIN}/job-id"
LABEL_RUN_ID = f"{DOMAIN}/run-id"
LABEL_GROVE = f"{DOMAIN}/grove"
LABEL_ATTEMPT = f"{DOMAIN}/attempt"
LABEL_TRUST = f"{DOMAIN}/trust"
LABEL_CHANGE_KIND = f"{DOMAIN}/change-kind"
LABEL_ISOLATION = f"{DOMAIN}/network-isolation"
ANNOTATION_NODE = f"{DOMAIN}/node"
ANNOTATION_IDEMPOTENCY_KEY = f"{DOMAIN}/idempotency-key"
ANNOTATION_GENERATION = f"{DOMAIN}/generation"
ANNOTATION_REPORTED = f"{DOMAIN}/reported"

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")  # RFC 1123 label, at most 63
DNS_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)  # at most 253
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")  # at most 63
LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")  # the part after the prefix
C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class NameInvalid(AgentError):
    code = "kubernetes_name_invalid"


def dns_label(value: str) -> bool:
    return len(value) <= 63 and bool(DNS_LABEL.match(value))


def dns_subdomain(value: str) -> bool:
    return len(value) <= 253 and bool(DNS_SUBDOMAIN.match(value))


def label_value(value: str) -> bool:
    return len(value) <= 63 and bool(LABEL_VALUE.match(value))


def label_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and not dns_subdomain(prefix):
        return False
    return len(name) <= 63 and bool(LABEL_NAME.match(name))


def attempt_of(idempotency_key: str) -> int:
    """The attempt is the last part of Host's idempotency key `run:node:attempt` (1 when absent)."""
    tail = idempotency_key.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else 1


def job_object_name(job_id: str, attempt: int) -> str:
    """`fj-<job id>-<attempt>`: stable across restarts; a DNS label so it is also a valid label value
    (the Job controller copies it into its Pods' `job-name` label)."""
    name = f"fj-{job_id.lower()}-{attempt}"
    if not dns_label(name):
        raise NameInvalid(f"job id {job_id!r} with attempt {attempt} does not make a DNS-1123 label (≤63)")
    return name


def workload_object_name(node: str) -> str:
    """A Deployment (and its Service) is named after the deploy node: the next run of the same graph
    updates the same Deployment instead of starting a second one beside it."""
    name = re.sub(r"[^a-z0-9-]+", "-", node.lower()).strip("-")[:63].strip("-")
    if not dns_label(name):
        raise NameInvalid(f"node {node!r} does not make a DNS-1123 label")
    return name
