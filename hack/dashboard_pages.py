"""Time the dashboard's pages over HTTP with N tasks in its cache, without a cluster: the cache is
filled by hand with Tasks of a 200-byte payload (80 % Queued, 10 % Running, 10 % Succeeded, four
pools), as `tests/unit/cli/test_dashboard_server.py` fills it, and each page is fetched three times
through aiohttp's test client; the best time is printed, and the RSS the filled cache added.

    PYTHONPATH=. .venv/bin/python hack/dashboard_pages.py 100000
"""
from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
from datetime import timedelta

from aiohttp.test_utils import TestClient, TestServer

from cronoq.api import Task, TaskPool
from cronoq.apiserver.config import Connection
from cronoq.apiserver.sync import Api
from cronoq.cli.dashboard.cache import Cache
from cronoq.cli.dashboard.server import STATE, make_app
from cronoq.client import Client
from tests.unit.builders import T0, make_task

PORT = 18765
HOST = {"Host": f"127.0.0.1:{PORT}"}
PHASES = ["Queued"] * 8 + ["Running", "Succeeded"]


def filled(n: int) -> Cache:
    cache = Cache(Client("ns", api=Api(Connection(host="http://127.0.0.1:9"))), all_namespaces=False)
    raw = make_task("x").spec(payload={"blob": "y" * 200}).raw()
    for i in range(n):
        obj = json.loads(json.dumps(raw))
        meta = obj["metadata"]
        meta["name"], meta["creationTimestamp"] = f"task-{i:06d}", (T0 + timedelta(seconds=i)).isoformat()
        obj["spec"]["pool"] = f"pool-{i % 4}"
        obj["status"] = {"phase": PHASES[i % 10], "submittedAt": meta["creationTimestamp"], "summary": "waiting"}
        cache._objects["tasks"][("ns", meta["name"])] = Task.model_validate(obj)
    for p in range(4):
        cache._objects["taskpools"][("ns", f"pool-{p}")] = TaskPool.model_validate(
            {"metadata": {"name": f"pool-{p}", "namespace": "ns"}, "spec": {"concurrency": 10}})
    for synced in cache.synced.values():
        synced.set()
    return cache


async def timed(cache: Cache, n: int) -> None:
    app = make_app(cache.client, False, PORT, cache=cache)
    async with TestClient(TestServer(app, host="127.0.0.1")) as http:
        await http.get(f"/?token={app[STATE].access}", headers=HOST)
        for path in ["/", "/tasks", "/tasks?page=1000", "/tasks?phase=Running", "/tasks?text=task-00099",
                     f"/tasks/ns/task-{n // 2:06d}", "/schedules"]:
            best = float("inf")
            for _ in range(3):
                started = time.perf_counter()
                answer = await http.get(path, headers=HOST)
                await answer.text()
                best = min(best, time.perf_counter() - started)
                assert answer.status == 200, (path, answer.status)
            print(f"{path:32s} {best * 1000:6.0f} ms")


def main() -> None:
    n = int(sys.argv[1])
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cache = filled(n)
    print(f"cache of {n} tasks: RSS +{(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024:.0f} MiB")
    asyncio.run(timed(cache, n))


if __name__ == "__main__":
    main()
