"""`cronoq.worker.run`: the handler's result or exception becomes the termination message and
the exit code; the context carries the attempt's environment; heartbeats only with a TTL."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import cronoq.worker
from cronoq.worker import Context, Permanent, Retryable, run, task

HEARTBEAT_THREAD = "cronoq-heartbeat"
UNREACHABLE_KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: nowhere, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: nobody, user: {token: not-a-token}}]
contexts: [{name: nowhere, context: {cluster: nowhere, user: nobody}}]
current-context: nowhere
"""


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "termination-log"


def environ(log: Path, **extra: str) -> dict[str, str]:
    return {"CRONOQ_TASK_ID": "0c4f-uid", "CRONOQ_TASK_NAME": "report", "CRONOQ_ATTEMPT": "2",
            "CRONOQ_NAMESPACE": "jobs", "CRONOQ_LEASE_NAME": "report-a2", "CRONOQ_LEASE_ID": "e4-a2",
            "CRONOQ_LEASE_TTL": "0", "CRONOQ_PAYLOAD": '{"table": "t1", "n": [1, 2]}',
            "CRONOQ_TERMINATION_LOG": str(log), **extra}


def exit_code(handler, env: dict[str, str]) -> int:
    with pytest.raises(SystemExit) as ended:
        run(handler, environ=env)
    return ended.value.code


def message(log: Path) -> dict:
    data = log.read_bytes()
    assert len(data) <= 4096
    return json.loads(data)


def test_the_context_is_the_attempts_environment(log: Path) -> None:
    seen: list[Context] = []
    assert exit_code(seen.append, environ(log)) == 0
    (ctx,) = seen
    assert (ctx.id, ctx.name, ctx.namespace, ctx.attempt) == ("0c4f-uid", "report", "jobs", 2)
    assert ctx.payload == {"table": "t1", "n": [1, 2]}
    assert (ctx.lease_name, ctx.lease_id, ctx.lease_ttl) == ("report-a2", "e4-a2", 0.0)


def test_a_returned_value_is_the_output_and_exit_0(log: Path) -> None:
    assert exit_code(lambda ctx: {"rows": 3, "attempt": ctx.attempt}, environ(log)) == 0
    assert message(log) == {"outcome": "success", "message": "", "output": '{"rows":3,"attempt":2}'}


def test_a_returned_str_is_the_output_as_is(log: Path) -> None:
    assert exit_code(lambda ctx: "3 rows", environ(log)) == 0
    assert message(log)["output"] == "3 rows"


def test_returning_none_succeeds_without_output(log: Path) -> None:
    assert exit_code(lambda ctx: None, environ(log)) == 0
    assert message(log) == {"outcome": "success", "message": ""}


def test_a_huge_result_is_cut_to_fit(log: Path) -> None:
    assert exit_code(lambda ctx: ["ünïcödé 😀"] * 5000, environ(log)) == 0
    output = message(log)["output"]
    assert output.startswith('["ünïcödé 😀","ünïcödé 😀"') and output.endswith("…[truncated]")


def test_retryable_with_retry_after_exits_1(log: Path) -> None:
    def handler(ctx):
        raise Retryable("upstream busy", retry_after=5)

    assert exit_code(handler, environ(log)) == 1
    assert message(log) == {"outcome": "retryable", "message": "upstream busy", "retryAfterSeconds": 5}


def test_permanent_exits_2(log: Path) -> None:
    def handler(ctx):
        raise Permanent("table t1 does not exist")

    assert exit_code(handler, environ(log)) == 2
    assert message(log) == {"outcome": "permanent", "message": "table t1 does not exist"}


def test_any_other_exception_is_retryable_with_its_text(log: Path) -> None:
    def handler(ctx):
        return {}["missing"] if ctx.payload else None

    def other(ctx):
        raise ConnectionError("db down")

    assert exit_code(handler, environ(log)) == 1
    assert message(log) == {"outcome": "retryable", "message": "KeyError: 'missing'"}
    assert exit_code(other, environ(log)) == 1
    assert message(log) == {"outcome": "retryable", "message": "ConnectionError: db down"}


def test_an_exception_without_text_is_named(log: Path) -> None:
    def handler(ctx):
        raise Retryable()

    assert exit_code(handler, environ(log)) == 1
    assert message(log) == {"outcome": "retryable", "message": "Retryable"}


def test_a_result_json_cannot_encode_is_retryable(log: Path) -> None:
    loop: list = []
    loop.append(loop)
    assert exit_code(lambda ctx: loop, environ(log)) == 1
    assert message(log)["message"].startswith("ValueError: Circular reference")


def test_coroutine_handlers_are_awaited(log: Path) -> None:
    async def handler(ctx):
        await asyncio.sleep(0)
        return ctx.payload["table"]

    assert exit_code(handler, environ(log)) == 0
    assert message(log)["output"] == "t1"


def test_ttl_0_runs_no_heartbeat_thread(log: Path) -> None:
    threads: list[list[str]] = []

    def handler(ctx):
        threads.append([t.name for t in threading.enumerate()])
        return ctx.heartbeat()

    assert exit_code(handler, environ(log)) == 0
    assert HEARTBEAT_THREAD not in threads[0]
    assert message(log)["output"] == "false"  # heartbeat() renews nothing with heartbeats off


