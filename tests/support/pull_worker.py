"""A pull worker for the tests, run as its own process: `python -m tests.support.pull_worker POOL
NAME JOURNAL [CONCURRENCY [TTL [GRACE]]]` (namespace and credentials from CRONOQ_NAMESPACE and KUBECONFIG).

Its handler does what the task's payload says — `{"sleep": s, "fail": "retryable"|"permanent",
"deaf": true, "inputs": true, "checkpoint": true, "until": path, "span": name}` (`inputs` returns `ctx.inputs`; `checkpoint`:
attempt 1 saves a checkpoint and fails, a later one returns the checkpoint it started from; `until`: it returns
once the file `path` exists; `span`: it makes an OpenTelemetry span of that name, child of `ctx.traceparent`,
exported over OTLP as the worker's OTEL_* environment says, and returns the traceparent it was given) — and writes a line to
JOURNAL (JSON) when an attempt starts and when it ends
(`how`: returned, raised, cancelled, abandoned), so a test can tell what ran where and when.
A coroutine handler serves the tasks labelled `cronoq.io/handler: async`, a synchronous one the
rest; a `deaf` synchronous handler ignores `ctx.aborted` and returns when its time is up.
"""
from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time

import cronoq.worker
from cronoq.worker import Context

_journal_lock = threading.Lock()


def journal(path: str, ctx: Context, event: str, **more) -> None:
    line = {"event": event, "task": ctx.name, "attempt": ctx.attempt, "worker": ctx.worker, "t": time.time(), **more}
    with _journal_lock, open(path, "a") as f:
        f.write(json.dumps(line) + "\n")


def traced(ctx: Context, name: str) -> dict:
    """A span of the handler's own, as user code makes one: a child of the attempt's span
    (ctx.traceparent), exported before the handler returns."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    provider = TracerProvider(resource=Resource.create({}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
    parent = TraceContextTextMapPropagator().extract({"traceparent": ctx.traceparent or ""})
    with provider.get_tracer("test-worker").start_as_current_span(name, context=parent) as span:
        span.set_attribute("handler.task", ctx.name)
    provider.shutdown()
    return {"traceparent": ctx.traceparent}


def main() -> int:
    pool, name, path = sys.argv[1:4]
    concurrency = int(sys.argv[4]) if len(sys.argv) > 4 else 4
    ttl = float(sys.argv[5]) if len(sys.argv) > 5 else 3.0
    grace = float(sys.argv[6]) if len(sys.argv) > 6 else 30.0

    def sync(ctx: Context):
        payload = ctx.payload or {}
        journal(path, ctx, "start")
        if payload.get("checkpoint"):
            if ctx.attempt == 1:
                ctx.checkpoint({"savedBy": ctx.attempt})
                raise cronoq.worker.Retryable("failed after saving a checkpoint", retry_after=0)
            return {"echo": payload.get("echo"), "resumed": ctx.checkpoint_data}
        if payload.get("span"):
            done = traced(ctx, payload["span"])
            journal(path, ctx, "end", how="returned")
            return done
        until = time.monotonic() + float(payload.get("sleep", 0))
        released = (lambda: os.path.exists(payload["until"])) if payload.get("until") else \
            (lambda: time.monotonic() >= until)
        while not released():
            if ctx.aborted and not payload.get("deaf"):
                journal(path, ctx, "end", how="abandoned")
                return "abandoned"
            time.sleep(0.05)
        journal(path, ctx, "end", how="raised" if payload.get("fail") else "returned")
        if payload.get("fail") == "permanent":
            raise cronoq.worker.Permanent("told to fail")
        if payload.get("fail") == "retryable":
            raise cronoq.worker.Retryable("told to fail", retry_after=0)
        if payload.get("inputs"):
            return {name: {"phase": i.phase, "output": i.output} for name, i in ctx.inputs.items()}
        return {"echo": payload.get("echo"), "by": ctx.worker}

    async def coroutine(ctx: Context):
        journal(path, ctx, "start")
        try:
            await asyncio.sleep(float((ctx.payload or {}).get("sleep", 0)))
        except asyncio.CancelledError:
            journal(path, ctx, "end", how="cancelled")
            raise
        journal(path, ctx, "end", how="returned")
        return "slept"

    return cronoq.worker.serve(pool, {"": sync, "async": coroutine}, concurrency=concurrency, name=name, ttl=ttl,
                                grace=grace, metrics_addr="127.0.0.1")  # a port, when CRONOQ_WORKER_METRICS_PORT says


if __name__ == "__main__":
    sys.exit(main())
