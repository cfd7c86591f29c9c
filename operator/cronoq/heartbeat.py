"""`cronoq heartbeat`: the heartbeat sidecar, for task images without the cronoq SDK.

It runs as a native sidecar (an initContainer with `restartPolicy: Always`) in the attempt's
pod, with the same CRONOQ_* environment as the task container, and renews the attempt's Lease
every TTL/3 (the same `cronoq.worker.lease` loop the SDK uses) until SIGTERM, which the kubelet
sends once the task container has ended; it then exits 0 at once.

Self-fencing is the SDK's rule: when the Lease names another holder or is gone, or no renewal
succeeded for a whole TTL, it stops renewing and exits 3 (2 for an unusable environment).
Limitation: a sidecar cannot stop the task container, so that one runs on; the operator, seeing
no renewals, aborts the attempt (LeaseExpired) by deleting its Job. Meanwhile the kubelet
restarts the exited sidecar (restartPolicy Always), which fences again at its first renewal:
expect restarts (CrashLoopBackOff) of a fenced attempt's sidecar until its pod goes.
With CRONOQ_LEASE_TTL 0 it renews nothing and idles until SIGTERM (exiting would only get it
restarted).

Checkpoints: with CRONOQ_CHECKPOINT_FILE set (the operator sets it, on a volume the two containers
share), each renewal carries the JSON the task last wrote there when it changed, and SIGTERM sends
one last renewal when the file holds a checkpoint not carried yet (docs/how-to/checkpoints.md).
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Mapping, Sequence

from cronoq.worker.checkpoints import CheckpointFile
from cronoq.worker.env import AttemptEnv, InvalidEnvironment
from cronoq.worker.lease import MIN_REQUEST_TIMEOUT, KubeLease, LeaseKeeper, Owner
from cronoq.pod_protocol.report import EXIT_LEASE_LOST, EXIT_PERMANENT


def parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        prog="cronoq heartbeat",
        description="Renew the attempt's heartbeat Lease (from the CRONOQ_* environment) every TTL/3 "
                    "until SIGTERM. Exit 0 on SIGTERM, 3 when the lease is lost, 2 when the environment "
                    "is unusable.")


def main(argv: Sequence[str] | None = None, *, environ: Mapping[str, str] | None = None) -> int:
    parser().parse_args(argv)
    try:
        env = AttemptEnv.from_environ(os.environ if environ is None else environ)
    except InvalidEnvironment as err:
        print(f"cronoq heartbeat: {err}", file=sys.stderr)
        return EXIT_PERMANENT

    done = threading.Event()
    lost: list[str] = []
    previous = {sig: signal.signal(sig, lambda *_: done.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        if env.lease_ttl <= 0:
            print("cronoq heartbeat: CRONOQ_LEASE_TTL is 0, heartbeats are off; idling until SIGTERM",
                  file=sys.stderr, flush=True)
            _wait(done)
            return 0
        carried = CheckpointFile(env.checkpoint_file).newest if env.checkpoint_file else None
        lease = KubeLease(env.namespace, env.lease_name, env.lease_id, kubeconfig=env.kubeconfig,
                          owner=Owner(env.task_name, env.task_id, env.attempt), ttl=env.lease_ttl,
                          checkpoint=carried)
        keeper = LeaseKeeper(env.lease_ttl, lease.renew)
        print(f"cronoq heartbeat: renewing Lease {env.namespace}/{env.lease_name} as {env.lease_id} "
              f"every {env.lease_ttl / 3:g}s", file=sys.stderr, flush=True)
        # The loop runs on a daemon thread so that SIGTERM ends us at once, even mid-request.
        keeper.start(lambda why: (lost.append(why), done.set()))
        _wait(done)
        keeper.stop()
        if not lost and carried is not None and lease.held and carried() not in (None, lease.carried):
            # The task ended (or was killed) since the last renewal: its newest checkpoint still goes.
            lease.renew(max(MIN_REQUEST_TIMEOUT, min(env.lease_ttl, 5.0)))
        if lost:
            print(f"cronoq heartbeat: lease lost, stopped renewing: {lost[0]}", file=sys.stderr, flush=True)
            return EXIT_LEASE_LOST
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _wait(done: threading.Event) -> None:
    # Short timeouts keep the main thread returning to the interpreter, where signal handlers run.
    while not done.wait(0.5):
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
