"""This replica's term as the leader, as the parts of the controller that write see it.

One object, shared by reference, so that the election (through the runtime) changes the epoch
or stops every writer at once, and no part keeps a stale copy of either.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Term:
    epoch: int = 0
    """Stamped on every status written and in every lease id: fences what an older leader writes."""
    acting: bool = True
    """False once this replica must stop writing (it lost leadership)."""
