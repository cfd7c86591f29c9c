"""Running one attempt of a task handler: heartbeats in the background, the handler in the
foreground, and the outcome left as the structured termination message plus an exit code."""
from __future__ import annotations

import asyncio
import inspect
import os
import signal
import sys
import threading
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterator, Mapping, NoReturn, TypeVar

from cronoq.pod_protocol import Env
from cronoq.pod_protocol import report
from cronoq.pod_protocol.inputs import Input
from cronoq.worker.checkpoints import CheckpointSlot
from cronoq.worker.env import AttemptEnv, InvalidEnvironment
from cronoq.worker.errors import Permanent, Retryable, describe
from cronoq.worker.lease import KubeLease, LeaseKeeper, Owner
from cronoq.pod_protocol.report import Report
from cronoq.worker.report import DEFAULT_PATH, encode_output, write

Handler = TypeVar("Handler", bound=Callable[..., Any])


@dataclass(frozen=True)
class Context:
    """What a handler knows about its attempt. (`id`, `attempt`) is the fencing token: use it to
    make side effects idempotent or to reject writes from an older attempt."""

    id: str
    """The task's uid."""
    name: str
    namespace: str
    attempt: int
    """1 for the first attempt; never repeats for a task."""
    payload: Any
    """The task's `spec.payload`, parsed JSON (None when it has none)."""
    lease_name: str
    lease_id: str
    lease_ttl: float
    """Seconds; 0 when heartbeats are off."""
    worker: str | None = None
    """The pull worker running it (`cronoq.worker.serve`); None in an attempt's own pod."""
    inputs: Mapping[str, Input] = field(default_factory=dict)
    """What the tasks it depends on produced, by name: each one's `phase` and `output` (JSON-parsed
    when it is JSON; None when it produced none, or `omitted` when it did not fit). Empty for a
    task without dependencies. See docs/inputs.md."""
    checkpoint_data: Any = None
    """The newest checkpoint an earlier attempt of the task saved (parsed JSON), to resume from;
    None when none did."""
    traceparent: str | None = None
    """The attempt span's W3C `traceparent` when the operator's tracing is on (TRACEPARENT), to
    parent the spans the handler makes (docs/how-to/tracing.md); None otherwise."""
    _keeper: LeaseKeeper | None = field(default=None, repr=False, compare=False)
    _aborted: threading.Event | None = field(default=None, repr=False, compare=False)
    _checkpoints: CheckpointSlot | None = field(default=None, repr=False, compare=False)

    def checkpoint(self, data: Any) -> bool:
        """Save progress (JSON of at most 4096 bytes; `CheckpointTooLarge`, a ValueError, if not) for
        the task's next attempt to resume from. It writes nothing itself: the next renewal of the
        attempt's Lease (within TTL/3) carries the newest checkpoint saved by then; call
        `heartbeat()` after it to send it now. False when heartbeats are off (leaseTTL 0): then
        there is no Lease to carry it and it is dropped."""
        if self._checkpoints is None:
            return False
        self._checkpoints.save(data)
        return True

    def heartbeat(self, timeout: float | None = None) -> bool:
        """Renew the attempt's lease now, besides the automatic renewals every TTL/3, and wait for
        it (at most `timeout` seconds, default the TTL). True when renewed; False when the renewal
        failed, heartbeats are off, or (served by a worker) the attempt was aborted. In an
        attempt's own pod, a lease that turns out lost self-fences the process: this never returns."""
        if self.aborted:
            return False
        return self._keeper.renew_now(timeout) if self._keeper is not None else False

    @property
    def aborted(self) -> bool:
        """Served by a worker: the attempt was aborted (timeout, cancellation, lease lost) and
        whatever the handler still returns is stale. A synchronous handler should check this
        between steps and return; a coroutine handler is cancelled instead."""
        return self._aborted is not None and self._aborted.is_set()


def run(handler: Callable[[Context], Any], *, environ: Mapping[str, str] | None = None) -> NoReturn:
    """Run `handler(context)` as this attempt, then exit the process:

    - it returns a value: success, the value is the output (a str as is, None as no output,
      anything else as JSON), exit 0;
    - it raises `Retryable(msg, retry_after=s)`, or any other exception: retryable (the
      exception's type and text are the message), exit 1;
    - it raises `Permanent(msg)`: permanent, exit 2 (also when the CRONOQ_* environment is
      unusable);
    - its lease is lost (another attempt holds it, it was deleted, or it could not be renewed
      for a whole TTL): the handler is stopped where it is, the message says the lease was
      lost (retryable), exit 3;
    - SIGTERM arrives (its pod is being deleted): `Terminated` is raised in the handler, whose
      `finally` blocks run; retryable, exit 1 (unless the program set a SIGTERM handler itself).

    The handler may be a coroutine function. `environ` defaults to `os.environ`. A handler that
    calls `sys.exit(n)` itself bypasses all this: no message is written, and the operator
    classifies the bare exit code (`retry.permanentExitCodes`).
    """
    sys.exit(attempt(handler, os.environ if environ is None else environ))


def task(handler: Handler) -> Handler:
    """Decorator: when the handler's module is the program being run (`python job.py`), run it
    as the attempt at once, so define it last in the module; imported, the function is left as is."""
    if getattr(handler, "__module__", None) == "__main__":
        run(handler)
    return handler


