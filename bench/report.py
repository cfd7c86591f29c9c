"""A run's results as files: JSON (everything), Markdown (what a reader needs) and the chart."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench import fourway, ranges
from bench.ranges import MIB

COMPONENT_NAMES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


def write(results: dict[str, Any], into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    (into / "latest.json").write_text(json.dumps(results, indent=1, default=str))  # git keeps the earlier ones
    (into / "latest.md").write_text(markdown(results))
    try:
        from bench.chart import draw, draw_soak
        draw(results, into / "latest.png")
        if any(f.system in ("kueue", "argo") for f in fourway.table(results)):
            from bench.chart import draw_peers
            draw_peers(results, into / "latest-peers.png")
        if results.get("soak"):
            draw_soak(results, into / "latest-soak.png")
    except ImportError as err:  # matplotlib is in the bench extra; the numbers matter more
        print(f"bench: no chart ({err})")


def _s(v: float | None, unit: str = "s", digits: int = 2) -> str:
    return "–" if v is None else f"{v:.{digits}f}{unit}"


def _pcts(summary: dict[str, Any]) -> str:
    return " / ".join(_s(summary.get(k)) for k in ("p50", "p95", "p99"))


def _head(*columns: str) -> list[str]:
    """A Markdown table's first two lines."""
    return ["|" + "".join(f" {c} |" if c else " |" for c in columns), "|" + "---|" * len(columns)]


def _row(*cells: Any) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def markdown(r: dict[str, Any]) -> str:
    m = r["machine"]
    la0, la1 = m.get("load_average_start", ()), m.get("load_average_end", ())
    out = ["# cronoq benchmark results", "",
           f"Run {r['started']} → {r.get('finished', '(running)')}; operator {r['operator_source']}.", "",
           f"Machine: {m['nproc']} CPUs ({m['cpu']}), {m['mem_total_kib'] / 2**20:.1f} GiB RAM, kernel {m['kernel']}, "
           f"Python {m['python']}. Load average (1/5/15 min) at start {_la(la0)}, at end {_la(la1)}. "
           "The machine is shared with other test runs, and every component (API server, etcd, controller-manager, "
           "scheduler, kwok, operator, load generator) runs on it.", "",
           *([f"Merged from {r['merged']}.", ""] if r.get("merged") else []),
           "Pods succeed as soon as they start (kwok, `kwok.cronoq.io/delay: 0s`). Latencies run from the create "
           "request being sent to the first watch event showing the milestone. Times in seconds.", "",
           "## Ranges (bench/ranges.yaml)", "", *ranges.table(ranges.check(r)), "", *_peers(r), *_bursts(r),
           *_pull(r), *_onoff(r), *_idle(idle_runs(r)), *(_soak(r["soak"]) if r.get("soak") else [])]
    bl = r.get("backlog")
    if bl:
        out += [f"## Backlog: {bl['n']} Tasks behind a pool of concurrency {bl['concurrency']}", "",
                f"Drained in {_s(bl['drain_seconds'], 's', 1)} ({_s(bl['drain_rate'], ' tasks/s', 1)}); dispatch "
                f"latency of the backlog's tasks p50/p95/p99 {_pcts(bl['backlog_dispatch'])}.", "",
                *_head("high-priority probe", "submitted with waiting", "finished before", "create → Job created"),
                *(_row(p["name"], p["waiting_before"], p["finished_before"], _s(p["dispatch_seconds"]))
                  for p in bl["probes"]), ""]
    out += _deep(r.get("deep"))
    fair = r.get("fairness")
    if fair:
        g = fair["grouped"]
        out += [f"## Fair shares: tenant A's {g['a_tasks']} Tasks, then tenant B's {g['b_tasks']}, on a pool of "
                f"concurrency {g['concurrency']}", "",
                *_head("run", "B's last task finished after B was submitted", "A drained in"),
                *(_row(label, _s(run["b_last_finished_seconds"]), _s(run["a_drained_seconds"])) for label, run in (
                    ("groups (A and B name their group)", g), ("no groups", fair["ungrouped"]),
                    ("B alone on an empty pool", fair["alone"]))), ""]
    out += _gaming(r.get("gaming"))
    fo = r.get("failover")
    if fo:
        out += ["## Failover", "", *([f"Error: {fo['error']}.", ""] if fo.get("error") else [
            *_head("round", "signal to the leader", "→ leader metric on the standby", "→ first Job by the new leader"),
            *(_row(x["round"], x.get("signal", "SIGKILL"), _s(x["seconds_to_leader_metric"], "s", 1),
                   _s(x["seconds_to_first_job"], "s", 1)) for x in fo["rounds"]), ""])]
    if r.get("kopf_ab"):
        from bench.kopf_ab import table
        out += ["## The operator's watches beside kopf's", "", table(r["kopf_ab"]), ""]
    out += ["Raw numbers: `latest.json`; charts: `latest.png`" + (", `latest-soak.png`" if r.get("soak") else "") +
            "; analysis: `bench/README.md`.", ""]
    return "\n".join(out)


