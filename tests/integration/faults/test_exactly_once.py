"""Faults: exactly-once effects, end to end (issue 50). Pull workers (tests/support/effects.py) run
tasks whose handlers each make one fenced effect in a real Postgres (tests/support/postgres.py)
and, beside it, one unfenced plain INSERT, while the run injects, several times each: a worker
SIGKILLed mid-handler (replaced by a new one); a worker cut off from the API server through
toxiproxy for longer than the pool's leaseTTL, while its deaf handler goes on and writes late;
the leading operator replica SIGKILLed (the standby takes over, a new standby is started).

The checker then reads the database: every Succeeded task has exactly one effect, no accepted
write overwrote a later attempt's, every refused write was a stale attempt's (a later one had
written before it), and at least one stale write was refused (else the faults did not race and
the run proved nothing). The plain INSERT in the same run must show duplicates: the helper makes
the difference, not luck. A table is printed at the end of the session.

`make test` runs it once with 160 tasks; `make exactly-once` three times with 400
(CRONOQ_EFFECT_TASKS, CRONOQ_EFFECT_ROUNDS, CRONOQ_FAULT_RUNS).
"""
from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from tests.support.effects import ROWS, check, create
from tests.support.operator import OperatorProcess
from tests.support.tasks import TERMINAL, Cronoq
from tests.support.toxiproxy import Toxiproxy, server_of, through
from tests.support.waiting import wait_until

GROUP, VERSION = "cronoq.io", "v1alpha1"
ROOT = Path(__file__).resolve().parents[3]
TASKS = int(os.environ.get("CRONOQ_EFFECT_TASKS", "160"))
ROUNDS = int(os.environ.get("CRONOQ_EFFECT_ROUNDS", "3"))
"""Fault rounds at least (each: a cut, a worker killed, a failover on odd rounds); more while tasks are submitted."""
WORKERS, ROOM = 4, 4
LEASE_TTL = 3.0
"""The pool's attempt lease: a worker cut off longer than this loses its attempts to a retry."""
WORKER_TTL = 30.0
"""The workers' own Lease: longer than a cut, so a cut-off worker does not fence itself and its
handlers go on (the case a fence at the sink exists for)."""
SLOW = 10.0
"""Seconds the first attempt of a slow task runs: it outlives a cut plus the retry that replaces it."""
CUT = 2 * LEASE_TTL + 2


class Fleet:
    """Worker processes, each behind its own toxiproxy proxy so one can be cut off alone."""

    def __init__(self, namespace: str, kubeconfig: str, dsn: str, toxi: Toxiproxy, tmp: Path) -> None:
        self.namespace, self.kubeconfig, self.dsn, self.toxi, self.tmp = namespace, kubeconfig, dsn, toxi, tmp
        self.procs: dict[str, subprocess.Popen] = {}
        self.proxies: dict = {}
        self.made = 0

    def start(self) -> str:
        self.made += 1
        name = f"w{self.made}"
        proxy = self.toxi.proxy(f"{self.namespace}-{name}", upstream=server_of(self.kubeconfig))
        config = through(self.kubeconfig, proxy, self.tmp / f"{name}.kubeconfig")
        env = {**os.environ, "KUBECONFIG": config, "CRONOQ_NAMESPACE": self.namespace,
               "PYTHONPATH": f"{ROOT}:{ROOT / 'operator'}"}
        log = open(self.tmp / f"{name}.log", "ab")
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "tests.support.effects", "effects", name, self.dsn, str(ROOM), str(WORKER_TTL)],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.proxies[name] = proxy
        return name

    def alive(self) -> list[str]:
        return [name for name, proc in self.procs.items() if proc.poll() is None]

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)

    def stop(self) -> None:
        for name in list(self.procs):
            self.kill(name)


def make_tasks(cq: Cronoq, first: int, count: int, rng: random.Random) -> list[str]:
    names = []
    for i in range(first, first + count):
        name = f"e{i:04d}"
        slow = rng.random() < 0.3
        payload = {"first": SLOW if slow else round(rng.uniform(0.3, 2.0), 2), "sleep": 0.3}
        cq.custom.create_namespaced_custom_object(GROUP, VERSION, cq.namespace, "tasks", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Task", "metadata": {"name": name},
            "spec": {"pool": "effects", "payload": payload}})
        names.append(name)
    return names


def tasks(cq: Cronoq) -> list[dict]:
    return cq.custom.list_namespaced_custom_object(GROUP, VERSION, cq.namespace, "tasks")["items"]


def busy_worker(cq: Cronoq, fleet: Fleet, slow_first: bool) -> str | None:
    """A live worker running an attempt now (a slow first attempt, when asked)."""
    alive = set(fleet.alive())
    for task in tasks(cq):
        status, spec = task.get("status") or {}, task["spec"]
        if status.get("phase") != "Running" or status.get("worker") not in alive:
            continue
        if not slow_first or (status.get("attempt") == 1 and (spec.get("payload") or {}).get("first") == SLOW):
            return status["worker"]
    return None


