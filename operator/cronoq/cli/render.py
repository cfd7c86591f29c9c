"""How the CLI shows tasks: kubectl-like tables, attempt history, dependency trees (rich).

Every value that comes from the cluster is wrapped in `Text` by `cell`, never passed as markup
(task messages may contain `[brackets]` that rich would otherwise read as styles), and its control
characters are escaped by `terminal_safe` on the way: a tenant writes task messages, outputs and
Events, and an escape sequence in them must not reach the reader's terminal.
"""
from __future__ import annotations

import json
import re
import shutil
import sys
from datetime import datetime, timezone
from typing import Any, Callable, Sequence, TextIO

import yaml
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from cronoq.api import Checkpoint, Task, TaskPhase

PHASE_STYLE = {
    TaskPhase.SUCCEEDED: "green", TaskPhase.FAILED: "red", TaskPhase.DEAD_LETTERED: "bold red",
    TaskPhase.CANCELLED: "yellow", TaskPhase.SKIPPED: "yellow", TaskPhase.RUNNING: "cyan",
    TaskPhase.RETRYING: "magenta", TaskPhase.QUEUED: "", TaskPhase.BLOCKED: "dim",
}


def _escapes(*, multiline: bool) -> dict[int, str]:
    """`str.translate`'s table from each control character to its escape."""
    controls = [*range(0x20), 0x7F, *range(0x80, 0xA0)]  # C0, DEL, C1
    kept = (0x0A, 0x09) if multiline else ()
    short = {0x0A: "\\n", 0x09: "\\t", 0x0D: "\\r"}
    return {c: short.get(c, f"\\x{c:02x}") for c in controls if c not in kept}


CELL_ESCAPES = _escapes(multiline=False)
TEXT_ESCAPES = _escapes(multiline=True)


def terminal_safe(text: str, *, multiline: bool = False) -> str:
    """`text` from the cluster as a terminal may show it: each control character (C0, DEL, C1)
    written as its Python escape (`\\x1b`, `\\x9b`, `\\r`, `\\n`), so no escape sequence a tenant
    wrote can set the clipboard (OSC 52), fake a link, move the cursor or clear the screen. Like
    kubectl's escaping (CVE-2021-25743), it cannot be undone: `-o json` keeps the exact text.
    `multiline` keeps line breaks and tabs, for free text shown on lines of its own; a table cell
    keeps neither, or it could draw rows of its own."""
    return text.translate(TEXT_ESCAPES if multiline else CELL_ESCAPES)


def cell(value: object, style: str = "", *, multiline: bool = False) -> Text:
    """A value from the cluster as rich shows it: escaped, and never read as markup."""
    return Text(terminal_safe(str(value), multiline=multiline), style=style)


def on_terminal(text: str, stream: TextIO) -> str:
    """`text` as it is written to `stream`: escaped for a terminal (a person reads it), exact for
    a pipe or a file (a script does), as `ls` shows file names."""
    return terminal_safe(text, multiline=True) if stream.isatty() else text


def console(stderr: bool = False) -> Console:
    """A console for stdout (or stderr). Piped output is not cut at 80 columns: scripts and
    tests read whole lines."""
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else max(shutil.get_terminal_size((200, 24)).columns, 200)
    return Console(file=stream, width=width, highlight=False, soft_wrap=False)


def show(out: Console, renderable: Any = "") -> None:
    """Print a table, grid or tree; piped, without the padding rich puts at line ends."""
    if out.is_terminal:
        out.print(renderable)
        return
    with out.capture() as captured:
        out.print(renderable)
    out.file.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))
    out.file.flush()


def age(since: datetime | None, now: datetime | None = None) -> str:
    """kubectl's compact age: 42s, 5m3s, 3h, 2d."""
    if since is None:
        return "<unknown>"
    seconds = int(((now or datetime.now(timezone.utc)) - since).total_seconds())
    seconds = max(seconds, 0)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 600:
        return f"{seconds // 60}m{seconds % 60}s" if seconds % 60 else f"{seconds // 60}m"
    if seconds < 3 * 3600:
        return f"{seconds // 60}m"
    if seconds < 48 * 3600:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def duration(ms: int | None) -> str:
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms}ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f}s"
    return f"{ms // 60_000}m{(ms % 60_000) // 1000}s"