def _bursts(r: dict[str, Any]) -> list[str]:
    """Bare Jobs and cronoq's bursts: throughput, the machine's CPU, latency, the operator's requests and cost."""
    rows = [row for row in r.get("throughput", []) if row.get("baseline") or row.get("cronoq")]
    if not rows:
        return []
    out = ["## Throughput (apply → Succeeded)", "",
           *_head("N", "bare Jobs / s", "cronoq tasks / s", "ratio", "load avg before → after (cronoq)")]
    for row in rows:
        b, c = row.get("baseline") or {}, row.get("cronoq") or {}
        ratio = c["throughput"] / b["throughput"] if b.get("throughput") and c.get("throughput") else None
        la = c.get("load_average", {})
        out.append(_row(row["n"], _s(b.get("throughput"), "", 1), _s(c.get("throughput"), "", 1), _s(ratio, "×"),
                        f"{_la(la.get('before', ()))} → {_la(la.get('after', ()))}"))
    out += ["", "## CPU seconds spent during each run, by process", "",
            "What the machine's cores did while the run lasted (the operator's own CPU is in the next sections).", "",
            *_head("Run", "N", "wall s", *COMPONENT_NAMES, "operator")]
    for row in rows:
        for label, run in (("bare Jobs", row.get("baseline")), ("cronoq", row.get("cronoq"))):
            if run and run.get("cluster_cpu_seconds"):
                wall = run["n"] / run["throughput"] if run.get("throughput") else None
                out.append(_row(label, run["n"], _s(wall, "", 0), *(_s(run["cluster_cpu_seconds"].get(c), "", 0)
                                                                  for c in COMPONENT_NAMES),
                                _s((run.get("operator") or {}).get("cpu_seconds"), "", 0)))
    out += ["", "## Latency (p50 / p95 / p99)", "", *_head("Run", "N", "rate", "create → Job created", "create → Succeeded")]
    for row in rows:
        if row.get("baseline"):
            b = row["baseline"]
            out.append(_row("bare Jobs, burst", b["n"], f"{b['submit_rate']:.0f}/s", "(is the create)",
                            _pcts(b["latency"]["to_succeeded"])))
        if row.get("cronoq"):
            c = row["cronoq"]
            out.append(_row("cronoq, burst", c["n"], f"{c['submit_rate']:.0f}/s", _pcts(c["latency"]["to_job"]),
                            _pcts(c["latency"]["to_succeeded"])))
    out += [_row("cronoq, paced at half max", p["n"], f"{p['paced_rate']:.1f}/s", _pcts(p["latency"]["to_job"]),
                 _pcts(p["latency"]["to_succeeded"])) for p in _cronoq_paced(r)]
    out.append("")
    burst = [row["cronoq"] for row in rows if row.get("cronoq")]
    if not burst:
        return out
    c, lean = burst[-1], r.get("lean")
    a = c["api"]
    out += [f"## API requests by the operator (N={c['n']}, every task succeeding on attempt "
            f"{'1' if c['succeeded_first_attempt'] == c['n'] else '1 or later'})", "",
            f"{a['writes_per_task']:.2f} writes and {a['requests_per_task']:.2f} requests per task "
            f"({a['writes']} writes, {a['failed_writes']} of them refused). From the audit log, user "
            "`system:serviceaccount:cronoq-bench-system:cronoq-bench`.", "",
            *_head("verb", "resource", "client", "count", "per task", "response codes"),
            *(_row("**" + t["verb"] + "**" if t["write"] else t["verb"], t["resource"], t["agent"], t["count"],
                   f"{t['per_task']:.3f}", ", ".join(f"{k}: {v}" for k, v in sorted(t["codes"].items())))
              for t in a["table"]), "",
            *([f"Lean run (N={lean['n']}, pool `leaseTTL: 0s`, operator `--events=warnings`): "
               f"{lean['api']['writes_per_task']:.2f} writes per task: " + _writes(lean) + ".", ""] if lean else []),
            "## Operator CPU and memory", "", *_head("Run", "N", "CPU s / task", "CPU s total", "RSS peak", "RSS after")]
    backlog = [{**r["backlog"], "label": "backlog"}] if r.get("backlog") else []
    for c in burst + _cronoq_paced(r) + backlog:
        o = c["operator"]
        out.append(_row(c["label"], c["n"], f"{o['cpu_seconds_per_task'] * 1000:.1f} ms", f"{o['cpu_seconds']:.1f}",
                        f"{o['rss_peak'] / MIB:.0f} MiB", f"{o['rss_after'] / MIB:.0f} MiB"))
    return out + [""]


