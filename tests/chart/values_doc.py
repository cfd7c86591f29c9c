"""The chart's values as documentation rows: (dotted key, default as JSON, the comment above it).
`python -m tests.chart.values_doc` prints the Markdown table of docs/reference/chart-values.md; test_docs.py
fails when the table and values.yaml disagree."""
from __future__ import annotations

import json
import re
from typing import Iterator, NamedTuple

import yaml

from tests.chart.chart import CHART

KEY = re.compile(r"^(\s*)([A-Za-z_][\w.-]*):(.*)$")


class Row(NamedTuple):
    key: str
    default: str
    comment: str
    line: int  # 1-based line of values.yaml
    commented: bool  # a comment line sits right above the key


def rows(text: str | None = None) -> Iterator[Row]:
    """Every line of values.yaml that sets a value (a scalar, `[]`, `{}`, or a list below it)."""
    text = text if text is not None else (CHART / "values.yaml").read_text()
    lines = text.splitlines()
    values = yaml.safe_load(text)
    parents: list[tuple[int, str]] = []
    comment: list[str] = []
    for number, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("#"):
            comment.append(stripped.lstrip("#").strip())
            continue
        match = KEY.match(line)
        if not match:
            comment = []
            continue
        indent, key, rest = len(match.group(1)), match.group(2), match.group(3).split(" #")[0].strip()
        while parents and parents[-1][0] >= indent:
            parents.pop()
        path = [k for _, k in parents] + [key]
        following = next((line for line in lines[number + 1:] if line.strip() and not line.strip().startswith("#")), "")
        if rest or following.strip().startswith("- "):
            default = values
            for k in path:
                default = default[k]
            yield Row(".".join(path), json.dumps(default), " ".join(comment), number + 1, bool(comment))
        else:
            parents.append((indent, key))
        comment = []


def table() -> str:
    out = ["| Value | Default | What it does |", "| --- | --- | --- |"]
    for row in rows():
        out.append(f"| `{row.key}` | `{row.default}` | {row.comment.replace('|', chr(92) + '|')} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(table(), end="")
