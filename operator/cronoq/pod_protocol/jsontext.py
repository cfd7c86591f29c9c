"""JSON from tenants, parsed totally: any text gives a value or a ValueError saying why not, never
another exception. Every JSON value a tenant writes and cronoq reads (a dependency's output, the
inputs, a checkpoint, a report, the payload, a pod template) is nested at most JSON_DEPTH levels,
checked before anything recurses into it.

Why a bound of its own: Python's parser and encoder recurse, and run out of stack (RecursionError)
at a depth that depends on how deep the caller already is, so a value that parses in one place
could fail to encode in another, in every reconcile. `"[" * 3000` is 3 KiB. The API server's
JSON library refuses 10,000 levels, orjson (the operator's) 1,024 when reading and 255 when
writing, so a bound well under all of them makes a value read once safe everywhere after.
"""
from __future__ import annotations

import json
import re
from typing import Any, Final

JSON_DEPTH: Final = 100
"""Most levels of nesting (arrays and objects) of a tenant's JSON value. Deep enough for any data a
task hands over, far from every parser's and encoder's own limit (see the module docstring)."""

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(r"[\[\]{}]")


class TooDeep(ValueError):
    """The JSON is nested deeper than JSON_DEPTH."""

    def __init__(self, depth: int) -> None:
        super().__init__(f"nested {depth} levels deep, more than {JSON_DEPTH}")


def text_depth(text: str) -> int:
    """The deepest nesting of brackets in JSON text, outside its strings. For text that is not JSON
    it may say more than a parser would reach before it fails, never less."""
    depth = deepest = 0
    for bracket in _BRACKETS.findall(_STRING.sub("", text)):
        depth = depth + 1 if bracket in "[{" else max(depth - 1, 0)
        deepest = max(deepest, depth)
    return deepest


def value_depth(value: Any, limit: int = JSON_DEPTH) -> int:
    """The nesting of a parsed value (dicts, lists, tuples), without recursion; it stops counting
    once past `limit` (returning limit + 1), so a deep value costs no more than a shallow one."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        depth += 1
        if depth > limit:
            return limit + 1
        deepest = max(deepest, depth)
        stack.extend((child, depth) for child in children)
    return deepest


def check_depth(value: Any) -> Any:
    """`value` when it is nested at most JSON_DEPTH levels; TooDeep otherwise."""
    depth = value_depth(value)
    if depth > JSON_DEPTH:
        raise TooDeep(depth)
    return value


def json_value(text: str) -> Any:
    """The JSON value in `text` (as Python's parser reads it: NaN and Infinity too); ValueError
    when it is not JSON, or nested deeper than JSON_DEPTH (TooDeep). Nothing else is raised."""
    if not isinstance(text, str):
        raise ValueError(f"JSON text is a string, not {type(text).__name__}")
    depth = text_depth(text)
    if depth > JSON_DEPTH:
        raise TooDeep(depth)
    try:
        return json.loads(text)
    except RecursionError:  # not reachable under the bound; a refusal all the same
        raise TooDeep(depth) from None
    except ValueError as err:  # JSONDecodeError, an integer of too many digits
        raise ValueError(f"not JSON: {err}") from None
