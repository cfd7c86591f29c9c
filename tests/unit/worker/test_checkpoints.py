"""The worker side of checkpoints: the wire format (pod_protocol/checkpoint.py), a renewal carrying
the newest checkpoint once (worker/lease.py), `ctx.checkpoint()` and the sidecar's checkpoint file."""
from __future__ import annotations

import json

import pytest
from cronoq.apiserver.errors import error_of

from cronoq.pod_protocol import Annotation, Env, Owner
from cronoq.pod_protocol.checkpoint import (
    CHECKPOINT_LIMIT, CheckpointTooLarge, decode_checkpoint, encode_checkpoint, parse_checkpoint,
)
from cronoq.worker.checkpoints import CheckpointFile, CheckpointSlot
from cronoq.worker.env import AttemptEnv
from cronoq.worker.lease import KubeLease
from cronoq.worker.runner import Context


class FakeLeases:
    """The coordination API as KubeLease calls it: records each write; 404 until created."""

    def __init__(self) -> None:
        self.created: list[dict] = []
        self.patches: list[list[dict]] = []

    def patch_namespaced_lease(self, name, namespace, patch, **_):
        if not self.created:
            raise error_of(404, "Not Found")
        self.patches.append(patch)

    def create_namespaced_lease(self, namespace, body, **_):
        self.created.append(body)


def annotation_ops(patch: list[dict]) -> list[dict]:
    return [op for op in patch if op["path"] == "/metadata/annotations"]


def test_the_format_is_compact_json_within_the_bound_and_never_cut() -> None:
    assert encode_checkpoint({"done": [1, 2], "cursor": "é"}) == '{"done":[1,2],"cursor":"é"}'
    assert parse_checkpoint('{ "done" : 3 }') == '{"done":3}'
    assert decode_checkpoint('{"done":3}') == {"done": 3} and decode_checkpoint(None) is None
    fits = "x" * (CHECKPOINT_LIMIT - 2)
    assert len(encode_checkpoint(fits).encode()) == CHECKPOINT_LIMIT
    with pytest.raises(CheckpointTooLarge, match="at most 4096 bytes"):
        encode_checkpoint(fits + "x")
    with pytest.raises(CheckpointTooLarge, match="JSON"):
        encode_checkpoint({"when": object()})
    with pytest.raises(CheckpointTooLarge):
        encode_checkpoint(float("nan"))
    for unreadable in (None, "", "{half", json.dumps(fits + "xx"), "[" * 100_000):
        assert parse_checkpoint(unreadable) is None, unreadable[:20] if unreadable else unreadable


def test_a_renewal_carries_a_new_checkpoint_once_in_the_same_write() -> None:
    api, slot = FakeLeases(), CheckpointSlot()
    lease = KubeLease("ns", "t-a1", "e1-a1", owner=Owner("t", "uid-1", 1), ttl=30, api=api, checkpoint=slot.newest)

    assert lease.renew(1).renewed and Annotation.CHECKPOINT not in (api.created[0]["metadata"].get("annotations") or {})
    lease.renew(1)
    slot.save({"done": 10})
    lease.renew(1)
    lease.renew(1)
    slot.save({"done": 20})
    slot.save({"done": 30})  # saved twice between renewals: only the newest goes
    lease.renew(1)

    carried = [annotation_ops(p) for p in api.patches]
    assert carried == [[], [{"op": "add", "path": "/metadata/annotations", "value": {Annotation.CHECKPOINT: '{"done":10}'}}],
                       [], [{"op": "add", "path": "/metadata/annotations", "value": {Annotation.CHECKPOINT: '{"done":30}'}}]]
    assert all(p[0] == {"op": "test", "path": "/spec/holderIdentity", "value": "e1-a1"} for p in api.patches), \
        "fenced by the holder test like every renewal"
    assert len(api.created) + len(api.patches) == 5, "no write of its own"
    assert lease.annotations() == {Annotation.CHECKPOINT: '{"done":30}'}


def test_a_checkpoint_saved_before_the_first_renewal_is_created_with_the_lease() -> None:
    api, slot = FakeLeases(), CheckpointSlot()
    slot.save([1, 2, 3])
    lease = KubeLease("ns", "t-a1", "e1-a1", owner=Owner("t", "uid-1", 1), ttl=30, api=api, checkpoint=slot.newest)
    lease.renew(1)
    lease.renew(1)
    assert api.created[0]["metadata"]["annotations"] == {Annotation.CHECKPOINT: "[1,2,3]"}
    assert annotation_ops(api.patches[0]) == [], "carried already"


def test_ctx_checkpoint_saves_for_the_next_renewal_and_refuses_what_does_not_fit() -> None:
    slot = CheckpointSlot()
    ctx = Context(id="u", name="t", namespace="ns", attempt=2, payload=None, lease_name="t-a2", lease_id="e1-a2",
                  lease_ttl=30, checkpoint_data={"done": 5}, _checkpoints=slot)
    assert ctx.checkpoint_data == {"done": 5}
    assert ctx.checkpoint({"done": 6}) is True and slot.newest() == '{"done":6}'
    with pytest.raises(CheckpointTooLarge):
        ctx.checkpoint("x" * CHECKPOINT_LIMIT)
    assert slot.newest() == '{"done":6}', "a refused checkpoint leaves the last one"
    unleased = Context(id="u", name="t", namespace="ns", attempt=1, payload=None, lease_name="", lease_id="", lease_ttl=0)
    assert unleased.checkpoint({"done": 1}) is False, "no Lease to carry it"


def test_the_environment_hands_over_the_previous_checkpoint() -> None:
    env = AttemptEnv.from_environ({Env.CHECKPOINT: '{"done":50}', Env.CHECKPOINT_FILE: "/c/checkpoint.json"})
    assert env.checkpoint == {"done": 50} and env.checkpoint_file == "/c/checkpoint.json"
    assert AttemptEnv.from_environ({}).checkpoint is None


def test_the_sidecar_reads_only_whole_json_within_the_bound_from_the_file(tmp_path, capsys) -> None:
    path = tmp_path / "checkpoint.json"
    file = CheckpointFile(str(path))
    assert file.newest() is None, "no file yet"
    path.write_text('{"done": 7}\n')
    assert file.newest() == '{"done":7}'
    path.write_text('{"done": ')  # the task is halfway through writing it
    assert file.newest() is None
    path.write_text(json.dumps("x" * CHECKPOINT_LIMIT))
    assert file.newest() is None
    assert capsys.readouterr().err.count("holds no checkpoint") == 1, "said once"