def _rate_and_times(run: dict[str, Any], start: str | None) -> list[str]:
    """Items per second, and create → start (`start`: a latency's key, none: —) and → Succeeded p50 / p99."""
    lat = run["latency"]
    return [_s(run.get("throughput"), "", 1), *(f"{_s(lat[k]['p50'], '', 3)} / {_s(lat[k]['p99'], '', 3)}"
                                               if k and lat.get(k) else "—" for k in (start, "to_succeeded"))]


def _writes(run: dict[str, Any]) -> str:
    """A run's writes per task, by verb and resource."""
    return ", ".join(f"{t['verb']} {t['resource']} {t['per_task']:.3f}" for t in run["api"]["table"] if t["write"])


def _idle(runs: list[dict[str, Any]]) -> list[str]:
    """The idle measurements: a table by size when there are several, then each one's paragraph."""
    out = []
    if len(runs) > 1:
        out += ["## Idle with finished Tasks present, by size", "",
                *_head("finished Tasks", "with Jobs, pods", "filled in", "start → /readyz", "start → leading",
                       "quiet after", "RSS peak while starting", "RSS idle", "per task", "idle CPU", "idle requests")]
        for idle in runs:
            f, jobs = idle.get("fill") or {}, idle.get("jobs_present")
            out.append(_row(f"{idle['tasks_present']:,}", "all" if jobs is None else f"{jobs:,}",
                            f"{f['made']:,} in {f['seconds']:.0f}s ({f['tasks_per_second']:.1f}/s)" if f.get("seconds")
                            else "–", f"{idle['startup_seconds']:.1f}s", _s(idle.get("listed_seconds"), "s", 1),
                            _s(idle.get("settled_seconds"), "s", 0), f"{idle.get('rss_peak_startup', 0) / MIB:.0f} MiB",
                            f"{idle['rss_idle'] / MIB:.0f} MiB", f"{idle['rss_bytes_per_task'] / 1024:.1f} KiB",
                            f"{idle['idle_cpu_fraction'] * 100:.1f}%",
                            f"{idle['idle_requests']} ({idle['idle_writes']} writes)"))
        out.append("")
    for idle in runs:
        out += [f"## Idle with {idle['tasks_present']:,} finished Tasks present", "",
                f"A fresh operator over {idle['tasks_present']} finished Tasks "
                f"({', '.join(f'{k}: {v}' for k, v in idle['by_namespace'].items() if v)}): /readyz after "
                f"{idle['startup_seconds']:.1f}s, initial listing done (`cronoq_leader` 1) after "
                f"{_s(idle.get('listed_seconds'), 's', 1)}, CPU quiet (< 5% of a core) after "
                f"{_s(idle.get('settled_seconds'), 's', 0)} and {idle.get('cpu_seconds_to_settle', 0):.0f} CPU s; "
                f"RSS peak while starting {idle.get('rss_peak_startup', 0) / MIB:.0f} MiB. "
                f"Then, over {idle['idle_seconds']:.0f}s idle: RSS {idle['rss_idle'] / MIB:.0f} MiB "
                f"({idle['rss_bytes_per_task'] / 1024:.1f} KiB per task, interpreter included), CPU "
                f"{idle['idle_cpu_fraction'] * 100:.1f}% of a core, {idle['idle_requests']} requests "
                f"({idle['idle_writes']} writes)." + _timeline(idle) + _fill(idle), "",
                *([f"_{idle['note']}_", ""] if idle.get("note") else [])]
    return out