def phase_text(phase: TaskPhase | str | None) -> Text:
    if phase is None:
        return Text("Pending", style="dim")
    return cell(phase, style=PHASE_STYLE.get(phase, ""))


def _summary(task: Task) -> str:
    s = task.status
    if s is None:
        return ""
    text = s.summary or s.message or ""
    return text.splitlines()[0] if text else ""


COLUMNS = ("NAME", "POOL", "STATUS", "ATTEMPT", "AGE", "MESSAGE")
WIDE = ("PRIORITY", "KEY", "DURATION", "NEXT ATTEMPT", "DUPLICATE OF", "RETRY OF")


def row(task: Task, wide: bool = False, namespaces: bool = False) -> list[Text]:
    s = task.status
    cells = [cell(task.metadata.name or ""), cell(task.spec.pool), phase_text(task.phase),
             cell(s.attempt if s else 0), cell(age(task.metadata.creation_timestamp)), cell(_summary(task))]
    if wide:
        took = None
        if s and s.finished_at and s.submitted_at:
            took = int((s.finished_at - s.submitted_at).total_seconds() * 1000)
        cells[5:5] = [cell(task.spec.priority), cell(task.spec.key or "-"), cell(duration(took)),
                      cell(s.next_attempt_at.isoformat() if s and s.next_attempt_at else "-"),
                      cell(s.duplicate_of if s and s.duplicate_of else "-"),
                      cell(task.metadata.labels.get("cronoq.io/retry-of", "-"))]
    if namespaces:
        cells.insert(0, cell(task.metadata.namespace or ""))
    return cells


def headers(wide: bool = False, namespaces: bool = False) -> list[str]:
    cols = list(COLUMNS)
    if wide:
        cols[5:5] = WIDE
    return ["NAMESPACE", *cols] if namespaces else cols


def table(columns: list[str], rows: list[list[Text]], show_header: bool = True) -> Table:
    """kubectl's plain table: no box, three spaces between columns; the last column wraps."""
    out = Table(box=None, show_edge=False, pad_edge=False, header_style="", padding=(0, 3, 0, 0),
                show_header=show_header)
    for i, h in enumerate(columns):
        out.add_column(h, no_wrap=i < len(columns) - 1, overflow="fold")
    for cells in rows:
        out.add_row(*cells)
    return out


def task_table(tasks: list[Task], wide: bool = False, namespaces: bool = False, show_header: bool = True) -> Table:
    return table(headers(wide, namespaces), [row(t, wide, namespaces) for t in tasks], show_header)


WATCH_WIDTHS = (32, 12, 14, 9, 7)


def watch_line(cells: list[Text], namespaces: bool = False) -> Text:
    """One row of `get -w`: fixed widths, since rows arrive one at a time."""
    widths = ((20,) if namespaces else ()) + WATCH_WIDTHS
    line = Text()
    for i, cell in enumerate(cells):
        if i < len(widths):
            cell = cell.copy()
            cell.pad_right(max(widths[i] - len(cell), 1))
        elif i < len(cells) - 1:
            cell = cell.copy()
            cell.append("   ")
        line.append_text(cell)
    return line


def dump(objects: list[dict[str, Any]], fmt: str, single: bool) -> str:
    doc: Any = objects[0] if single and len(objects) == 1 else {"apiVersion": "v1", "kind": "List", "items": objects}
    if fmt == "json":
        return json.dumps(doc, indent=2)
    return yaml.safe_dump(doc, sort_keys=False).rstrip("\n")


def checkpoint_text(checkpoint: Checkpoint, current: int) -> str:
    """A task's checkpoint for `describe`: who saved it (and when), then its JSON. The attempt
    running now (`current`) resumed from it when an earlier attempt saved it."""
    who = f"saved by attempt {checkpoint.attempt}"
    if checkpoint.saved_at is not None:
        who += f", {age(checkpoint.saved_at)} ago"
    if checkpoint.attempt < current:
        who += f"; attempt {current} started from it"
    return f"{who}\n{checkpoint.data}"


