"""Object metadata and status conditions: the parts of every cronoq object that follow
Kubernetes' own conventions, and the group and version the objects are served under."""
from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Final

from pydantic import Field

from cronoq.api.model import Model, Timestamp
from cronoq.pod_protocol import API_VERSION as API_VERSION

GROUP: Final = "cronoq.io"
VERSION: Final = "v1alpha1"
# API_VERSION (`GROUP/VERSION`) is the pod protocol's: the attempt names the Task as its Lease's owner.


# --- conditions ----------------------------------------------------------------------------

class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(Model):
    """One aspect of the object's state, following Kubernetes API conventions (metav1.Condition)."""

    type: str = Field(min_length=1, max_length=316,
                      pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                              r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$")
    """Kind of condition, in CamelCase (e.g. `Ready`)."""
    status: ConditionStatus
    """Whether the condition holds: True, False or Unknown."""
    reason: str = Field(min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    """Machine-readable CamelCase reason for the last transition."""
    message: str = Field("", max_length=32768)
    """Human-readable details about the last transition."""
    last_transition_time: Timestamp
    """When the status last changed (not when reason or message last changed)."""
    observed_generation: int | None = Field(None, ge=0, le=2**53)
    """The metadata.generation the condition was computed from."""


Conditions = Annotated[
    tuple[Condition, ...],
    Field(max_length=16, json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]}),
]


# --- object metadata (Python side only: the API server owns its schema) -----------------------

class ObjectMeta(Model):
    """The parts of Kubernetes object metadata cronoq reads."""

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    finalizers: tuple[str, ...] = ()
