"""Inputs from dependencies (docs/inputs.md): the encoding both sides share and its bound, the Job
that hands them over, the operator reading each output once without a write of its own, the SDK's
`ctx.inputs` and the push runner's default body."""
from __future__ import annotations

import asyncio
import copy
import io
import json
from datetime import timedelta
from pathlib import Path

import pytest
from cronoq.apiserver.errors import error_of
from rich.console import Console

from cronoq.cli import render
from cronoq.cli.dashboard import views
from cronoq.engine.jobs import HEARTBEAT_CONTAINER, build_job
from cronoq.pod_protocol import Env
from cronoq.pod_protocol.inputs import INPUTS_LIMIT, Input, encode_inputs, inputs_of, parse_inputs
from cronoq.push import request_from
from cronoq.worker import Context, run
from cronoq.worker.env import AttemptEnv, InvalidEnvironment
from cronoq.worker.serve import Worker
from cronoq.controller.workqueue import TaskWork

from tests.unit.builders import make_task
from tests.unit.fakes import World, pod, task


# ------------------------------------------------------------------ the encoding


def test_outputs_are_json_parsed_when_json_else_text_and_none_stays_none() -> None:
    inputs = inputs_of([("fetch", "Succeeded", '{"rows": 12}'), ("greet", "Succeeded", "hello, world"),
                        ("scan", "Failed", None), ("gone", None, None)])
    text = encode_inputs(inputs)
    assert json.loads(text) == {"fetch": {"phase": "Succeeded", "output": {"rows": 12}},
                                "greet": {"phase": "Succeeded", "output": "hello, world"},
                                "scan": {"phase": "Failed", "output": None},
                                "gone": {"phase": None, "output": None}}
    assert parse_inputs(text) == inputs
    assert list(parse_inputs(text)) == ["fetch", "greet", "scan", "gone"], "in dependsOn's order"


def test_past_the_bound_the_largest_outputs_are_left_out_and_marked_and_every_phase_stays() -> None:
    # 32 dependencies (dependsOn's most), each output 4096 control characters: 6 bytes each escaped.
    found = [(f"dep-{i:02d}", "Succeeded", json.dumps("\x01" * (4000 - i))) for i in range(32)]
    found[5] = ("small", "Succeeded", '"ok"')
    text = encode_inputs(inputs_of(found))
    assert len(text.encode()) <= INPUTS_LIMIT
    inputs = parse_inputs(text)
    assert len(inputs) == 32 and all(i.phase == "Succeeded" for i in inputs.values())
    omitted = [name for name, i in inputs.items() if i.omitted]
    assert omitted and all(inputs[name].output is None for name in omitted)
    assert "dep-00" in omitted, "the largest first"
    assert inputs["small"] == Input("Succeeded", "ok")
    kept = [name for name, i in inputs.items() if not i.omitted and name != "small"]
    assert kept and min(int(n[4:]) for n in kept) > max(int(n[4:]) for n in omitted if n.startswith("dep-"))


@pytest.mark.parametrize("text", ["[1]", "{not json", '{"a": 3}', '{"a": {"phase": 3}}'])
def test_an_unusable_inputs_variable_is_an_invalid_environment(text: str) -> None:
    with pytest.raises(InvalidEnvironment, match="CRONOQ_INPUTS"):
        AttemptEnv.from_environ({Env.INPUTS: text})


# ------------------------------------------------------------------ the operator


def finished(world: World, name: str, phase: str, output: str | None = None) -> None:
    raw = task(name)
    raw["status"] = {"phase": phase, "attempt": 1, "finishedAt": "2026-12-03T11:59:59Z",
                     **({"output": output, "outputAvailable": True} if output is not None else {})}
    world.writer.tasks[name] = copy.deepcopy(raw)
    world.controller.intake.on_task(None, raw)


def env_of(job: dict) -> dict[str, str | None]:
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container["env"]}