def attempts_table(task: Task) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for h in ("ATTEMPT", "TRIGGER", "RAN ON", "STARTED", "DURATION", "OUTCOME", "EXIT CODE", "REASON", "MESSAGE"):
        table.add_column(h, no_wrap=h != "MESSAGE", overflow="fold")
    for a in (task.status.attempts if task.status else ()):
        outcome = cell(a.outcome if a.outcome else "running",
                       style={"Success": "green", "Retryable": "magenta", "Permanent": "red"}.get(str(a.outcome), ""))
        table.add_row(cell(a.number), cell(a.trigger),
                      cell(f"worker {a.worker}" if a.worker else f"Job {a.job}" if a.job else "-"),
                      cell(a.started_at.strftime("%Y-%m-%d %H:%M:%S") if a.started_at else "-"),
                      cell(duration(a.duration_ms)), outcome,
                      cell("-" if a.exit_code is None else a.exit_code), cell(_reason(a)),
                      cell((a.message or "").strip() or "-"))
    return table


def _reason(attempt: Any) -> str:
    """The attempt's reason, with the retry rule that decided and whether the attempt counted."""
    said = attempt.reason or "-"
    if attempt.rule:
        said += f" ({attempt.rule}{', not counted' if attempt.ignored else ''})"
    return said


def events_table(events: list[Any]) -> Table:
    """A task's Events as `describe` shows them: age, type, reason, message."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for h in ("AGE", "TYPE", "REASON", "MESSAGE"):
        table.add_column(h, no_wrap=h != "MESSAGE", overflow="fold")
    for e in events:
        table.add_row(cell(age(e.when)),
                      cell(e.type or ""), cell(e.reason or ""), cell(e.message or ""))
    return table


def fields_grid(pairs: list[tuple[str, Any]]) -> Table:
    """`describe`'s label: value lines. A value given as `Text` is shown as it is (make it with
    `cell`); any other is one escaped line."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for label, value in pairs:
        grid.add_row(Text(f"{label}:", style="bold"), value if isinstance(value, Text) else cell(value))
    return grid


PASSED_WIDTH = 60
"""Characters of an output `cronoq tree` shows as the value a dependency passes on."""


def passed_on(task: Task) -> str | None:
    """The output `task` hands its dependents (`CRONOQ_INPUTS`, docs/inputs.md), cut to fit a
    line; None when it has none."""
    status = task.status
    if status is None or not status.output_available or status.output is None:
        return None
    text = " ".join(status.output.split())
    return text if len(text) <= PASSED_WIDTH else text[:PASSED_WIDTH - 1] + "…"


def dependency_tree(root: str, tasks: dict[str, Task]) -> Tree:
    """What `root` waits for, recursively, each with its phase and the output it passes on (its
    dependents' input); a task reached twice (a diamond) is shown under each of its dependents."""
    def label(name: str, on: str | None) -> Text:
        text = cell(name, style="bold")
        task = tasks.get(name)
        text.append("  ")
        text.append_text(phase_text(task.phase) if task else Text("not found", style="red"))
        if on and on != "Success":
            text.append(f"  (on {on})", style="dim")
        passed = passed_on(task) if task is not None and on is not None else None
        if passed is not None:
            text.append("  → ", style="dim")
            text.append_text(cell(passed, style="cyan"))
        return text

    def grow(node: Tree, name: str, path: tuple[str, ...]) -> None:
        task = tasks.get(name)
        if task is None:
            return
        for dep in task.spec.depends_on:
            child = node.add(label(dep.task, str(dep.on)))
            if dep.task in path:
                child.label.append("  (cycle)", style="red")
                continue
            grow(child, dep.task, (*path, dep.task))

    tree = Tree(label(root, None))
    grow(tree, root, (root,))
    return tree


