"""Exactly-once effects on real pods (issue 50, items 3 and 4) for the two deliveries the pull
run (tests/integration/faults/test_exactly_once.py) cannot drive on kwok: Job mode and push.

Job mode: each attempt is a pod on the real node running tests/support/effects.py's `job()` in
the image tests/realnode/effects.Dockerfile builds (`make image`): the SDK heartbeats, and the
handler makes one fenced effect in a real Postgres (tests/support/postgres.py) with the token of
its environment (CRONOQ_TASK_ID, CRONOQ_ATTEMPT), plus an unfenced plain INSERT. Postgres listens
on 127.0.0.1 only; pods reach it through a relay on the node's bridge address (`Relay`), the one
address of this machine they can reach (nothing is routed off the machine). While they run, the
test deletes attempt pods mid-handler (`kubectl delete pod`: before their effect, and after it,
so the retry is a duplicate), some first attempts pause their heartbeat (their Lease expires
under a still-running handler that ignores the SIGTERM and writes late, after the retry has
written) and some fail after their effect (retried).

Push: a receiver on this machine (aiohttp, at the bridge address, like the push test in
test_real_pods.py) makes the fenced effect with the token from the request's headers; for some
first requests it answers only after the push timeout (the attempt is retried while the first
request's handler goes on and writes late, after the retry's), for some it fails (500) after the
effect.

The same checker as the pull run then reads each delivery's database: every Succeeded task has
exactly one effect, no effect overwritten by a lower attempt, every refused write stale, at
least one stale write refused (else the run proved nothing), and the unfenced INSERT charged some
task twice. The table (one row per delivery) is printed at the end of the session (conftest.py).
"""
from __future__ import annotations

import asyncio
import os
import random
import socket
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from aiohttp import web

from tests.realnode.conftest import placement
from tests.support import effects
from tests.support.tasks import TERMINAL
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

EFFECTS_IMAGE = "localhost/cronoq/effects:dev"
JOB_TASKS = int(os.environ.get("CRONOQ_REAL_EFFECT_TASKS", "18"))
PUSH_TASKS = int(os.environ.get("CRONOQ_REAL_PUSH_TASKS", "9"))
PUSH_TIMEOUT = 3.0
"""Seconds a push request may take: a late answer's attempt ends Timeout and is retried."""
DEAF_TTL = "10s"
"""The leaseTTL of the tasks whose first attempt pauses its heartbeat (their later attempts, quick, may
still run out of it on a loaded machine and be retried); the others renew a 60 s one: a pod's Python
starts slowly on two busy cores."""
GRACE = 90
"""terminationGracePeriodSeconds of those tasks: the deaf handler outlives its deleted Job this long."""
CAP = 60.0
"""Seconds a late handler waits at most for the retry to write before it writes itself."""
JOB_SLOTS, PUSH_SLOTS = 5, 3
"""Pods at once: each is a Python starting on two cores shared with the rest of the tests."""
RETRY = {"maxAttempts": 8, "initialBackoff": "500ms", "maxBackoff": "2s", "jitter": "none"}
LABEL = "cronoq.io/test-effects"


class Relay:
    """TCP from `host` (the bridge address pods reach) to a port of 127.0.0.1: Postgres itself
    listens on loopback only."""

    def __init__(self, host: str, port: int) -> None:
        self.server = socket.create_server((host, 0))
        self.address = (host, self.server.getsockname()[1])
        self.target = ("127.0.0.1", port)
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                conn.close()
                continue
            self.connections += 1
            for src, dst in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        try:
            self.server.shutdown(socket.SHUT_RDWR)  # wakes the accept
        except OSError:
            pass
        self.server.close()


class Receiver:
    """The push endpoint: POST /effects makes the task's effect, the token from the request's
    headers, on threads of its own (a late handler keeps one while it waits), whatever happens to
    the request; its mode on a first attempt is the payload's `mode`: `late` waits until the
    retry has written, then writes and answers (long after the push timeout), `fail-after`
    answers 500 after its effect."""

    def __init__(self, host: str, dsn: str) -> None:
        self.dsn = dsn
        self.host = host
        self.pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="receiver")
        self.loop = asyncio.new_event_loop()
        self.faults: Counter[str] = Counter()
        self.requests = 0
        self.inflight = 0
        self._lock = threading.Lock()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.url = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(30)

    async def _start(self) -> str:
        app = web.Application()
        app.router.add_post("/effects", self.receive)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        sock = socket.create_server((self.host, 0))
        await web.SockSite(self.runner, sock).start()
        return f"http://{self.host}:{sock.getsockname()[1]}/effects"

    async def receive(self, request: web.Request) -> web.Response:
        started = time.monotonic()
        body = await request.json()
        headers = dict(request.headers)
        first = headers.get("X-Cronoq-Attempt") == "1"
        mode = body.get("mode", "plain") if first else "plain"
        with self._lock:
            self.requests += 1
            self.inflight += 1

        def work() -> dict[str, Any]:
            try:
                if mode == "late":
                    effects.wait_for_newer(self.dsn, headers, CAP)
                return effects.effect(self.dsn, headers, "push")
            finally:
                with self._lock:
                    self.inflight -= 1

        done = await self.loop.run_in_executor(self.pool, work)
        if time.monotonic() - started > PUSH_TIMEOUT:
            self.faults["answered late"] += 1
        if mode == "fail-after":
            self.faults["failed after effect"] += 1
            return web.json_response({"failed": "after its effect"}, status=500)
        return web.json_response(done)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.pool.shutdown(wait=False, cancel_futures=True)