def test_a_ttl_runs_the_heartbeat_thread_while_the_handler_runs(log: Path, tmp_path: Path) -> None:
    """No cluster needed: the kubeconfig does not exist, so renewals fail (the handler is done
    long before the 60s TTL would fence)."""
    threads: list[list[str]] = []

    def handler(ctx):
        threads.append([t.name for t in threading.enumerate()])
        return ctx.heartbeat(timeout=10)

    env = environ(log, CRONOQ_LEASE_TTL="60", KUBECONFIG=str(tmp_path / "no-such-kubeconfig"))
    assert exit_code(handler, env) == 0
    assert HEARTBEAT_THREAD in threads[0]
    assert message(log)["output"] == "false"
    # Stopped and joined before the outcome is written and the process exits: a daemon thread
    # left inside the API client while the interpreter finalizes can crash it (exit 139).
    assert not [t for t in threading.enumerate() if t.name == HEARTBEAT_THREAD and t.is_alive()]


def test_an_unreachable_api_server_for_a_whole_ttl_fences_the_attempt(log: Path, tmp_path: Path) -> None:
    """Self-fencing by the clock: no renewal can succeed (nothing listens at the kubeconfig's
    server), so a TTL after start the process writes "lease lost" and exits 3, the handler
    stopped mid-sleep. No cluster involved."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(UNREACHABLE_KUBECONFIG)
    program = ("import time, cronoq.worker\n"
               "def handle(ctx):\n"
               "    time.sleep(60)\n"
               "    return 'finished'\n"
               "cronoq.worker.run(handle)\n")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60,
                          env=environ(log, CRONOQ_LEASE_TTL="1.5", KUBECONFIG=str(kubeconfig)))
    assert proc.returncode == 3, proc.stderr
    assert time.monotonic() - started < 30
    doc = message(log)
    assert doc["outcome"] == "retryable" and doc["reason"] == "LeaseLost"
    assert doc["message"].startswith("lease lost: no successful renewal for 1.5s (the lease TTL); last error: "
                                     "renewing the Lease jobs/report-a2: ")


def test_missing_variables_get_local_defaults(log: Path) -> None:
    seen: list[Context] = []
    assert exit_code(seen.append, {"CRONOQ_TERMINATION_LOG": str(log)}) == 0
    (ctx,) = seen
    assert (ctx.id, ctx.attempt, ctx.payload, ctx.lease_ttl, ctx.heartbeat()) == ("", 1, None, 0.0, False)


@pytest.mark.parametrize("bad, complaint", [
    ({"CRONOQ_ATTEMPT": "two"}, "CRONOQ_ATTEMPT is not a whole number"),
    ({"CRONOQ_ATTEMPT": "0"}, "CRONOQ_ATTEMPT must be at least 1"),
    ({"CRONOQ_PAYLOAD": "{nope"}, "CRONOQ_PAYLOAD is not JSON"),
    ({"CRONOQ_LEASE_TTL": "soon"}, "CRONOQ_LEASE_TTL is not a number"),
    ({"CRONOQ_LEASE_TTL": "-3"}, "CRONOQ_LEASE_TTL must be a finite number"),
    ({"CRONOQ_LEASE_TTL": "3", "CRONOQ_LEASE_ID": ""}, "CRONOQ_LEASE_ID is not set"),
])
def test_an_unusable_environment_is_permanent_and_the_handler_never_runs(log: Path, bad, complaint) -> None:
    ran: list[Context] = []
    assert exit_code(ran.append, environ(log, **bad)) == 2
    doc = message(log)
    assert ran == [] and doc["outcome"] == "permanent" and complaint in doc["message"]


def test_the_sdk_is_importable_without_the_kubernetes_client_loaded() -> None:
    """Handlers that never heartbeat pay nothing for the client; errors are where users look."""
    code = "import sys, cronoq.worker; assert 'kubernetes' not in sys.modules; print(cronoq.worker.Retryable)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "<class 'cronoq.worker.errors.Retryable'>"


def test_task_decorator_leaves_an_imported_handler_alone() -> None:
    def handler(ctx):
        return 1

    assert task(handler) is handler


def test_task_decorator_runs_the_handler_of_the_main_module(log: Path) -> None:
    program = ("import cronoq.worker\n"
               "@cronoq.worker.task\n"
               "def handle(ctx):\n"
               "    raise cronoq.worker.Permanent(f'attempt {ctx.attempt} of {ctx.name}')\n"
               "raise SystemExit(99)  # never reached: the decorator ran the attempt and exited\n")
    proc = subprocess.run([sys.executable, "-c", program], env=environ(log), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert message(log) == {"outcome": "permanent", "message": "attempt 2 of report"}
    assert "cronoq: attempt permanent: attempt 2 of report" in proc.stderr


def test_exit_codes_are_exported() -> None:
    assert (cronoq.worker.EXIT_SUCCESS, cronoq.worker.EXIT_RETRYABLE, cronoq.worker.EXIT_PERMANENT,
            cronoq.worker.EXIT_LEASE_LOST) == (0, 1, 2, 3)


def test_sigterm_stops_the_handler_its_finally_runs_and_the_attempt_says_so(log: Path) -> None:
    """A deleted pod's container gets SIGTERM; as PID 1 it would ignore it (no handler) and run on
    until SIGKILL. The SDK turns it into an exception the handler's `except Exception` lets through."""
    program = (
        "import sys, time\n"
        "from cronoq.worker import run\n"
        "def handler(ctx):\n"
        "    try:\n"
        "        try:\n"
        "            print('started', flush=True)\n"
        "            time.sleep(60)\n"
        "        except Exception:\n"
        "            print('swallowed', flush=True)\n"
        "    finally:\n"
        "        print('cleaned up', flush=True)\n"
        "run(handler)\n")
    proc = subprocess.Popen([sys.executable, "-c", program], env=environ(log), stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "started\n"
    proc.terminate()
    assert proc.wait(timeout=20) == 1
    assert proc.stdout.read() == "cleaned up\n"
    ended = message(log)
    assert ended["outcome"] == "retryable" and "SIGTERM" in ended["message"]
