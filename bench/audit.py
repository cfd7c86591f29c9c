"""Requests by the operator, counted from the API server's audit log (CRONOQ_AUDIT=1).

A scenario marks the log's size when its window opens and reads what was appended when it
closes; every event of the operator's user in between is the operator's (its own
ServiceAccount, see cluster.py). A request is counted once: at ResponseComplete, or for a watch
at ResponseStarted (a watch completes only when it ends). The user agent's family is a column:
the operator's own requests read `kubernetes-client` (its one HTTP stack sends the kubernetes
client's User-Agent), and in the kopf A/B (bench/kopf_ab.py) kopf's watches read `kopf`.
"""
from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}


def agent_family(user_agent: str) -> str:
    ua = user_agent.lower()
    if ua.startswith("kopf"):
        return "kopf"
    if "openapi-generator" in ua or "python" in ua:
        return "kubernetes-client"
    return user_agent.split("/")[0] or "unknown"


@dataclass(frozen=True)
class Request:
    verb: str
    resource: str
    subresource: str
    agent: str
    code: int
    name: str

    @property
    def write(self) -> bool:
        return self.verb in WRITE_VERBS

    @property
    def target(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


class AuditLog:
    def __init__(self, path: Path) -> None:
        self.path = path

    def mark(self) -> int:
        self.settle()
        return self.path.stat().st_size

    def settle(self, quiet: float = 1.0, timeout: float = 30.0) -> None:
        """Wait until the log stops growing for `quiet` seconds: the batch backend has flushed."""
        deadline = time.monotonic() + timeout
        size, since = self.path.stat().st_size, time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.2)
            now = self.path.stat().st_size
            if now != size:
                size, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet:
                return

    def events(self, start: int, end: int | None = None) -> Iterator[dict[str, Any]]:
        with open(self.path, "rb") as f:
            f.seek(start)
            remaining = None if end is None else end - start
            for line in f:
                if remaining is not None:
                    remaining -= len(line)
                    if remaining < 0:
                        return
                if line.endswith(b"\n"):
                    yield json.loads(line)

    def requests(self, start: int, user: str, end: int | None = None) -> list[Request]:
        out = []
        for e in self.events(start, end):
            if e.get("user", {}).get("username") != user:
                continue
            verb, stage = e.get("verb", ""), e.get("stage")
            if not ((stage == "ResponseComplete" and verb != "watch") or stage == "Panic"
                    or (stage == "ResponseStarted" and verb == "watch")):
                continue
            ref = e.get("objectRef") or {}
            out.append(Request(verb=verb, resource=ref.get("resource", e.get("requestURI", "")),
                               subresource=ref.get("subresource", ""), agent=agent_family(e.get("userAgent", "")),
                               code=(e.get("responseStatus") or {}).get("code", 0), name=ref.get("name", "")))
        return out


def breakdown(requests: list[Request], tasks: int, *, leader_lease: tuple[str, ...] = ()) -> dict[str, Any]:
    """Counts by verb and resource (writes separately), per task, with the leader-election Lease
    renewals set apart: they cost per second, not per task."""
    def is_election(r: Request) -> bool:
        return r.resource == "leases" and r.name in leader_lease

    per_task = [r for r in requests if not is_election(r)]
    election = [r for r in requests if is_election(r)]
    rows = Counter((r.verb, r.target, r.agent, r.write) for r in per_task)
    codes: dict[tuple, Counter] = {}
    for r in per_task:
        codes.setdefault((r.verb, r.target, r.agent, r.write), Counter())[r.code] += 1
    table = [{"verb": v, "resource": t, "agent": a, "write": w, "count": c,
              "per_task": c / tasks if tasks else None, "codes": dict(codes[(v, t, a, w)])}
             for (v, t, a, w), c in sorted(rows.items(), key=lambda kv: (not kv[0][3], -kv[1]))]
    writes = sum(1 for r in per_task if r.write)
    failed_writes = sum(1 for r in per_task if r.write and r.code >= 400)
    return {"tasks": tasks, "requests": len(per_task), "writes": writes, "failed_writes": failed_writes,
            "requests_per_task": len(per_task) / tasks if tasks else None,
            "writes_per_task": writes / tasks if tasks else None,
            "leader_election_requests": len(election),
            "leader_election_writes": sum(1 for r in election if r.write), "table": table}
