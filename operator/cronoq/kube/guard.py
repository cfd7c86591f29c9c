"""Whether the lease guard is in force: the chart's ValidatingAdmissionPolicy that lets only a
writer allowed to `serve` a pool write its workers' Leases (charts/cronoq/templates/
lease-guard-policy.yaml). Without it a worker Lease says nothing anyone checked, so the operator
hands Workers pools nothing until it sees the policy and its binding (DESIGN §17: fail closed)."""
from __future__ import annotations

import asyncio

import aiohttp

from cronoq.apiserver.aio import ApiSession, timeout
from cronoq.apiserver.errors import ApiError, Forbidden, NotFound

POLICIES = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
BINDINGS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
LIMITS = timeout(connect=5, total=10)


async def lease_guard_in_force(http: ApiSession, name: str) -> bool | None:
    """True when the policy `name` and its binding of the same name (with the Deny action) exist;
    False when either is missing, or the operator may not read them; None when the API server did
    not answer (the caller keeps what it knew)."""
    try:
        await http.request("GET", f"{POLICIES}/{name}", LIMITS)
        binding = await http.request("GET", f"{BINDINGS}/{name}", LIMITS)
    except (Forbidden, NotFound):
        return False
    except ApiError:
        return None
    except (aiohttp.ClientError, asyncio.TimeoutError):
        return None
    spec = binding.get("spec") or {}
    return spec.get("policyName") == name and "Deny" in (spec.get("validationActions") or ())