def job_tasks(count: int, dsn: str, rng: random.Random) -> tuple[dict[str, dict], dict[str, str]]:
    """Job-mode tasks by name, and the pods to delete: name -> 'before' or 'after' its effect."""
    env = [{"name": "EFFECTS_DSN", "value": dsn}]
    specs, victims = {}, {}
    for i in range(count):
        name = f"fx-job-{i:02d}"
        spec: dict[str, Any] = {"pool": "fx-job", "image": EFFECTS_IMAGE, "env": env, "leaseTTL": "60s"}
        kind = i % 6
        if kind == 0:
            spec.update(leaseTTL=DEAF_TTL, payload={"mode": "deaf", "cap": CAP, "sleep": 0.3},
                        template={"spec": {"terminationGracePeriodSeconds": GRACE,
                                           "containers": [{"name": "task", "image": EFFECTS_IMAGE}]}})
        elif kind == 1:
            spec["payload"] = {"mode": "fail-after", "before": round(rng.uniform(0.2, 1.5), 2), "sleep": 0.3}
        elif kind in (2, 3):
            # Deleted mid-handler: while it sleeps before its effect, or after it.
            spec["payload"] = {"mode": "plain", "before": 8, "after": 25, "sleep": 0.3}
            victims[name] = "before" if kind == 2 else "after"
        else:
            spec["payload"] = {"mode": "plain", "before": round(rng.uniform(0.2, 2), 2),
                               "after": round(rng.uniform(0.2, 1), 2), "sleep": 0.3}
        specs[name] = spec
    return specs, victims


def push_tasks(count: int) -> dict[str, dict]:
    modes = ("late", "fail-after", "plain", "late", "plain", "plain")
    return {f"fx-push-{i:02d}": {"pool": "fx-push", "payload": {"mode": modes[i % len(modes)], "n": i}}
            for i in range(count)}


def listed(rq, prefix: str) -> dict[str, dict]:
    items = rq.custom.list_namespaced_custom_object("cronoq.io", "v1alpha1", rq.namespace, "tasks",
                                                    label_selector=LABEL)["items"]
    return {t["metadata"]["name"]: t for t in items if t["metadata"]["name"].startswith(prefix)}