def idle_runs(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The idle measurements, one per size (older results hold a single one)."""
    idle = results.get("idle")
    return [] if not idle else [idle] if isinstance(idle, dict) else list(idle)


def _gaming(gaming: dict[str, Any] | None) -> list[str]:
    """The gaming tenant's share of the starts, in the default order and sharing by submitter."""
    if not gaming:
        return []
    d = gaming["default"]
    out = [f"## A gaming tenant: A's {d['a_tasks']} Tasks over 60 group names at priority 1000, then B's "
           f"{d['b_tasks']} honest ones, on a pool of concurrency {d['concurrency']}", "",
           *_head("order", "A's share of the starts while B waited", "B's last task finished after B was submitted")]
    for label, run in (("default (no fairShare)", d), ("fairShare by submitter", gaming["shares"])):
        share = f"{run['gamer_share']:.2f}" if run["gamer_share"] is not None else "-"
        out.append(_row(label, share, _s(run["b_last_finished_seconds"])))
    return [*out, ""]


def _deep(d: dict[str, Any] | None) -> list[str]:
    """The deep queue (bench/deep.py)."""
    if not d or d.get("error"):
        return [f"## Deep queue: {d['error']}", ""] if d else []
    mib = 2**20
    held, before, fo = d["rss_held"], d["rss_before"], d["failover"]
    api = f"{before['apiserver'] / mib:.0f} → {held['apiserver'] / mib:.0f} MiB" if held.get("apiserver") else "–"
    rows = [("submitted", f"{d['n']} Tasks of ~{d['spec_bytes'] / 1024:.1f} KiB of spec at {d['submit_rate']:.0f}/s "
                          f"({d['submit_errors']} errors)"),
            ("leader RSS", f"{before['leader'] / mib:.0f} → {held['leader'] / mib:.0f} MiB: "
                           f"**{d['leader_kib_per_queued_task']:.2f} KiB per queued task**"),
            ("standby RSS", f"{before['standby'] / mib:.0f} → {held['standby'] / mib:.0f} MiB"),
            ("API server RSS", api),
            ("etcd database", f"{held['etcd_db'] / mib:.0f} MiB" if held.get("etcd_db") else "–"),
            ("SIGKILL → the standby leads", _s(fo["led_seconds"])),
            ("SIGKILL → its first Job", f"{_s(fo['first_job_seconds'])} (Lease {d['lease_seconds']:.0f} s)"),
            ("urgent task → its Job", _s(d["urgent_dispatch_seconds"])),
            (f"drain at concurrency {d['concurrency']}", f"{d['drained_tasks']} finished in "
                                                          f"{_s(d['drain_seconds'], 's', 0)}, "
                                                          f"{_s(d['drain_rate'], ' tasks/s', 1)}"),
            ("operator CPU per task (drain)", _s((d["operator_cpu_seconds_per_task"] or 0) * 1000, " ms", 1))]
    if d.get("takeover"):  # since the run of 2026-12-07
        take, steady = d["takeover"], d["steady_drain"]
        rows += [("takeover (its backlog of decisions worked down)",
                  f"{_s(take['seconds'], 's', 0)}, {_s(take['cpu_seconds'], ' s', 1)} of CPU "
                  f"({take['cpu_seconds'] / d['n'] * 1000:.2f} ms per queued task), {take['tasks_finished']} finished"),
                 ("operator CPU per task (steady drain)",
                  f"{_s((steady['cpu_seconds_per_task'] or 0) * 1000, ' ms', 1)} over {steady['tasks']} tasks "
                  f"in {_s(steady['seconds'], 's', 0)}")]
    return [f"## Deep queue: {d['n']} Tasks behind a paused pool, two replicas", "", *_head("", ""),
            *(_row(k, v) for k, v in rows), ""]


def _pull(r: dict[str, Any]) -> list[str]:
    """Pull delivery beside Job-mode cronoq and bare Jobs of the same run and N."""
    rows = [row for row in r.get("throughput", []) if row.get("pull") or row.get("pull_sweep")]
    if not rows:
        return []
    out = ["## Pull delivery (`delivery: Workers`) beside Job mode and bare Jobs", "",
           "Warm workers (`cronoq.worker.serve`, their handler returns at once) run the tasks: no Job, no pod. "
           "Writes per task count the operator's and the workers' requests together (the workers run with the "
           "operator's credentials); the workers' own Lease renewals are set apart. API-server CPU per item is the "
           "kube-apiserver's CPU seconds during the run over N.", "",
           *_head("N", "mode", "items / s", "create → handler (or Job) p50 / p99", "create → Succeeded p50 / p99",
                  "writes / item", "API-server CPU ms / item", "etcd CPU ms / item", "operator CPU ms / item",
                  "workers CPU ms / item", "first-attempt successes")]
    for row in rows:
        sweep = [(f"cronoq, Workers, {s['workers']} × {s['worker_concurrency']}", s, "to_handler")
                 for s in row.get("pull_sweep", [])]
        for mode, run, start_key in (("bare Jobs", row.get("baseline"), None), ("cronoq, Job", row.get("cronoq"), "to_job"),
                                     ("cronoq, Workers", row.get("pull"), "to_handler"),
                                     ("cronoq, Workers, `--events=warnings`", row.get("pull_lean"), "to_handler"),
                                     *sweep):
            if run:
                cpu, n = run.get("cluster_cpu_seconds") or {}, run["n"]
                per = [v / n * 1000 if v is not None else None for v in (
                    cpu.get("kube-apiserver"), cpu.get("etcd"), (run.get("operator") or {}).get("cpu_seconds"))]
                workers = run["workers_cpu_seconds_per_task"] * 1000 if "workers_cpu_seconds_per_task" in run else None
                out.append(_row(n, mode, *_rate_and_times(run, start_key),
                                _s((run.get("api") or {}).get("writes_per_task"), "", 2) if run.get("api") else "—",
                                *(_s(v, "", 1) if v is not None else "—" for v in (*per, workers)),
                                f"{run.get('succeeded_first_attempt', run.get('completed'))}/{n}"))
    out += [_row(p["n"], f"Workers, paced at {p['paced_rate']:.1f}/s (half max)", *_rate_and_times(p, "to_handler"),
                 _s(p["api"]["writes_per_task"], "", 2), "—", "—", "—", "—", f"{p['succeeded_first_attempt']}/{p['n']}")
            for p in r.get("paced_pull", [])]
    pull = rows[-1].get("pull") or rows[-1]["pull_sweep"][0]
    out += ["", f"Writes per task of the Workers burst at N={pull['n']}: " + _writes(pull) + ".", ""]
    if any(row.get("pull_sweep") for row in rows):
        out += ["Rows `W × C` are the same burst served by W workers of C slots each, one total capacity "
                "(`--pull-sweep`): the API server's and the workers' CPU per task must not grow with W.", ""]
    return out


ONOFF = {"archive": ("the archive (`--archive`, SQLite)", "rows archived (tasks, attempts, duplicates)"),
         "keys": ("concurrency keys (4 keys of limit 25, across two pools)", ""),
         "tracing": ("tracing (OTLP to a local Jaeger)", "traces stored")}


def _onoff(r: dict[str, Any]) -> list[str]:
    """Each feature off and on in the same run (bench/onoff.py), side by side."""
    out = []
    for feature, (what, kept) in ONOFF.items():
        rows = [row[feature] for row in r.get("throughput", []) if row.get(feature)]
        if not rows:
            continue
        out += [f"## {what[0].upper()}{what[1:]}: off and on, same run", "",
                "The same burst twice, the feature off then on; with an `after` column, the operator's CPU is read "
                "once that much of the burst was stored, so the feature's work for it is in the figure.", "",
                *_head("N", "feature", "tasks / s", "create → Job p50 / p99", "create → Succeeded p50 / p99",
                       "operator CPU ms / task", "writes / task", "RSS after", kept or "after")]
        for ab in rows:
            for mode in ("off", "on"):
                run = ab[mode]
                out.append(_row(ab["n"], mode, *_rate_and_times(run, "to_job"),
                                f"{run['operator']['cpu_seconds_per_task'] * 1000:.2f}",
                                _s(ranges.per_task_writes(run) if run.get("api") else None, "", 2),
                                f"{run['operator']['rss_after'] / MIB:.0f} MiB", _after(run.get("after"))))
        out.append("")
    return out


def _after(after: dict[str, Any] | None) -> str:
    if not after:
        return "—"
    rows = after.get("rows", after.get("task_rows"))
    return f"{rows}, {after['attempt_rows']}, {after['duplicate_rows']}" if "attempt_rows" in after else f"{rows}"


def _cronoq_paced(r: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in r.get("paced", []) if p.get("system", "cronoq") == "cronoq"]


def _peers(r: dict[str, Any]) -> list[str]:
    """The four-way table (bare Jobs, cronoq, Kueue, Argo), issue 28's goals, Kueue's priority probe."""
    rows = fourway.table(r)
    if not any(f.system in ("kueue", "argo") for f in rows):
        return []
    versions = r.get("peers") or {}
    out = ["## Beside the peers: bare Jobs, cronoq, Kueue, Argo Workflows", "",
           "Same cluster, same run, same load generator (16 creators; paced: every system at half the slowest "
           "one's burst rate). Peers: " + ", ".join(f"{fourway.NAMES[k]} {v}" for k, v in versions.items()) +
           ", each a local process under the bench's ServiceAccount (its audit-log user). Running (each one's admission): bare Jobs' and "
           "Kueue's Job `startTime` (Kueue: after admission), cronoq's Task phase Running (dispatched), Argo's "
           "Workflow phase Running; succeeded: the Job's `Complete`, the Task's and the Workflow's phase Succeeded. CPU in ms per item; requests and writes by the controller per item (audit log). "
           "A shared 2-core machine: indicative numbers.", "",
           *_head("system", "run", "N", "items/s", "create → running p50 / p99", "create → succeeded p50 / p99",
                  "API server ms", "etcd ms", "writes", "requests", "controller ms", "controller RSS peak")]
    out += [_row(f.name + ("" if f.complete else " (incomplete)"), f.label if f.rate is None else f"{f.label} {f.rate:.1f}/s",
                 f.n, _s(f.throughput, "", 1), f"{_s(f.running.get('p50'))} / {_s(f.running.get('p99'))}",
                 f"{_s(f.succeeded.get('p50'))} / {_s(f.succeeded.get('p99'))}", _s(f.apiserver_ms, "", 1),
                 _s(f.etcd_ms, "", 1), _s(f.writes, "", 2), _s(f.requests, "", 2), _s(f.controller_ms, "", 1),
                 _s(f.rss_peak / MIB if f.rss_peak else None, " MiB", 0)) for f in rows] + [""]
    verdicts = fourway.goals(r)
    if verdicts:
        out += ["Goals (issue 28; reported, not asserted):", "", *_head("Goal", "Measured", ""),
                *(_row(v.target, v.measured, v.mark) for v in verdicts), ""]
    kb = r.get("kueue_backlog")
    if kb:
        out += [f"Kueue's priority: {kb['n']} Jobs behind a ClusterQueue with room for {kb['concurrency']} at a time; "
                f"three Jobs of a WorkloadPriorityClass of value 1000 submitted behind them (create → Job started). "
                f"cronoq's own probe is in the backlog section.", "",
                *_head("probe", "not finished when sent", "finished before", "create → started"),
                *(_row(p["name"], p["waiting_before"], p["finished_before"], _s(p["dispatch_seconds"]))
                  for p in kb["probes"]), ""]
    return out


def _fill(idle: dict[str, Any]) -> str:
    f = idle.get("fill")
    if not f or not f.get("seconds"):
        return ""
    jobs = f.get("with_jobs", f["made"])
    kept = "with their Jobs and pods" if jobs >= f["made"] else f"{jobs:,} of them with their Jobs and pods"
    return (f" The fill (bench/fill.py: the operator itself ran them) made {f['made']:,} finished Tasks, {kept}, "
            f"in {f['seconds']:.0f}s ({f['tasks_per_second']:.1f} tasks/s; {f.get('first_attempt', '?')} on attempt 1, "
            f"{f['errors']} errors).")


def _soak(s: dict[str, Any]) -> list[str]:
    samples = s["samples"]
    peaks, expected = s["peak_objects"], s["expected_objects"]
    slope = s.get("rss_slope_mib_per_1000_tasks")
    out = [f"## Soak: {s['n']:,} tasks streamed at {s['rate']:.2f}/s", "",
           f"A third of the max rate {s.get('max_rate', 0):.1f}/s (from {s.get('max_rate_from', '?')}); pool with "
           f"`ttlAfterFinished: {s['ttl_after_finished']:g}s`, `jobRetention: {s['job_retention']:g}s`; submitted over "
           f"{s['submit_seconds']:.0f}s ({s['submit_errors']} errors), sampled every {s['sample_every']:g}s, then until "
           f"the namespace was empty (or retention + 2 min). Chart: `latest-soak.png`.", "",
           f"Operator RSS {s['rss_first'] / MIB:.0f} MiB at the first sample, "
           f"{_s((s.get('rss_end_of_stream') or 0) / MIB, ' MiB', 0)} at the end of the stream, peak "
           f"{s['rss_peak'] / MIB:.0f} MiB; slope over the last two thirds of the stream "
           f"({s['slope_window'][0]:.0f}–{s['slope_window'][1]:.0f}s): **{_s(slope, ' MiB per 1,000 tasks')}** "
           f"({_s(s.get('rss_slope_mib_per_hour'), ' MiB/h', 1)} at this rate). Operator CPU "
           f"{s['operator_cpu_seconds']:.0f}s; tasks finished {_n(s.get('finished'))}, deleted by expiry "
           f"{_n(s.get('deleted'))}; left at the end: "
           + ", ".join(f"{k} {_n(v)}" for k, v in s["left"].items()) + ".", "",
           *_head("kind", "peak live", "rate × retention (+5 s running)"),
           *(_row(kind, _n(peaks.get(kind)), f"{expected.get(kind, 0):.0f}") for kind in ("tasks", "leases", "jobs", "pods")),
           "", *_head("t (s)", "RSS MiB", "Tasks", "Jobs", "pods", "Leases", "finished", "deleted")]
    return out + [_row(f"{x['t']:.0f}", f"{x['rss'] / MIB:.0f}", *(_n(x.get(k)) for k in (
        "tasks", "jobs", "pods", "leases", "finished", "deleted"))) for x in samples[::max(1, len(samples) // 15)]] + [""]


def _n(v) -> str:
    return "–" if v is None else f"{v:.0f}"


def _timeline(idle: dict[str, Any]) -> str:
    points = idle.get("rss_timeline") or []
    if not points:
        return ""
    return (" RSS over the idle window: " + ", ".join(f"{t:.0f}s {rss / MIB:.0f}" for t, rss, _ in points[::3])
            + " MiB.")


def _la(la) -> str:
    return "/".join(f"{x:.1f}" for x in la) if la else "–"