def test_every_effect_happens_once_through_faults(api, own_namespace, crds, kubeconfig, postgres, tmp_path,
                                                  fault_run):
    started = time.monotonic()
    rng = random.Random(int(os.environ.get("CRONOQ_EFFECT_SEED", str(fault_run * 7919))))
    dsn = postgres.database("effects")
    create(dsn)
    lease = (own_namespace, "cronoq-leader")
    replicas = [OperatorProcess(kubeconfig, (own_namespace,), tmp_path / f"op{i}.log", lease=lease,
                                pod_name=f"replica-{i}") for i in (1, 2)]
    replicas[0].start()
    replicas[0].wait_leading()
    replicas[1].start()
    cq = Cronoq(api, own_namespace, replicas[0])
    cq.pool("effects", delivery="Workers", concurrency=WORKERS * ROOM, leaseTTL=f"{LEASE_TTL:g}s",
            retry={"maxAttempts": 30, "initialBackoff": "200ms", "maxBackoff": "2s", "jitter": "none"})
    faults: Counter[str] = Counter()
    with Toxiproxy.start(tmp_path / "toxiproxy.log") as toxi:
        fleet = Fleet(own_namespace, kubeconfig, dsn, toxi, tmp_path)
        try:
            for _ in range(WORKERS):
                fleet.start()
            names: list[str] = []
            done = threading.Event()

            def submit() -> None:
                # In waves, so that faults meet tasks at every stage.
                wave = TASKS // 4
                for first in range(0, TASKS, wave):
                    names.extend(make_tasks(cq, first, min(wave, TASKS - first), random.Random(rng.random())))
                    time.sleep(8)
                done.set()

            def pending() -> bool:
                return not done.is_set() or any((t.get("status") or {}).get("phase") not in TERMINAL
                                                for t in tasks(cq))

            submitter = threading.Thread(target=submit, daemon=True)
            submitter.start()
            rounds = 0
            while pending() and (rounds < ROUNDS or not done.is_set()):
                rounds += 1
                # A worker cut off from the API server while a slow first attempt runs on it.
                deadline, victim = time.monotonic() + 20, None
                while victim is None and time.monotonic() < deadline:
                    victim = busy_worker(cq, fleet, slow_first=True)
                    time.sleep(0.2)
                if victim is not None:
                    fleet.proxies[victim].cut(CUT)
                    faults["worker cut off"] += 1
                # A worker SIGKILLed mid-handler, replaced.
                victim = busy_worker(cq, fleet, slow_first=False)
                if victim is not None:
                    fleet.kill(victim)
                    fleet.start()
                    faults["worker SIGKILLed"] += 1
                # The leader SIGKILLed; the standby takes over and a new standby starts.
                if rounds % 2 == 1:
                    leader = next(r for r in replicas if r.process and r.process.poll() is None and r.leading())
                    leader.kill()
                    faults["leader SIGKILLed"] += 1
                    replicas.remove(leader)
                    successor = replicas[0]
                    successor.wait_leading(timeout=90)
                    standby = OperatorProcess(kubeconfig, (own_namespace,), tmp_path / f"op{len(replicas) + 9}.log",
                                              lease=lease, pod_name=f"replica-{rounds + 2}")
                    replicas.append(standby.start())
                    cq.operator = successor
            submitter.join()
            wait_until(lambda: all((t.get("status") or {}).get("phase") in TERMINAL for t in tasks(cq)) and
                       len(tasks(cq)) == len(names), timeout=300, what="every task ended")
            # Handlers of attempts given up may still be sleeping: wait until nothing more is written.
            last = [-1, time.monotonic()]

            def quiet() -> bool:
                import psycopg

                with psycopg.connect(dsn) as conn:
                    count = conn.execute("SELECT count(*) FROM unfenced_charges").fetchone()[0]
                if count != last[0]:
                    last[:] = [count, time.monotonic()]
                return time.monotonic() - last[1] > SLOW + 2

            wait_until(quiet, timeout=120, interval=1, what="the handlers to stop writing")
        finally:
            fleet.stop()
            for replica in replicas:
                replica.stop()
    statuses = {t["metadata"]["uid"]: t.get("status") or {} for t in tasks(cq)}
    found = check(dsn, statuses)
    row = {"run": fault_run, "tasks": found.tasks, "succeeded": found.succeeded, "attempts": found.attempts,
           **{k: faults[k] for k in ("worker SIGKILLed", "worker cut off", "leader SIGKILLed")},
           "effects": found.effects, "stale refused": found.stale_refused, "duplicates absorbed": found.duplicates,
           "violations": len(found.violations), "unfenced effects": found.unfenced_effects,
           "unfenced duplicated tasks": found.unfenced_duplicates, "seconds": round(time.monotonic() - started)}
    ROWS.append(row)
    print("\nexactly-once:", row)
    assert found.violations == []
    assert found.succeeded == found.tasks, {u: s.get("phase") for u, s in statuses.items() if s.get("phase") != "Succeeded"}
    assert found.stale_refused >= 1, ("no stale write was refused: the faults did not race, and the run proved "
                                      f"nothing ({row})")
    assert found.unfenced_duplicates >= 1, f"the plain INSERT made no duplicate in the same run ({row})"

