"""The checkpoint an attempt saves, between the handler (`ctx.checkpoint(data)`) and the renewals of
its Lease that carry it (worker/lease.py), and the file a task without the SDK writes for the
heartbeat sidecar. The wire format is pod_protocol/checkpoint.py."""
from __future__ import annotations

import sys
import threading
from typing import Any

from cronoq.pod_protocol.checkpoint import CHECKPOINT_LIMIT, CheckpointTooLarge, encode_checkpoint, parse_checkpoint


class CheckpointSlot:
    """The newest checkpoint the handler saved, waiting for the next renewal to carry it. Saving is
    cheap and never writes: only the newest one saved before a renewal is sent."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._text: str | None = None

    def save(self, data: Any) -> None:
        text = encode_checkpoint(data)  # raises CheckpointTooLarge before anything is kept
        with self._lock:
            self._text = text

    def newest(self) -> str | None:
        with self._lock:
            return self._text


class CheckpointFile:
    """The checkpoint a task container without the SDK writes to a file on a volume it shares with
    the heartbeat sidecar: read at each renewal; a file missing, over the bound or not (yet) whole
    JSON carries nothing new (the task may be halfway through writing it)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._warned = False

    def newest(self) -> str | None:
        try:
            with open(self.path, "rb") as f:
                raw = f.read(CHECKPOINT_LIMIT + 1)
        except OSError:
            return None
        text = parse_checkpoint(raw.decode(errors="replace")) if len(raw) <= CHECKPOINT_LIMIT else None
        if text is None and raw.strip() and not self._warned:
            self._warned = True
            print(f"cronoq heartbeat: {self.path} holds no checkpoint (JSON of at most {CHECKPOINT_LIMIT} bytes); "
                  f"ignored until it does", file=sys.stderr, flush=True)
        return text


__all__ = ["CheckpointFile", "CheckpointSlot", "CheckpointTooLarge"]