def jsonpath(template: str, doc: Any) -> str:
    """kubectl's `-o jsonpath=TEMPLATE`: text with `{expressions}` (`{.items[*].metadata.name}`,
    `{range .items[*]}…{end}`, `{"\\n"}`, filters `[?(@.status.phase=="Failed")]`), the
    expressions evaluated by jsonpath-ng. Matches of one expression are joined by a space;
    objects and lists are printed as JSON. ValueError names what could not be read."""
    out: list[str] = []
    tokens = re.split(r"(\{(?:[^{}\"]|\"(?:[^\"\\]|\\.)*\")*\})", template)
    end = _run_template(tokens, 0, doc, out)
    if end != len(tokens):
        raise ValueError("{end} without a {range}")
    return "".join(out)


def _run_template(tokens: list[str], i: int, node: Any, out: list[str]) -> int:
    """Render tokens from i with `node` as `@`; return the index after the closing {end} (or the last)."""
    while i < len(tokens):
        token = tokens[i]
        if not (token.startswith("{") and token.endswith("}")):
            if "{" in token or "}" in token:
                raise ValueError(f"unmatched brace in {token!r}")
            out.append(token)
            i += 1
            continue
        expr = token[1:-1].strip()
        if expr == "end":
            return i + 1
        if expr.startswith("range "):
            items = _find(expr[len("range "):], node)
            after = _run_template(tokens, i + 1, {}, [])  # where the range ends, even when it runs no time
            for item in items:
                _run_template(tokens, i + 1, item, out)
            if after > len(tokens) or tokens[after - 1].strip("{} ") != "end":
                raise ValueError(f"{token} without its {{end}}")
            i = after
            continue
        if expr.startswith('"'):
            out.append(json.loads(expr, strict=False))
        else:
            out.append(" ".join(v if isinstance(v, str) else json.dumps(v) for v in _find(expr, node)))
        i += 1
    return i


def _find(expr: str, node: Any) -> list[Any]:
    from jsonpath_ng.ext import parse

    expr = expr.strip()
    path = "$" + expr[1:] if expr.startswith("@") else expr if expr.startswith("$") else "$" + (
        expr if expr.startswith((".", "[")) else "." + expr)
    try:
        return [m.value for m in parse(path).find(node)]
    except Exception as err:  # jsonpath-ng raises plain Exceptions for bad syntax
        raise ValueError(f"{expr}: {err}") from None


def custom_columns(spec: str) -> list[tuple[str, str]]:
    """kubectl's `-o custom-columns=NAME:.metadata.name,PHASE:.status.phase`: (header, path)
    pairs, each path checked. ValueError names a column that cannot be read."""
    columns = []
    for column in spec.split(","):
        header, sep, path = column.partition(":")
        if not sep or not header or not path:
            raise ValueError(f"{column!r}: expected HEADER:JSONPATH")
        path = path.strip()
        if path.startswith("{") and path.endswith("}"):
            path = path[1:-1]
        _find(path, {})
        columns.append((header, path))
    return columns


def custom_row(columns: list[tuple[str, str]], doc: Any) -> list[Text]:
    """One object's cells: the matches of each column's path, joined by commas, or `<none>`."""
    cells = []
    for _, path in columns:
        found = [v if isinstance(v, str) else json.dumps(v) for v in _find(path, doc)]
        cells.append(cell(",".join(found) if found else "<none>"))
    return cells


def listing(objects: Sequence[Any], *, output: str | None, resource: str, noun: str, where: str,
            columns: list[str], row: Callable[[Any], list[Text]], all_namespaces: bool, headers: bool) -> None:
    """A `list` verb's output for pools or schedules, as kubectl prints it: json/yaml, names, or a
    table (with a NAMESPACE column under -A); "No <noun> found in <where>." on stderr when empty."""
    if output in ("json", "yaml"):
        print(dump([o.to_dict() for o in objects], output, single=False))
    elif output == "name":
        for o in objects:
            print(f"{resource}/{o.metadata.name}")
    elif not objects:
        print(f"No {noun} found in {where}.", file=sys.stderr)
    else:
        shown = ["NAMESPACE", *columns] if all_namespaces else columns
        show(console(), table(shown, [row(o) for o in objects], show_header=headers))
