"""The operator's settings: one typed object that is both what the Runtime runs with and the
definition of `cronoq operator`'s flags. Each field holds its default once, with the flag's help
beside it; `add_flags` builds the flags from the fields (names, types, defaults, help) and
`from_flags` reads them back into settings, so a default can be neither stated twice nor mapped
by hand. The chart's values that become flags are checked against these defaults by a test.

Nothing here imports more than the CLI already has: every `cronoq` command builds the parser.
"""
from __future__ import annotations

import argparse
import fnmatch
import os
from dataclasses import MISSING, dataclass, field, fields
from datetime import timedelta
from typing import Any, Callable, Literal, get_args

from cronoq import __version__
from cronoq.api import durations
from cronoq.engine.admission import MARKS_FROM
from cronoq.engine.jobs import TaskServiceAccount
from cronoq.kube.watch_timing import STALL_MARGIN, WATCH_SECONDS

Events = Literal["auto", "all", "warnings"]
LogLevel = Literal["debug", "info", "warning", "error"]


@dataclass(frozen=True)
class Flag:
    """How a setting is given on the command line: its help, and what argparse cannot tell from
    the field's name, type and default."""

    help: str
    default_text: str | None = None
    """The default in words, where its value would not say it (no namespace: all of them)."""
    name: str | None = None
    """The flag, when it is not the field's name (`--namespace`, once per namespace, fills `namespaces`)."""
    short: str | None = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    parse: Callable[[str], Any] | None = None
    """Turns the flag's text into the field's value (default: the type of the default)."""
    env: str | None = None
    """An environment variable that, when set, is the flag's default instead."""


def flag(default: Any, help: str, **how: Any) -> Any:
    """A field of Options with its command-line flag."""
    return field(default=default, metadata={"flag": Flag(help, **how)})


