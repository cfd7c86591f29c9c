"""The dashboard's cache lists in pages (issue 56, item 4), against a fake of the client's requests
(cronoq.apiserver's `Api.request`): each page goes into the cache as it arrives, what the listing lacks
is dropped at its end, and the watch goes on from the first page's resourceVersion."""
from __future__ import annotations

from typing import Any


from cronoq.cli.dashboard import cache as caching
from cronoq.cli.dashboard.cache import Cache
from cronoq.client import Client
from tests.unit.builders import make_task


class PagedTasks:
    """Tasks listed two at a time; pools and schedules: none."""

    def __init__(self, names: list[str]) -> None:
        self.names = sorted(names)
        self.calls: list[dict[str, Any]] = []

    def request(self, method: str, path: str, params: dict[str, Any], **_: Any) -> dict[str, Any]:
        assert method == "GET" and path.startswith("/apis/cronoq.io/v1alpha1/namespaces/ns/"), path
        kwargs = {k: v for k, v in params.items() if v is not None}
        self.calls.append(kwargs)
        names = self.names if path.endswith("/tasks") else []
        start = int(kwargs.get("continue") or 0)
        end = start + kwargs["limit"]
        meta: dict[str, Any] = {"resourceVersion": str(40 + len(self.calls))}
        if end < len(names):
            meta["continue"] = str(end)
        return {"items": [make_task(n).raw() for n in names[start:end]], "metadata": meta}


def test_a_listing_goes_into_the_cache_page_by_page_and_drops_what_it_lacks(monkeypatch) -> None:
    monkeypatch.setattr(caching, "LIST_CHUNK", 2)
    api = PagedTasks(["a", "b", "c", "d", "e"])
    told: list[tuple[str, set]] = []
    cache = Cache(Client("ns", api=api), all_namespaces=False,  # type: ignore[arg-type]
                  on_change=lambda plural, keys: told.append((plural, keys)))
    cache._objects["tasks"][("ns", "gone")] = make_task("gone").obj()
    cache._objects["tasks"][("ns", "a")] = make_task("a").obj()  # unchanged: not reported

    assert cache._relist("tasks") == "41"  # the first page's: the snapshot every page is read from
    assert [c.get("continue") for c in api.calls] == [None, "2", "4"]
    assert all(c["limit"] == 2 for c in api.calls)
    assert sorted(name for _, name in cache._objects["tasks"]) == ["a", "b", "c", "d", "e"]
    assert told == [("tasks", {("ns", n) for n in ("b", "c", "d", "e", "gone")})]
    assert cache.synced["tasks"].is_set()