def attempt(handler: Callable[[Context], Any], environ: Mapping[str, str], *,
            judge: Callable[[Callable[[Context], Any], Context], Report] | None = None) -> int:
    """Run `handler` as `run()` does, but return the exit code instead of exiting. A lost lease
    still ends the process, with os._exit from the heartbeat thread: no cleanup runs, and no
    later line of the handler either, because a newer attempt may already be running.
    `judge` (default `outcome`) calls the handler and makes its Report: the push runner passes
    one that reports HTTP answers itself, and so shares heartbeats and reporting with the SDK."""
    try:
        env = AttemptEnv.from_environ(environ)
    except InvalidEnvironment as err:
        result = Report(report.PERMANENT, f"invalid attempt environment: {err}")
        write(result, environ.get(Env.TERMINATION_LOG) or DEFAULT_PATH)
        return result.exit_code

    ending = threading.Lock()  # whoever takes it writes the one termination message
    keeper = heartbeat = checkpoints = None
    if env.lease_ttl > 0:
        checkpoints = CheckpointSlot()
        lease = KubeLease(env.namespace, env.lease_name, env.lease_id, kubeconfig=env.kubeconfig,
                          owner=Owner(env.task_name, env.task_id, env.attempt), ttl=env.lease_ttl,
                          checkpoint=checkpoints.newest)
        keeper = LeaseKeeper(env.lease_ttl, lease.renew)

        def lost(why: str) -> None:
            if not ending.acquire(blocking=False):
                return  # the handler has ended and its outcome is being written
            result = Report(report.RETRYABLE, f"lease lost: {why}", reason=report.Reason.LEASE_LOST)
            write(result, env.termination_log)
            try:
                sys.stdout.flush()
            finally:
                os._exit(result.exit_code)

        heartbeat = keeper.start(lost)

    context = Context(id=env.task_id, name=env.task_name, namespace=env.namespace, attempt=env.attempt,
                      payload=env.payload, lease_name=env.lease_name, lease_id=env.lease_id,
                      lease_ttl=env.lease_ttl, inputs=env.inputs, checkpoint_data=env.checkpoint, _keeper=keeper,
                      _checkpoints=checkpoints, traceparent=env.traceparent)
    with _stopped_by_sigterm():
        try:
            result = (judge or outcome)(handler, context)
        except Terminated:  # the handler's or the push runner's (judge)
            result = Report(report.RETRYABLE, "terminated: SIGTERM (the pod is being deleted)")
    if keeper is not None and checkpoints is not None and result.outcome != report.SUCCESS \
            and checkpoints.newest() not in (None, lease.carried):
        keeper.renew_now()  # a failed attempt's newest checkpoint goes before it ends, for the retry
    ending.acquire()
    if keeper is not None:
        keeper.stop()
        # Let a renewal in flight finish: a daemon thread still inside the API client while the
        # interpreter finalizes can crash it (exit 139 after a success, seen in a container).
        heartbeat.join(timeout=max(env.lease_ttl, 1.0))
    write(result, env.termination_log)
    return result.exit_code


def outcome(handler: Callable[[Context], Any], context: Context, abort: Abort | None = None) -> Report:
    """Call the handler and say how that went: the one mapping from what a handler does to its
    report, for an attempt's pod (`attempt`) and a pull worker's attempts (`worker/attempts.py`).
    A coroutine handler runs by `asyncio.run`, or, given a pull worker's `abort`, on a loop that
    `abort` can cancel from another thread: then the attempt is retryable ("aborted: why");
    without `abort` a cancellation goes on up."""
    try:
        value = handler(context)
        if inspect.isawaitable(value):
            value = abort.run(value) if abort is not None else asyncio.run(_awaited(value))
        return Report(report.SUCCESS, output=encode_output(value))
    except Permanent as err:
        return Report(report.PERMANENT, err.message or describe(err))
    except Retryable as err:
        return Report(report.RETRYABLE, err.message or describe(err), retry_after=err.retry_after)
    except asyncio.CancelledError:
        if abort is None:
            raise
        return Report(report.RETRYABLE, f"aborted: {abort.why}")
    except Exception as err:
        traceback.print_exc()  # the operator keeps only the message; the log keeps the rest
        return Report(report.RETRYABLE, describe(err))


class Abort:
    """How a pull worker stops an attempt's handler from another thread (a thread cannot be
    stopped): `ctx.aborted` turns true (`event`), and a coroutine handler run by `run` is cancelled."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.why = ""
        self._cancel: Callable[[], Any] = lambda: None

    @property
    def aborted(self) -> bool:
        return self.event.is_set()

    def abort(self, why: str) -> bool:
        """Abort (once: False if it was already)."""
        if self.event.is_set():
            return False
        self.why = why
        self.event.set()
        self._cancel()
        return True

    def run(self, awaitable: Awaitable[Any]) -> Any:
        """Run a coroutine handler on a loop of its own, cancellable by `abort`."""
        loop = asyncio.new_event_loop()
        try:
            future = asyncio.ensure_future(awaitable, loop=loop)
            self._cancel = lambda: loop.call_soon_threadsafe(future.cancel)
            if self.event.is_set():
                future.cancel()
            return loop.run_until_complete(future)
        finally:
            self._cancel = lambda: None  # an abort after the handler ended has nothing to cancel
            loop.close()


class Terminated(BaseException):
    """SIGTERM arrived while the handler ran (its pod is being deleted: a timeout, a cancel, an
    eviction). Not an Exception, so a handler's `except Exception` lets it through, while its
    `finally` blocks and context managers still run."""


@contextmanager
def _stopped_by_sigterm() -> Iterator[None]:
    """SIGTERM raises Terminated in the handler while it runs. A container's PID 1 ignores every
    signal it has no handler for, so without one a deleted pod's handler ran on until the grace
    period ended in SIGKILL. A handler the program installed itself is left alone, and so is a
    handler run off the main thread (only the main thread may set one)."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def terminate(signum: int, frame: Any) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value