def _duration(text: str) -> timedelta:
    try:
        return durations.parse(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


@dataclass(frozen=True)
class Options:
    namespaces: tuple[str, ...] = flag(
        (), "watch only this namespace (repeatable); globs such as team-* allowed", name="--namespace", short="-n",
        default_text="all namespaces")
    metrics_port: int = flag(9090, "serve Prometheus /metrics on this port; 0: not at all")
    probe_port: int = flag(8080, "serve /healthz and /readyz on this port; 0: not at all")
    workers: int = flag(8, "tasks reconciled concurrently")
    watch_seconds: int = flag(
        WATCH_SECONDS, f"length of one watch request; a watch silent for N+{STALL_MARGIN} s is stalled and started "
                       "again", metavar="N")
    events: Events = flag(
        "auto", "Events posted on Tasks: all (every attempt's end, succeeded ones too), warnings (only Warning "
                "Events: attempts that failed, timed out or were lost, late reports, whatever a pool says), or "
                "auto: all in Job pools, warnings in Workers pools (a succeeded served attempt is in the status); "
                "a pool's spec.events overrides all and auto", choices=get_args(Events))
    leader_election: bool = flag(True, "compete for a Lease so that only one replica acts")
    lease_namespace: str | None = flag(None, "namespace of the leader Lease", default_text="$POD_NAMESPACE, else default")
    lease_name: str = flag("cronoq-leader", "name of the leader Lease")
    sidecar_image: str = flag(
        f"ghcr.io/cronoq/operator:{__version__}",
        "image of the heartbeat sidecar added to pods of tasks with heartbeatSidecar: true")
    task_service_account: str | None = flag(
        None, "ServiceAccount of attempt pods whose task and pool name none: the one holding the lease role",
        metavar="NAME", default_text="none, so the namespace's default")
    task_service_account_namespaces: tuple[str, ...] = flag(
        (), "only in this namespace (repeatable), where that ServiceAccount exists",
        name="--task-service-account-namespace", metavar="NAMESPACE", default_text="every one")
    min_schedule_interval: timedelta = flag(
        timedelta(), "least time between two fires of a TaskSchedule, e.g. 1m; a schedule that fires more often "
                     "makes no fire and says why", metavar="DURATION", parse=_duration,
        default_text=f"{durations.format(timedelta())}, any interval the API allows")
    lease_guard: str = flag(
        "cronoq-lease-guard", "the lease guard's ValidatingAdmissionPolicy, which the chart names: Workers pools "
                              "are served only while it is in force", metavar="NAME")
    trust_worker_leases: bool = flag(
        False, "serve Workers pools without the lease guard: any Lease writer can pose as a worker")
    queue_marks_from: int = flag(
        MARKS_FROM, "past this many tasks waiting in a pool, its status carries marks of its queue (taken at most "
                    "once a minute), and `cronoq describe` bounds a queued task's place by them instead of listing "
                    "the pool", metavar="N")
    archive: str | None = flag(
        None, "keep every ended attempt and finished task in this database: sqlite:///path (one replica) or "
              "postgresql://user@host/db (the password from $PGPASSWORD or a .pgpass); deletion of a finished task "
              "waits for its rows", metavar="URL", env="CRONOQ_ARCHIVE", default_text="none: no archive")
    archive_retention: timedelta = flag(
        timedelta(days=30), "delete archived rows this long after their attempt or task finished; 0s: keep them",
        metavar="DURATION", parse=_duration)
    archive_retention_success: timedelta | None = flag(
        None, "the same for successes (attempts that succeeded, tasks that did), e.g. 72h", metavar="DURATION",
        parse=_duration, default_text="--archive-retention")
    archive_wait: timedelta = flag(
        timedelta(minutes=10), "how long a finished task's deletion waits for an archive that cannot take its rows "
                               "(an Event ArchivePending says it waits); then it is deleted, with a Warning Event "
                               "DeletedUnarchived", metavar="DURATION", parse=_duration)
    notifications: bool = flag(
        False, "send the outcome notifications that pools' receivers (spec.notifications) ask for; reading their "
              "signing keys needs the right to get Secrets (the chart grants it with notifications.enabled)")
    log_level: LogLevel = flag("info", "how much the operator logs", choices=get_args(LogLevel), env="CRONOQ_LOG_LEVEL")
    epoch: int = 0
    """The epoch when there is no leader election (one replica): no flag, an election sets it."""

    @property
    def globs(self) -> bool:
        return any(set(ns) & set("*?[") for ns in self.namespaces)

    def watches(self, namespace: str) -> bool:
        return not self.namespaces or any(fnmatch.fnmatchcase(namespace, p) for p in self.namespaces)

    @property
    def task_pods(self) -> TaskServiceAccount:
        """The ServiceAccount of attempt pods that name none, and where: the two flags together."""
        return TaskServiceAccount(self.task_service_account, frozenset(self.task_service_account_namespaces))


def _shown(default: Any) -> str | None:
    """A default as the help says it; None when there is nothing to say (a switch that is off)."""
    if isinstance(default, bool):
        return "on" if default else None
    if isinstance(default, timedelta):
        return durations.format(default)
    return None if default is None else str(default)


def add_flags(parser: argparse.ArgumentParser) -> None:
    """A flag for every setting that has one: a switch for a bool (`--x/--no-x` when it is on by
    default), repeatable for a tuple, else one value of the default's type."""
    for setting in fields(Options):
        how: Flag | None = setting.metadata.get("flag")
        if how is None:
            continue
        assert setting.default is not MISSING, setting.name
        default = setting.default
        shown = how.default_text if how.default_text is not None else _shown(default)
        if how.env:
            shown = f"${how.env}, else {shown}"
            default = os.environ.get(how.env) or default
        kwargs: dict[str, Any] = {"dest": setting.name, "help": how.help if shown is None else f"{how.help} (default: {shown})"}
        if isinstance(default, bool):
            kwargs.update(action=argparse.BooleanOptionalAction if default else "store_true", default=default)
        elif isinstance(default, tuple):
            kwargs.update(action="append", default=list(default), type=how.parse or str)
        else:
            kwargs.update(default=default, type=how.parse or (str if default is None else type(default)))
        if how.metavar:
            kwargs["metavar"] = how.metavar
        if how.choices:
            kwargs["choices"] = how.choices
        names = [how.name or "--" + setting.name.replace("_", "-"), *([how.short] if how.short else [])]
        parser.add_argument(*names, **kwargs)


def from_flags(args: argparse.Namespace) -> Options:
    """The settings a parser made by `add_flags` read (a flag not given holds its default)."""
    given: dict[str, Any] = {}
    for setting in fields(Options):
        if "flag" in setting.metadata:
            value = getattr(args, setting.name)
            given[setting.name] = tuple(value) if isinstance(value, list) else value  # a repeatable flag's
    return Options(**given)
