"""The checkpoint: progress a running attempt saves so that the task's next attempt can resume from
it (docs/how-to/checkpoints.md). The SDK, a pull worker and the heartbeat sidecar encode it onto the
attempt's Lease (annotation `cronoq.io/checkpoint`, with a renewal); the operator parses it there,
records it in the Task's status, and hands it to the next attempt (CRONOQ_CHECKPOINT).

On the wire it is compact JSON of at most CHECKPOINT_LIMIT bytes. Unlike a report, a checkpoint is
never cut: half a checkpoint is no checkpoint, so the writer refuses one too big and the reader
ignores one that is not whole JSON within the bound.
"""
from __future__ import annotations

import json
from typing import Any, Final

from cronoq.pod_protocol.jsontext import check_depth, json_value

CHECKPOINT_LIMIT: Final = 4096
"""Bytes of a checkpoint's JSON: as much as a report, so an attempt's Lease carries at most 8 KiB of
cronoq annotations and the Task's status at most 4 KiB more; enough for a cursor, an offset or a
list of done items' ids, never for the data itself (which belongs in storage the task owns)."""


class CheckpointTooLarge(ValueError):
    """The checkpoint does not fit CHECKPOINT_LIMIT (or is not JSON)."""


def encode_checkpoint(data: Any) -> str:
    """`data` as the checkpoint's compact JSON; CheckpointTooLarge when it is no JSON, too big or
    nested deeper than `jsontext.JSON_DEPTH`."""
    try:
        text = json.dumps(check_depth(data), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as err:
        raise CheckpointTooLarge(f"a checkpoint must be JSON: {err}") from None
    size = len(text.encode())
    if size > CHECKPOINT_LIMIT:
        raise CheckpointTooLarge(f"a checkpoint is at most {CHECKPOINT_LIMIT} bytes of JSON, not {size}")
    return text


def parse_checkpoint(text: str | None) -> str | None:
    """The checkpoint in `text` as compact JSON, or None when it is none: absent, over the bound, or
    not JSON (nesting deep enough to exhaust the parser included)."""
    if not isinstance(text, str) or len(text) > CHECKPOINT_LIMIT or len(text.encode(errors="replace")) > CHECKPOINT_LIMIT:
        return None
    try:
        return encode_checkpoint(json_value(text))
    except ValueError:  # not JSON, too deep (jsontext), or no longer fits once re-encoded
        return None


def decode_checkpoint(text: str | None) -> Any:
    """The data of a checkpoint as the operator handed it over (None when there is none)."""
    parsed = parse_checkpoint(text)
    return None if parsed is None else json.loads(parsed)
