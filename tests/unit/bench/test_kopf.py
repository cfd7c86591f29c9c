"""The kopf A/B (bench/kopf_ab.py, bench/kopf_watch.py): its table, and that kopf is given the
operator's own watches, as lean as kopf lets itself be set up."""
from __future__ import annotations

import asyncio

from bench import kopf_ab


def _burst(side: str, ms: float, writes: float = 4.0) -> dict:
    return {"side": side, "throughput": 30.0, "api": {"writes_per_task": writes},
            "operator": {"cpu_seconds_per_task": ms / 1000, "rss_peak": 100 * 2**20}}


def _idle(side: str, mib: float) -> dict:
    return {"side": side, "rss_idle": mib * 2**20, "rss_peak_startup": mib * 2**20, "listed_seconds": 3.0,
            "cpu_seconds_to_settle": 10.0}


def test_the_table_shows_each_sides_median_and_kopfs_ratio():
    results = {"options": {"tasks": 1000, "finished": 10_000, "rounds": 3}, "kopf": "1.45.2",
               "bursts": [_burst("watch.py", ms) for ms in (4.0, 5.0, 9.0)] + [_burst("kopf", ms) for ms in (10.0, 11.0, 12.0)],
               "idle": [_idle("watch.py", 100), _idle("kopf", 250)]}
    table = kopf_ab.table(results)
    assert "| operator CPU per task, burst of N (ms) | 5.00 | 11.00 | 2.20× |" in table
    assert "| RSS at rest over the finished Tasks (MiB) | 100 | 250 | 2.50× |" in table
    assert "| operator writes per task | 4.00 | 4.00 | 1.00× |" in table


def test_the_sides_alternate_which_goes_first():
    assert kopf_ab.order(0) == ["watch.py", "kopf"] and kopf_ab.order(1) == ["kopf", "watch.py"]


def test_kopf_is_fed_the_operators_own_watches_with_their_selectors_on_the_server():
    from bench import kopf_watch  # kopf is in the test extra: missing, this fails rather than skips
    from cronoq.kube.watch import Watch, sources

    fed: list[tuple[str, str | None]] = []

    async def build():
        watches = [Watch(kind, api_version, None, path, lambda t, o, kind=kind: fed.append((kind, t)),
                         label_selector=selector)
                   for kind, (api_version, path, selector) in sources("ns").items()]
        return kopf_watch.Hub(None, watches)

    hub = asyncio.run(build())
    selectors = {(s.group, s.plural or s.any_name): v for s, v in hub.settings.watching.label_selectors.items()}
    assert selectors == {("batch", "jobs"): "cronoq.io/task-uid", ("", "pods"): "cronoq.io/task-uid"}
    assert isinstance(hub.settings.persistence.progress_storage, kopf_watch.NoProgress)
    assert hub.settings.persistence.diffbase_storage.build(body={"spec": {}}) == {}
    assert not hub.settings.posting.enabled and hub.settings.scanning.disabled
    assert {w.kind for w in hub.watches} == set(sources("ns"))
    lease = next(w for w in hub.watches if w.kind == "Lease")
    lease.expected = 1
    lease.deliver(None, {"metadata": {"name": "a"}})
    assert fed == [("Lease", None)] and lease.synced.is_set()
