"""The pod fields cronoq knows by name, shared by a Task and its TaskPool's template: image,
command, environment, resources, scheduling, the pod's labels and annotations."""
from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import ConfigDict, Field, model_validator

from cronoq import pod_protocol
from cronoq.api.model import LabelValue, Model, Quantity, SubdomainName, rule, string_map, validations

ENV_NAME = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
RESERVED_ENV_PREFIX = pod_protocol.Env.PREFIX


class EnvVar(Model):
    """An environment variable of the task container."""

    model_config = ConfigDict(json_schema_extra=validations(rule(
        f"!self.name.startsWith('{RESERVED_ENV_PREFIX}')",
        f"env names starting with {RESERVED_ENV_PREFIX} are reserved for the operator", field_path=".name")))

    name: str = Field(min_length=1, max_length=128, pattern=ENV_NAME)
    """Variable name; names starting with CRONOQ_ are set by the operator and reserved."""
    value: str = Field("", max_length=32768)
    """Variable value (at most 32768 characters)."""

    @model_validator(mode="after")
    def _not_reserved(self) -> EnvVar:
        if self.name.startswith(RESERVED_ENV_PREFIX):
            raise ValueError(f"env name {self.name}: names starting with {RESERVED_ENV_PREFIX} are reserved for the operator")
        return self


class TolerationOperator(StrEnum):
    EXISTS = "Exists"
    EQUAL = "Equal"


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Toleration(Model):
    """A toleration of the task pod, as in a Pod spec."""

    key: str | None = Field(None, max_length=317)
    """Taint key the toleration matches; empty with operator Exists matches every taint."""
    operator: TolerationOperator | None = None
    """`Exists` or `Equal` (the Kubernetes default when unset)."""
    value: str | None = Field(None, max_length=63)
    """Taint value to match when operator is Equal."""
    effect: TaintEffect | None = None
    """Taint effect to match: NoSchedule, PreferNoSchedule or NoExecute; unset matches all."""
    toleration_seconds: int | None = Field(None, ge=0, le=2**31 - 1)
    """For NoExecute: how long the pod stays bound after the taint appears."""


class Resources(Model):
    """Compute resources of the task container, as in a Pod spec."""

    limits: dict[str, Quantity] = Field(default_factory=dict, max_length=16)
    """Most of each resource the container may use, e.g. `{cpu: 500m, memory: 256Mi}`."""
    requests: dict[str, Quantity] = Field(default_factory=dict, max_length=16)
    """Resources the scheduler reserves for the container."""


class PodMetadata(Model):
    """Labels and annotations put on the task pod (in the test cluster, `kwok.cronoq.io/*`
    annotations choose the simulated outcome)."""

    labels: dict[str, LabelValue] = string_map(items=64, doc="Labels of the pod (at most 64).")
    annotations: dict[str, Annotated[str, Field(max_length=8192)]] = string_map(
        items=64, doc="Annotations of the pod (at most 64).")


class PodSettings(Model):
    """The pod fields cronoq knows by name. Anything else about the pod goes in a Task's
    `template`. When a task is run its own fields win over its pool's `template`."""

    image: str | None = Field(None, min_length=1, max_length=512, pattern=r"^\S+$")
    """Container image of the task, e.g. `ghcr.io/acme/worker:1.4`."""
    command: tuple[Annotated[str, Field(max_length=4096)], ...] | None = Field(None, max_length=64)
    """Entrypoint of the container (replaces the image's ENTRYPOINT)."""
    args: tuple[Annotated[str, Field(max_length=8192)], ...] | None = Field(None, max_length=128)
    """Arguments to the entrypoint (replace the image's CMD)."""
    env: tuple[EnvVar, ...] = Field((), max_length=64, json_schema_extra={
        "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]})
    """Environment variables of the container, besides the CRONOQ_* ones the operator sets."""
    resources: Resources | None = None
    """CPU, memory and other resources of the container."""
    service_account_name: SubdomainName | None = None
    """ServiceAccount the pod runs as."""
    node_selector: dict[str, LabelValue] = string_map(items=32, doc="Node labels the pod must be scheduled on.")
    tolerations: tuple[Toleration, ...] = Field((), max_length=32)
    """Taints the pod tolerates."""
    priority_class_name: SubdomainName | None = None
    """PriorityClass of the pod (scheduling priority between pods, not the task's queue priority)."""
    pod_metadata: PodMetadata | None = None
    """Labels and annotations of the pod."""