def test_a_dependents_job_carries_its_dependencies_outputs_each_read_once() -> None:
    async def scenario() -> None:
        world = World(concurrency=2)
        finished(world, "fetch", "Succeeded", '{"rows": 12}')
        finished(world, "scan", "Failed")
        world.submit("report", dependsOn=[{"task": "fetch"}, {"task": "scan", "on": "Complete"}])
        await world.settle()
        assert world.status("report")["phase"] == "Running"
        inputs = parse_inputs(env_of(world.writer.jobs["report-a1"])[Env.INPUTS])
        assert inputs == {"fetch": Input("Succeeded", {"rows": 12}), "scan": Input("Failed", None)}
        reads = [c for c in world.writer.calls if c[0] == "read"]
        assert reads == [("read", "fetch")], "only a dependency with an output is read, once"

        # Its retry hands over the same inputs, without reading again.
        world.controller.intake.on_pod(None, pod("report-a1", "report", 1))
        await world.settle()
        await world.clock.advance(120)
        world.controller.queue.add(TaskWork("unit", "report"))
        await world.settle()
        assert env_of(world.writer.jobs["report-a2"])[Env.INPUTS] == env_of(world.writer.jobs["report-a1"])[Env.INPUTS]
        assert [c for c in world.writer.calls if c[0] == "read"] == reads
    asyncio.run(scenario())


def test_a_task_without_dependencies_gets_no_inputs_and_the_inputs_cost_a_read_never_a_write() -> None:
    async def calls(depends: bool) -> tuple[list[tuple[str, str]], dict[str, str | None]]:
        world = World()
        if depends:
            finished(world, "fetch", "Succeeded", "42")
        world.submit("t", **({"dependsOn": [{"task": "fetch"}]} if depends else {}))
        await world.settle()
        world.controller.intake.on_pod(None, pod("t-a1", "t", 0))
        await world.settle()
        assert world.status("t")["phase"] == "Succeeded"
        return world.writer.calls, env_of(world.writer.jobs["t-a1"])
    plain, plain_env = asyncio.run(calls(False))
    dependent, dependent_env = asyncio.run(calls(True))
    assert Env.INPUTS not in plain_env and parse_inputs(dependent_env[Env.INPUTS] or "")["fetch"].output == 42
    assert plain == [("status", "t"), ("job", "t-a1"), ("status", "t"), ("event", "AttemptEnded")]
    # A dependent's one more status write (Queued, once its dependencies hold) predates the inputs.
    assert dependent == [("status", "t"), ("read", "fetch"), ("status", "t"), ("job", "t-a1"), ("status", "t"),
                         ("event", "AttemptEnded")]


def test_a_keyed_duplicates_output_is_its_originals() -> None:
    async def scenario() -> None:
        world = World()
        original = task("orig")
        original["spec"]["key"] = "k"
        original["status"] = {"phase": "Succeeded", "attempt": 1, "finishedAt": "2026-12-03T11:59:59Z",
                              "output": "[1, 2]", "outputAvailable": True}
        world.writer.tasks["orig"] = copy.deepcopy(original)
        world.controller.intake.on_task(None, original)
        world.submit("dup", key="k")
        await world.settle()
        assert world.status("dup")["duplicateOf"] == "orig"
        world.submit("after", dependsOn=[{"task": "dup"}])
        await world.settle()
        assert parse_inputs(env_of(world.writer.jobs["after-a1"])[Env.INPUTS]) == {"dup": Input("Succeeded", [1, 2])}
    asyncio.run(scenario())


# ------------------------------------------------------------------ the SDK and the push runner


def test_the_handler_reads_its_inputs_from_the_context(tmp_path: Path) -> None:
    seen: list[Context] = []
    environ = {Env.TERMINATION_LOG: str(tmp_path / "log"),
               Env.INPUTS: encode_inputs(inputs_of([("fetch", "Succeeded", '{"rows": 12}')]))}
    with pytest.raises(SystemExit) as ended:
        run(lambda ctx: seen.append(ctx) or ctx.inputs["fetch"].output["rows"] * 2, environ=environ)
    assert ended.value.code == 0
    assert json.loads((tmp_path / "log").read_text())["output"] == "24"
    assert seen[0].inputs["fetch"].phase == "Succeeded"


def test_without_dependencies_the_context_has_no_inputs() -> None:
    assert AttemptEnv.from_environ({}).inputs == {}


def test_a_push_task_with_dependencies_sends_payload_and_inputs_as_its_default_body() -> None:
    http = json.dumps({"url": "https://example.com/hook", "method": "POST", "headers": [], "timeout": 5})
    inputs = inputs_of([("fetch", "Succeeded", '{"rows": 12}')])
    ctx = Context(id="uid", name="n", namespace="ns", attempt=1, payload={"a": 1}, lease_name="", lease_id="",
                  lease_ttl=0, inputs=inputs)
    request = request_from({Env.HTTP: http}, ctx)
    assert json.loads(request.body) == {"payload": {"a": 1}, "inputs": {"fetch": {"phase": "Succeeded",
                                                                                   "output": {"rows": 12}}}}
    without = request_from({Env.HTTP: http}, Context(id="uid", name="n", namespace="ns", attempt=1, payload={"a": 1},
                                                    lease_name="", lease_id="", lease_ttl=0))
    assert json.loads(without.body) == {"a": 1}, "a task without dependencies: the payload, as before"


