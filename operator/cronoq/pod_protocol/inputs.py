"""A dependent's inputs: what the tasks it depends on produced, handed to each of its attempts.

The operator encodes them when it builds an attempt's Job (`CRONOQ_INPUTS`); a pull worker encodes
them the same way when it starts an attempt; the SDK parses them into `Context.inputs`. One
encoding, defined here, so both sides read the same thing:

    {"fetch": {"phase": "Succeeded", "output": {"rows": 12}},
     "scan":  {"phase": "Failed", "output": null}}

Each dependency of `dependsOn`, in its order, maps to its phase and its output: JSON-parsed when
the output is JSON (nested at most 98 levels: the encoding's two levels above it and the output
stay within `jsontext.JSON_DEPTH`), else the text as is; null when it produced none (it failed, was skipped or
cancelled, or succeeded without output). A keyed duplicate's output is its original's (the
duplicate's status carries it).

The whole encoding is bounded by `INPUTS_LIMIT` bytes: a dependency's output that does not fit
is left out (largest first) and marked `"omitted": true`; its phase is always there, and the full
output stays in the dependency's status. So a pod is never refused and never fails to start for
the size of its inputs.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Mapping, Sequence

from cronoq.pod_protocol import json_object
from cronoq.pod_protocol.jsontext import JSON_DEPTH, json_value, value_depth

INPUTS_LIMIT: Final = 64 * 1024
"""Bytes of CRONOQ_INPUTS (UTF-8). Linux refuses to start a process with one environment string
over 128 KiB (MAX_ARG_STRLEN: the container would fail with E2BIG), and the pod also carries the
payload (≤ 32 KiB) and the rest of its environment; 64 KiB leaves room for both. It holds 15 full
4 KiB outputs, or 32 (the most `dependsOn` takes) of about 2 KiB each."""


@dataclass(frozen=True)
class Input:
    """One dependency as its dependent sees it."""

    phase: str | None
    """The dependency's phase when the attempt was handed over (None: it was not found)."""
    output: Any = None
    """Its output, JSON-parsed when it is JSON; None when it produced none (or it was `omitted`)."""
    omitted: bool = False
    """Its output did not fit under INPUTS_LIMIT: read it from the dependency's `status.output`."""


OUTPUT_DEPTH: Final = JSON_DEPTH - 2
"""How deep a parsed output may nest: the encoding puts each two levels down (`{name: {"output":
…}}`), and what the operator encodes the SDK must parse within JSON_DEPTH."""


def parsed_output(output: str | None) -> Any:
    """An output as a dependent receives it: parsed when it is JSON nested at most OUTPUT_DEPTH
    levels, else the text, whatever the text."""
    if output is None:
        return None
    try:
        value = json_value(output)
    except ValueError:
        return output
    return value if value_depth(value, OUTPUT_DEPTH) <= OUTPUT_DEPTH else output


def gated(finished_at: str | datetime | None, first_attempt_at: str | datetime | None) -> bool:
    """Whether the dependency Task just read, which ended at `finished_at`, is the one whose end let
    the dependent start: it ended no later than the dependent's first attempt was dispatched
    (`status.firstAttemptAt`; None: it is being dispatched now). A Task of the same name made
    later (the dependency deleted and created again, by anyone who may create Tasks there) ended
    after, and hands over no output. Both times are the operator's; one that cannot be read
    answers no. What a pull worker checks when it reads its inputs by name, as the operator does
    (which also checks that the uid is the one it holds under that name)."""
    if first_attempt_at is None:
        return True
    ended, started = _time(finished_at), _time(first_attempt_at)
    return ended is not None and started is not None and ended <= started


def _time(value: str | datetime | None) -> datetime | None:
    if isinstance(value, datetime):
        found = value
    elif isinstance(value, str):
        try:
            found = datetime.fromisoformat(value)
        except ValueError:
            return None
    else:
        return None
    return found if found.tzinfo is not None else None


def inputs_of(dependencies: Sequence[tuple[str, str | None, str | None]]) -> dict[str, Input]:
    """(name, phase, output or None) of each dependency → the inputs, outputs parsed."""
    return {name: Input(phase, parsed_output(output)) for name, phase, output in dependencies}


def encode_inputs(inputs: Mapping[str, Input], limit: int = INPUTS_LIMIT) -> str:
    """Compact JSON of `inputs`, at most `limit` bytes: outputs are left out, largest first, until
    it fits (phases and names alone always fit: 32 names of ≤ 253 characters)."""
    entries = plain(inputs)
    text = _dump(entries)
    if len(text.encode()) <= limit:
        return text
    sizes = sorted(((len(_dump(e["output"]).encode()), name) for name, e in entries.items()
                    if e["output"] is not None), reverse=True)
    for _, name in sizes:
        entries[name] = {"phase": entries[name]["phase"], "output": None, "omitted": True}
        text = _dump(entries)
        if len(text.encode()) <= limit:
            break
    return text


def parse_inputs(text: str) -> dict[str, Input]:
    """The inputs CRONOQ_INPUTS holds; ValueError when it is not an encoding of them (and no
    other exception, whatever the text)."""
    inputs = {}
    for name, entry in json_object(text).items():
        if not isinstance(entry, dict) or not isinstance(entry.get("phase"), (str, type(None))):
            raise ValueError(f"{name}: not an object with a phase")
        inputs[name] = Input(entry.get("phase"), entry.get("output"), entry.get("omitted") is True)
    return inputs


def plain(inputs: Mapping[str, Input]) -> dict[str, Any]:
    """The inputs as the JSON value CRONOQ_INPUTS encodes (a push request's body carries it)."""
    return {name: _entry(value) for name, value in inputs.items()}


def _entry(value: Input) -> dict[str, Any]:
    entry: dict[str, Any] = {"phase": value.phase, "output": value.output}
    if value.omitted:
        entry["omitted"] = True
    return entry


def _dump(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))  # ASCII: any output encodes
