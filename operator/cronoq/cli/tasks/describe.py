"""`cronoq describe`: a task, why it waits and its limits (`engine.attempts.waiting` words them), its
attempts and events; a task gone from the cluster from the archive.
"""
from __future__ import annotations

import argparse
import os
from collections import Counter
from datetime import datetime, timezone
from typing import Any

from cronoq.api import Task, TaskPhase, TaskPool
from cronoq.cli import EXIT_OK, render, retention
from cronoq.cli.runner import add_chunk_size, bare
from cronoq.client import Client, TaskNotFound
from cronoq.engine import admission, delay, keylimits
from cronoq.engine.admission import MARKS_FROM
from cronoq.engine.attempts import waiting


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    d = sub.add_parser("describe", parents=[common], help="a task, its attempt history, dependencies and events")
    d.add_argument("name", metavar="NAME")
    d.add_argument("--archive", metavar="URL", default=None,
                   help="a task gone from the cluster is described from this archive (the operator's --archive; "
                        "default: $CRONOQ_ARCHIVE)")
    d.add_argument("--place", action="store_true",
                   help=f"a queued task's exact place in its pool's queue past {PLACE_LIMIT:,} queued (reads every "
                        "queued task of the pool, page by page; without it, the place between the pool's queue marks)")
    add_chunk_size(d)


def describe(args: argparse.Namespace, client: Client) -> int:
    try:
        task = client.get(bare(args.name))
    except TaskNotFound:
        url = getattr(args, "archive", None) or os.environ.get("CRONOQ_ARCHIVE")
        if url:  # deleted meanwhile (its retention ended): what the archive kept of it
            from cronoq.cli.history import describe_archived
            shown = describe_archived(client.namespace, bare(args.name), url)
            if shown is not None:
                return shown
        raise
    s = task.status
    out = render.console()
    pool = client.pool(task.spec.pool)
    said = _explained(task, pool, client, args.place, datetime.now(timezone.utc))
    pairs: list[tuple[str, Any]] = [
        ("Name", task.metadata.name), ("Namespace", task.metadata.namespace), ("Pool", task.spec.pool),
        ("Priority", task.spec.priority), ("Phase", render.phase_text(task.phase)),
        ("Attempt", s.attempt if s else 0),
    ]
    if task.spec.key:
        pairs.append(("Key", task.spec.key))
    if submitter := admission.submitter_of(task):
        pairs.append(("Submitter", render.cell(submitter)))
    if s and s.duplicate_of:
        pairs.append(("Duplicate of", s.duplicate_of))
    if "cronoq.io/retry-of" in task.metadata.labels:
        pairs.append(("Retry of", task.metadata.labels["cronoq.io/retry-of"]))
    retries = client.retries_of(task.metadata.name or "")
    if retries:
        pairs.append(("Retried as", ", ".join(f"{r.metadata.name} ({r.phase or 'Pending'})" for r in retries)))
    if task.spec.image:
        pairs.append(("Image", task.spec.image))
    if s and s.submitted_at:
        pairs.append(("Submitted", s.submitted_at.isoformat()))
    if s and s.finished_at:
        pairs.append(("Finished", s.finished_at.isoformat()))
    if s and s.next_attempt_at:
        pairs.append(("Next attempt", s.next_attempt_at.isoformat()))
    if s and s.ignored_attempts:
        pairs.append(("Ignored attempts", f"{s.ignored_attempts} (retry rules said Ignore: not counted against "
                                          "maxAttempts)"))
    if said.not_before is not None:
        pairs.append(("Not before", _not_before(said)))
    if task.spec.depends_on:
        pairs.append(("Depends on", ", ".join(f"{d.task} ({d.on})" for d in task.spec.depends_on)))
    if task.spec.concurrency_keys:
        pairs.append(("Concurrency keys", render.cell(", ".join(task.spec.concurrency_keys))))
    if (why := said.waiting_text()) is not None:
        pairs.append(("Waiting", render.cell(why)))
        if held := _key_wait_text(task, client):
            pairs.append(("Waiting for", render.cell(held)))
    if task.phase is TaskPhase.RUNNING and pool is not None and pool.spec.admission is not None \
            and pool.spec.admission.kueue is not None and (hold := client.kueue_hold(task)) is not None:
        pairs.append(("Waiting", render.cell(waiting.kueue_text(hold, position=True))))
    if limits := said.limits_text():
        pairs.append(("Deadlines", limits))
    pairs.append(("Retention", retention.task_line(task, pool.spec if pool is not None else None)))
    if s and s.message:
        pairs.append(("Message", render.cell(s.message, multiline=True)))
    if s and s.output_available:
        pairs.append(("Output", render.cell(s.output or "", multiline=True)))
    if s and s.checkpoint:
        pairs.append(("Checkpoint", render.cell(render.checkpoint_text(s.checkpoint, s.attempt), multiline=True)))
    render.show(out, render.fields_grid(pairs))
    print()
    if s and s.attempts:
        print("Attempts:")
        render.show(out, render.attempts_table(task))
    else:
        print("Attempts: none yet")
    events = client.events(task)
    if events:
        print("\nEvents:")
        render.show(out, render.events_table(events[-15:]))
    return EXIT_OK