def test_the_heartbeat_sidecar_never_gets_the_inputs() -> None:
    text = encode_inputs(inputs_of([("fetch", "Succeeded", "42")]))
    job = build_job(make_task("t").spec(dependsOn=[{"task": "fetch"}]).obj(), None, 1, "e1-a1",
                    lease_ttl=timedelta(seconds=30), sidecar_image="cronoq:1", inputs=text)
    spec = job["spec"]["template"]["spec"]
    assert {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}[Env.INPUTS] == text
    (sidecar,) = [c for c in spec["initContainers"] if c["name"] == HEARTBEAT_CONTAINER]
    assert Env.INPUTS not in {e["name"] for e in sidecar["env"]}


def test_cronoq_tree_shows_the_value_each_dependency_passes_on() -> None:
    tasks = {
        "fetch": make_task("fetch").status({"phase": "Succeeded", "attempt": 1, "output": '{"rows":\n 12}',
                                            "outputAvailable": True}).obj(),
        "scan": make_task("scan").status({"phase": "Failed", "attempt": 1}).obj(),
        "big": make_task("big").status({"phase": "Succeeded", "attempt": 1, "output": "x" * 500,
                                        "outputAvailable": True}).obj(),
        "report": make_task("report").spec(dependsOn=[{"task": "fetch"}, {"task": "scan", "on": "Complete"},
                                                      {"task": "big"}]).obj(),
    }
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(render.dependency_tree("report", tasks))
    lines = [line.strip("│├└─ ") for line in console.export_text().splitlines()]
    assert lines[1].split() == ["fetch", "Succeeded", "→", '{"rows":', "12}"]
    assert lines[2].split() == ["scan", "Failed", "(on", "Complete)"], "no output: nothing passed on"
    assert lines[3].endswith("x" * (render.PASSED_WIDTH - 1) + "…")
    assert "→" not in lines[0], "the root passes nothing on"


def test_the_dashboards_graph_labels_each_edge_with_the_value_passed_along_it() -> None:
    fetch = make_task("fetch").status({"phase": "Succeeded", "attempt": 1, "output": '{"rows": 12}',
                                       "outputAvailable": True}).obj()
    scan = make_task("scan").status({"phase": "Skipped"}).obj()
    report = make_task("report").spec(dependsOn=[{"task": "fetch"}, {"task": "scan", "on": "Complete"}]).obj()
    edges = {e["data"]["source"]: e["data"] for e in views.graph(report, [fetch, scan, report]) if "source" in e["data"]}
    assert (edges["fetch"]["passed"], edges["fetch"]["label"]) == ('{"rows": 12}', 'Success\n{"rows": 12}')
    assert (edges["scan"]["passed"], edges["scan"]["label"]) == (None, "Complete")


class Tasks:
    """The custom objects API a pull worker reads its attempt's dependencies from."""

    def __init__(self, tasks: dict[str, dict]) -> None:
        self.tasks = tasks
        self.reads: list[str] = []

    def get_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, name: str,
                                     _request_timeout: float = 0) -> dict:
        assert plural == "tasks"
        self.reads.append(name)
        if name not in self.tasks:
            raise error_of(404, "Not Found")
        return {"metadata": {"name": name}, "status": self.tasks[name]}


def test_a_pull_worker_hands_its_handler_the_same_inputs_a_pod_gets() -> None:
    api = Tasks({"extract": {"phase": "Succeeded", "output": '{"rows": 12}', "outputAvailable": True},
                 "scan": {"phase": "Skipped"}})
    worker = Worker("p", lambda ctx: None, concurrency=1, namespace="jobs", name="w-1", ttl=1.0, grace=1.0,
                    kubeconfig=None, coordination=object(), custom=api)
    inputs = worker.attempts.inputs(("extract", "scan", "gone"))
    assert inputs == {"extract": Input("Succeeded", {"rows": 12}), "scan": Input("Skipped"), "gone": Input(None)}
    assert inputs == parse_inputs(encode_inputs(inputs_of([("extract", "Succeeded", '{"rows": 12}'),
                                                           ("scan", "Skipped", None), ("gone", None, None)])))
    assert api.reads == ["extract", "scan", "gone"]