def written(dsn: str) -> set[tuple[str, int]]:
    """(task uid, attempt) of every effect attempted so far (the unfenced INSERT comes first)."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        return {(t, a) for t, a in conn.execute("SELECT task, attempt FROM unfenced_charges")}


def running_pods(rq) -> dict[str, Any]:
    """The effect pods whose task container runs now, by Job name."""
    pods = rq.core.list_namespaced_pod(rq.namespace, label_selector="cronoq.io/pool=fx-job").items
    out = {}
    for pod in pods:
        statuses = pod.status.container_statuses or []
        if not pod.metadata.deletion_timestamp and any(s.name == "task" and s.state.running for s in statuses):
            out[pod.metadata.labels.get("job-name")] = pod
    return out


def delete_pods(rq, kubectl, dsn: str, victims: dict[str, str], deadline: float) -> int:
    """Delete each victim's first attempt's pod mid-handler: before its effect or after it."""
    pending, deleted = dict(victims), 0
    while pending and time.monotonic() < deadline:
        tasks, done, pods = listed(rq, "fx-job-"), written(dsn), running_pods(rq)
        for name, when in list(pending.items()):
            status = tasks[name].get("status") or {}
            if status.get("attempt", 0) > 1 or status.get("phase") in TERMINAL:
                del pending[name]  # missed: it got past its first attempt without us
                continue
            if status.get("attempt") != 1 or not status.get("attempts"):
                continue
            job, uid = status["attempts"][0].get("job"), tasks[name]["metadata"]["uid"]
            wrote = (uid, 1) in done
            if job in pods and wrote == (when == "after"):
                # One second of grace: the SDK stops the handler on SIGTERM; one that ignores it is killed then.
                kubectl("delete", "pod", pods[job].metadata.name, "--grace-period=1", "--wait=false",
                        namespace=rq.namespace)
                deleted += 1
                del pending[name]
        time.sleep(1)
    return deleted


def quiet(rq, receiver: Receiver) -> bool:
    """No effect pod still runs (a deaf handler in its grace period) and no request is handled."""
    pods = rq.core.list_namespaced_pod(rq.namespace, label_selector="cronoq.io/pool in (fx-job,fx-push)").items
    return receiver.inflight == 0 and all(p.status.phase in ("Succeeded", "Failed") for p in pods)


def row(delivery: str, found: effects.Findings, faults: Counter[str], seconds: float) -> dict[str, Any]:
    kinds = ("pods deleted", "leases expired", "failed after effect", "answered late")
    return {"delivery": delivery, "tasks": found.tasks, "succeeded": found.succeeded, "attempts": found.attempts,
            **{k: faults[k] if k in faults else "-" for k in kinds},
            "effects": found.effects, "stale refused": found.stale_refused, "duplicates absorbed": found.duplicates,
            "violations": len(found.violations), "unfenced effects": found.unfenced_effects,
            "unfenced duplicated tasks": found.unfenced_duplicates, "seconds": round(seconds)}


@pytest.fixture(scope="module")
def effect_run(rq, real_node, postgres, kubectl):
    """Both deliveries at once, with their faults; the checker's findings and the table's rows."""
    started = time.monotonic()
    rng = random.Random(int(os.environ.get("CRONOQ_EFFECT_SEED", "50")))
    job_db, push_db = postgres.database("realjob"), postgres.database("realpush")
    effects.create(job_db)
    effects.create(push_db)
    relay = Relay(real_node.NODE_IP, postgres.port)
    receiver = Receiver(real_node.NODE_IP, push_db)
    # What a pod sees: the relay's address, the same database.
    pod_dsn = job_db.replace("host=127.0.0.1", f"host={relay.address[0]}").replace(
        f"port={postgres.port}", f"port={relay.address[1]}")
    node = placement(real_node)
    rq.pool("fx-job", concurrency=JOB_SLOTS, retry=RETRY, template=node)
    rq.pool("fx-push", concurrency=PUSH_SLOTS, retry=RETRY, leaseTTL="60s",
            template={**node, "http": {"url": receiver.url, "timeout": f"{PUSH_TIMEOUT:g}s"}})
    jobs, victims = job_tasks(JOB_TASKS, pod_dsn, rng)
    try:
        for name, spec in {**jobs, **push_tasks(PUSH_TASKS)}.items():
            rq.custom.create_namespaced_custom_object("cronoq.io", "v1alpha1", rq.namespace, "tasks", {
                "apiVersion": "cronoq.io/v1alpha1", "kind": "Task",
                "metadata": {"name": name, "labels": {LABEL: "true"}}, "spec": spec})
        job_faults: Counter[str] = Counter()
        job_faults["pods deleted"] = delete_pods(rq, kubectl, job_db, victims, time.monotonic() + 150)
        wait_until(lambda: all((t.get("status") or {}).get("phase") in TERMINAL for t in listed(rq, "fx-").values()),
                   timeout=240, interval=1, what="every effect task ended")
        wait_until(lambda: quiet(rq, receiver), timeout=GRACE + 30, interval=1,
                   what="the late handlers to end (pods stopped, no request in hand)")
        seconds = time.monotonic() - started
        tasks = listed(rq, "fx-")
        results = {}
        for delivery, prefix, dsn, faults in (("job", "fx-job-", job_db, job_faults),
                                              ("push", "fx-push-", push_db, receiver.faults)):
            statuses = {t["metadata"]["uid"]: t.get("status") or {} for n, t in tasks.items() if n.startswith(prefix)}
            attempts = [a for s in statuses.values() for a in s.get("attempts") or []]
            if delivery == "job":
                faults["leases expired"] = sum(a.get("reason") == "LeaseExpired" for a in attempts)
                faults["failed after effect"] = sum("failed after its effect" in (a.get("message") or "")
                                                    for a in attempts)
            found = effects.check(dsn, statuses)
            results[delivery] = (found, row(delivery, found, faults, seconds), statuses)
            effects.DELIVERY_ROWS.append(results[delivery][1])
            print(f"\nexactly-once ({delivery}):", results[delivery][1],
                  {r: n for r, n in Counter(a.get("reason") for a in attempts).items()})
        yield results
    finally:
        receiver.stop()
        relay.close()
        rq.custom.delete_collection_namespaced_custom_object("cronoq.io", "v1alpha1", rq.namespace, "tasks",
                                                             label_selector=LABEL)


@pytest.mark.parametrize("delivery", ["job", "push"])
def test_every_effect_happens_once_on_real_pods_through_faults(effect_run, delivery):
    found, line, statuses = effect_run[delivery]
    injected = ("pods deleted", "leases expired", "failed after effect") if delivery == "job" else \
        ("answered late", "failed after effect")
    assert all(line[kind] >= 1 for kind in injected), f"a fault was not injected ({line})"
    assert found.violations == [], line
    assert found.succeeded == found.tasks, {u: (s.get("phase"), s.get("message")) for u, s in statuses.items()
                                            if s.get("phase") != "Succeeded"}
    assert found.stale_refused >= 1, f"no stale write was refused: the faults did not race, the run proved nothing ({line})"
    assert found.unfenced_duplicates >= 1, f"the plain INSERT made no duplicate in the same run ({line})"