def _not_before(said: waiting.Explanation) -> str:
    """`describe`'s line for a delayed start: the time, and how far it is while it is ahead."""
    assert said.not_before is not None  # (asked for only when the task has one)
    text = delay.spelled(said.not_before)
    if said.start_ahead:
        text += f" (in {render.age(said.now, said.not_before)})"
    return text


PLACE_LIMIT = MARKS_FROM
"""Past this many queued tasks in its pool (the pool's status says how many), `describe` reads the
task's place between the marks of the pool's queue the operator keeps in its status, unless asked
to work it out exactly (`--place`): that reads every queued task of the pool."""


def _explained(task: Task, pool: TaskPool | None, client: Client, place_anyway: bool,
               now: datetime) -> waiting.Explanation:
    """Why the task waits and its limits (`engine.attempts.waiting.explain` decides and words them)
    from its pool (None: it does not exist) and, while it is queued, what its place and its
    group's count are read from: the pool's status (when it carries queue marks, past the
    operator's --queue-marks-from, the place between them) and, while the pool's status counts at
    most PLACE_LIMIT queued tasks (or when asked), the pool's queued tasks (a LIST by the
    selectable fields spec.pool and status.phase, page by page; what is kept of each is its place
    in the order, not the Task); the running tasks of the pool only when its groupConcurrency
    decides. No write."""
    if task.phase is not TaskPhase.QUEUED or pool is None:
        return waiting.explain(task, pool, now)
    name = task.spec.pool
    fair = pool.spec.fair_share
    counted = pool.status.queued if pool.status else 0
    queue_marks = pool.status.queue_marks if pool.status else None
    exactly = f"`cronoq describe {task.metadata.name} --place` reads them all"
    group = admission.fair_group(task.spec.group, admission.submitter_of(task), fair)
    running: Counter[str] | None = None

    def by_group() -> Counter[str]:
        """The pool's running tasks by fairness group, read once, when something decides on them."""
        nonlocal running
        if running is None:
            running = Counter(admission.fair_group(t.spec.group, admission.submitter_of(t), fair)
                              for page in client.pages(pool=name, phase="Running") for t in page)
        return running

    queued_groups: set[str] = set()
    if queue_marks is not None and not place_anyway:  # the operator took them: past its --queue-marks-from
        place = f"{waiting.between(task, queue_marks, fair)}; for the exact place, {exactly}"
    elif counted > PLACE_LIMIT and not place_anyway:
        place = f"one of {counted:,} queued in pool {name} (the place is worked out up to {PLACE_LIMIT:,} queued: {exactly})"
    else:
        queued = [t for page in client.pages(pool=name, phase="Queued") for t in page]
        queued_groups = {admission.fair_group(t.spec.group, admission.submitter_of(t), fair) for t in queued}
        place = str(waiting.place(task, queued, fair, by_group() if fair is not None else None))

    def share() -> waiting.Share:
        assert fair is not None  # (asked for only when the pool shares its slots)
        return waiting.share_of(fair, pool.spec.concurrency, group, by_group(), queued_groups)

    return waiting.explain(task, pool, now, place=place, group_running=lambda: by_group()[group], share=share)


def _key_wait_text(task: Task, client: Client) -> str | None:
    """Which concurrency key holds a queued task and who holds the key (`engine.keylimits` words it),
    from the namespace's pools and running tasks (a LIST of each, only for a task naming keys);
    None when it names none or each has room."""
    if not task.spec.concurrency_keys:
        return None
    running = [(t.metadata.name or "", t.spec.concurrency_keys) for page in client.pages(phase="Running")
               for t in page if t.spec.concurrency_keys]
    found = keylimits.of_tasks(task.spec.concurrency_keys, running, (p.spec for p in client.pools()))
    return keylimits.described(found) if found is not None else None
