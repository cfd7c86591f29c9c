"""The environment the operator gives an attempt's containers (set in engine/jobs.py): who the
attempt is (the fencing token: task uid and attempt number), its payload, its dependencies'
outputs, and its Lease.

Variables missing altogether (running a handler locally, outside a pod) get harmless defaults
and heartbeats stay off; variables present but unusable are an error, because a pod started by
the operator never has them.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Any, Mapping

from cronoq.pod_protocol import Env, tracecontext
from cronoq.pod_protocol.checkpoint import decode_checkpoint
from cronoq.pod_protocol.inputs import Input, parse_inputs
from cronoq.pod_protocol.jsontext import json_value
from cronoq.worker.report import DEFAULT_PATH


class InvalidEnvironment(ValueError):
    """The CRONOQ_* environment cannot describe an attempt."""


@dataclass(frozen=True)
class AttemptEnv:
    task_id: str = ""
    task_name: str = ""
    namespace: str = ""
    attempt: int = 1
    lease_name: str = ""
    lease_id: str = ""
    lease_ttl: float = 0.0
    """Seconds; 0 turns heartbeats off."""
    payload: Any = None
    termination_log: str = DEFAULT_PATH
    kubeconfig: str | None = None
    """KUBECONFIG, when set: then it is used even inside a pod (tests run workers as local processes)."""
    inputs: Mapping[str, Input] = field(default_factory=dict)
    """CRONOQ_INPUTS: what the task's dependencies produced (empty without dependencies)."""
    checkpoint: Any = None
    """CRONOQ_CHECKPOINT parsed: the newest checkpoint of an earlier attempt (None when none)."""
    checkpoint_file: str | None = None
    """CRONOQ_CHECKPOINT_FILE: where a task without the SDK leaves its checkpoint for the sidecar."""
    traceparent: str | None = None
    """TRACEPARENT, when valid: the attempt span's context (the operator's tracing is on)."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> AttemptEnv:
        attempt_text = environ.get(Env.ATTEMPT, "1")
        try:
            attempt = int(attempt_text)
        except ValueError:
            raise InvalidEnvironment(f"{Env.ATTEMPT} is not a whole number: {attempt_text!r}") from None
        if attempt < 1:
            raise InvalidEnvironment(f"{Env.ATTEMPT} must be at least 1, not {attempt}")

        payload_text = environ.get(Env.PAYLOAD, "")
        try:
            payload = json_value(payload_text) if payload_text.strip() else None
        except ValueError as err:
            raise InvalidEnvironment(f"{Env.PAYLOAD} is not JSON: {err}") from None

        inputs_text = environ.get(Env.INPUTS, "")
        try:
            inputs = parse_inputs(inputs_text) if inputs_text.strip() else {}
        except ValueError as err:
            raise InvalidEnvironment(f"{Env.INPUTS} does not hold inputs: {err}") from None

        lease_name = environ.get(Env.LEASE_NAME, "")
        ttl_text = environ.get(Env.LEASE_TTL)
        if ttl_text is None:
            if lease_name:
                print(f"cronoq: {Env.LEASE_NAME} is set but {Env.LEASE_TTL} is not: not heartbeating",
                      file=sys.stderr)
            ttl = 0.0
        else:
            try:
                ttl = float(ttl_text)
            except ValueError:
                raise InvalidEnvironment(f"{Env.LEASE_TTL} is not a number of seconds: {ttl_text!r}") from None
            if not math.isfinite(ttl) or ttl < 0:
                raise InvalidEnvironment(f"{Env.LEASE_TTL} must be a finite number of seconds >= 0, not {ttl_text!r}")

        env = cls(task_id=environ.get(Env.TASK_ID, ""), task_name=environ.get(Env.TASK_NAME, ""),
                  namespace=environ.get(Env.NAMESPACE, ""), attempt=attempt, lease_name=lease_name,
                  lease_id=environ.get(Env.LEASE_ID, ""), lease_ttl=ttl, payload=payload,
                  termination_log=environ.get(Env.TERMINATION_LOG) or DEFAULT_PATH,
                  kubeconfig=environ.get("KUBECONFIG") or None, inputs=inputs,
                  checkpoint=decode_checkpoint(environ.get(Env.CHECKPOINT)),
                  checkpoint_file=environ.get(Env.CHECKPOINT_FILE) or None,
                  traceparent=parent.traceparent if (parent := tracecontext.parse(environ.get(tracecontext.ENV)))
                  else None)
        if ttl > 0:
            missing = [var for var, value in ((Env.LEASE_NAME, env.lease_name), (Env.LEASE_ID, env.lease_id),
                                              (Env.NAMESPACE, env.namespace)) if not value]
            if missing:
                raise InvalidEnvironment(f"heartbeats are on ({Env.LEASE_TTL}={ttl_text}) but {', '.join(missing)} "
                                         f"{'is' if len(missing) == 1 else 'are'} not set")
        return env
