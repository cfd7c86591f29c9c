"""The cronoq worker SDK: what a task container runs.

    import cronoq.worker

    def handle(ctx: cronoq.worker.Context):
        rows = load(ctx.payload["table"])            # ctx.id, ctx.attempt: the fencing token
        if not rows:
            raise cronoq.worker.Retryable("table not ready", retry_after=30)
        return {"rows": len(rows)}                   # the task's output (JSON)

    cronoq.worker.run(handle)

`run()` renews the attempt's heartbeat Lease every TTL/3 on a background thread, calls the
handler, writes the structured termination message and exits: 0 success, 1 retryable
(`Retryable` or any other exception; SIGTERM interrupts the handler with `Terminated`), 2
permanent (`Permanent`), 3 lease lost (self-fenced).
`@cronoq.worker.task` does the same for a handler defined last in the program's main module.

`ctx.checkpoint(data)` saves progress (JSON, at most 4096 bytes) that the task's next attempt starts
from as `ctx.checkpoint_data` (docs/how-to/checkpoints.md).

`serve(pool, handler, concurrency=N)` is the other way to run work: a long-running worker that
serves a pool with `delivery: Workers`, with no pod per attempt (worker/serve.py).
"""
from cronoq.worker.errors import Permanent, Retryable
from cronoq.pod_protocol.checkpoint import CheckpointTooLarge
from cronoq.pod_protocol.report import EXIT_LEASE_LOST, EXIT_PERMANENT, EXIT_RETRYABLE, EXIT_SUCCESS
from cronoq.worker.runner import Context, Terminated, run, task
from cronoq.pod_protocol.inputs import Input
from cronoq.worker.serve import serve

__all__ = ["CheckpointTooLarge", "Context", "Input", "Permanent", "Retryable", "Terminated", "run", "serve",
           "task", "EXIT_SUCCESS", "EXIT_RETRYABLE", "EXIT_PERMANENT", "EXIT_LEASE_LOST"]
