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
           "request being sent to the first watch event showing the milestone. Times in seconds.", ""]

    out += ["## Ranges (bench/ranges.yaml)", "", *ranges.table(ranges.check(r)), ""]

    out += _peers(r)

    rows = [row for row in r.get("throughput", []) if row.get("baseline") or row.get("cronoq")]
    if rows:
        out += ["## Throughput (apply → Succeeded)", "",
                "| N | bare Jobs / s | cronoq tasks / s | ratio | load avg before → after (cronoq) |", "|---|---|---|---|---|"]
        for row in rows:
            b, c = row.get("baseline") or {}, row.get("cronoq") or {}
            ratio = c["throughput"] / b["throughput"] if b.get("throughput") and c.get("throughput") else None
            la = c.get("load_average", {})
            out.append(f"| {row['n']} | {_s(b.get('throughput'), '', 1)} | {_s(c.get('throughput'), '', 1)} | "
                       f"{_s(ratio, '×')} | {_la(la.get('before', ()))} → {_la(la.get('after', ()))} |")
        out.append("")
        out += ["## CPU seconds spent during each run, by process", "",
                "What the machine's cores did while the run lasted (the operator's own CPU is in the next sections).",
                "", "| Run | N | wall s | " + " | ".join(COMPONENT_NAMES) + " | operator |",
                "|---|---|---|" + "---|" * (len(COMPONENT_NAMES) + 1)]
        for row in rows:
            for label, run in (("bare Jobs", row.get("baseline")), ("cronoq", row.get("cronoq"))):
                if run and run.get("cluster_cpu_seconds"):
                    wall = run["n"] / run["throughput"] if run.get("throughput") else None
                    cpu = run["cluster_cpu_seconds"]
                    op = (run.get("operator") or {}).get("cpu_seconds")
                    out.append(f"| {label} | {run['n']} | {_s(wall, '', 0)} | " +
                               " | ".join(_s(cpu.get(c), '', 0) for c in COMPONENT_NAMES) + f" | {_s(op, '', 0)} |")
        out.append("")
        out += ["## Latency (p50 / p95 / p99)", "",
                "| Run | N | rate | create → Job created | create → Succeeded |", "|---|---|---|---|---|"]
        for row in rows:
            if row.get("baseline"):
                b = row["baseline"]
                out.append(f"| bare Jobs, burst | {b['n']} | {b['submit_rate']:.0f}/s | (is the create) | "
                           f"{_pcts(b['latency']['to_succeeded'])} |")
            if row.get("cronoq"):
                c = row["cronoq"]
                out.append(f"| cronoq, burst | {c['n']} | {c['submit_rate']:.0f}/s | {_pcts(c['latency']['to_job'])} | "
                           f"{_pcts(c['latency']['to_succeeded'])} |")
        for p in _cronoq_paced(r):
            out.append(f"| cronoq, paced at half max | {p['n']} | {p['paced_rate']:.1f}/s | "
                       f"{_pcts(p['latency']['to_job'])} | {_pcts(p['latency']['to_succeeded'])} |")
        out.append("")

        burst = [row["cronoq"] for row in rows if row.get("cronoq")]
        if burst:
            c = burst[-1]
            a = c["api"]
            out += [f"## API requests by the operator (N={c['n']}, every task succeeding on attempt "
                    f"{'1' if c['succeeded_first_attempt'] == c['n'] else '1 or later'})", "",
                    f"{a['writes_per_task']:.2f} writes and {a['requests_per_task']:.2f} requests per task "
                    f"({a['writes']} writes, {a['failed_writes']} of them refused). From the audit log, user "
                    "`system:serviceaccount:cronoq-bench-system:cronoq-bench`.", "",
                    "| verb | resource | client | count | per task | response codes |", "|---|---|---|---|---|---|"]
            for t in a["table"]:
                codes = ", ".join(f"{k}: {v}" for k, v in sorted(t["codes"].items()))
                out.append(f"| {'**' + t['verb'] + '**' if t['write'] else t['verb']} | {t['resource']} | {t['agent']} | "
                           f"{t['count']} | {t['per_task']:.3f} | {codes} |")
            out.append("")
            lean = r.get("lean")
            if lean:
                writes = [t for t in lean["api"]["table"] if t["write"]]
                out += [f"Lean run (N={lean['n']}, pool `leaseTTL: 0s`, operator `--events=warnings`): "
                        f"{lean['api']['writes_per_task']:.2f} writes per task: " +
                        ", ".join(f"{t['verb']} {t['resource']} {t['per_task']:.3f}" for t in writes) + ".", ""]
            out += ["## Operator CPU and memory", "", "| Run | N | CPU s / task | CPU s total | RSS peak | RSS after |",
                    "|---|---|---|---|---|---|"]
            for c in burst + _cronoq_paced(r):
                o = c["operator"]
                out.append(f"| {c['label']} | {c['n']} | {o['cpu_seconds_per_task'] * 1000:.1f} ms | {o['cpu_seconds']:.1f} | "
                           f"{o['rss_peak'] / MIB:.0f} MiB | {o['rss_after'] / MIB:.0f} MiB |")
            if r.get("backlog"):
                o = r["backlog"]["operator"]
                out.append(f"| backlog | {r['backlog']['n']} | {o['cpu_seconds_per_task'] * 1000:.1f} ms | "
                           f"{o['cpu_seconds']:.1f} | {o['rss_peak'] / MIB:.0f} MiB | {o['rss_after'] / MIB:.0f} MiB |")
            out.append("")

    out += _pull(r)
    out += _onoff(r)

    runs = idle_runs(r)
    if len(runs) > 1:
        out += ["## Idle with finished Tasks present, by size", "",
                "| finished Tasks | with Jobs, pods | filled in | start → /readyz | start → leading | quiet after | "
                "RSS peak while starting | RSS idle | per task | idle CPU | idle requests |",
                "|---|---|---|---|---|---|---|---|---|---|---|"]
        for idle in runs:
            f = idle.get("fill") or {}
            filled = f"{f['made']:,} in {f['seconds']:.0f}s ({f['tasks_per_second']:.1f}/s)" if f.get("seconds") else "–"
            jobs = idle.get("jobs_present")
            out.append(f"| {idle['tasks_present']:,} | {'all' if jobs is None else f'{jobs:,}'} | {filled} | {idle['startup_seconds']:.1f}s | "
                       f"{_s(idle.get('listed_seconds'), 's', 1)} | {_s(idle.get('settled_seconds'), 's', 0)} | "
                       f"{idle.get('rss_peak_startup', 0) / MIB:.0f} MiB | {idle['rss_idle'] / MIB:.0f} MiB | "
                       f"{idle['rss_bytes_per_task'] / 1024:.1f} KiB | {idle['idle_cpu_fraction'] * 100:.1f}% | "
                       f"{idle['idle_requests']} ({idle['idle_writes']} writes) |")
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
                f"({idle['idle_writes']} writes)." + _timeline(idle) + _fill(idle), ""]
        if idle.get("note"):
            out += [f"_{idle['note']}_", ""]

    soak = r.get("soak")
    if soak:
        out += _soak(soak)

    bl = r.get("backlog")
    if bl:
        out += [f"## Backlog: {bl['n']} Tasks behind a pool of concurrency {bl['concurrency']}", "",
                f"Drained in {_s(bl['drain_seconds'], 's', 1)} ({_s(bl['drain_rate'], ' tasks/s', 1)}); dispatch "
                f"latency of the backlog's tasks p50/p95/p99 {_pcts(bl['backlog_dispatch'])}.", "",
                "| high-priority probe | submitted with waiting | finished before | create → Job created |",
                "|---|---|---|---|"]
        for p in bl["probes"]:
            out.append(f"| {p['name']} | {p['waiting_before']} | {p['finished_before']} | {_s(p['dispatch_seconds'])} |")
        out.append("")

    out += _deep(r.get("deep"))

    fair = r.get("fairness")
    if fair:
        g = fair["grouped"]
        out += [f"## Fair shares: tenant A's {g['a_tasks']} Tasks, then tenant B's {g['b_tasks']}, on a pool of "
                f"concurrency {g['concurrency']}", "",
                "| run | B's last task finished after B was submitted | A drained in |", "|---|---|---|"]
        for label, run in (("groups (A and B name their group)", g), ("no groups", fair["ungrouped"]),
                           ("B alone on an empty pool", fair["alone"])):
            out.append(f"| {label} | {_s(run['b_last_finished_seconds'])} | {_s(run['a_drained_seconds'])} |")
        out.append("")

    out += _gaming(r.get("gaming"))

    fo = r.get("failover")
    if fo:
        out += ["## Failover", ""]
        if fo.get("error"):
            out += [f"Error: {fo['error']}.", ""]
        else:
            out += ["| round | signal to the leader | → leader metric on the standby | → first Job by the new leader |",
                    "|---|---|---|---|"]
            for x in fo["rounds"]:
                out.append(f"| {x['round']} | {x.get('signal', 'SIGKILL')} | {_s(x['seconds_to_leader_metric'], 's', 1)} | "
                           f"{_s(x['seconds_to_first_job'], 's', 1)} |")
            out.append("")

    if r.get("kopf_ab"):
        from bench.kopf_ab import table
        out += ["## The operator's watches beside kopf's", "", table(r["kopf_ab"]), ""]
    out += ["Raw numbers: `latest.json`; charts: `latest.png`" + (", `latest-soak.png`" if soak else "") +
            "; analysis: `bench/README.md`.", ""]
    return "\n".join(out)


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
           "| order | A's share of the starts while B waited | B's last task finished after B was submitted |",
           "|---|---|---|"]
    for label, run in (("default (no fairShare)", d), ("fairShare by submitter", gaming["shares"])):
        share = f"{run['gamer_share']:.2f}" if run["gamer_share"] is not None else "-"
        out.append(f"| {label} | {share} | {_s(run['b_last_finished_seconds'])} |")
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
    return [f"## Deep queue: {d['n']} Tasks behind a paused pool, two replicas", "", "| | |", "|---|---|",
            *(f"| {k} | {v} |" for k, v in rows), ""]


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
           "| N | mode | items / s | create → handler (or Job) p50 / p99 | create → Succeeded p50 / p99 | writes / item "
           "| API-server CPU ms / item | etcd CPU ms / item | operator CPU ms / item | workers CPU ms / item | "
           "first-attempt successes |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        sweep = [(f"cronoq, Workers, {s['workers']} × {s['worker_concurrency']}", s, "to_handler")
                 for s in row.get("pull_sweep", [])]
        for mode, run, start_key in (("bare Jobs", row.get("baseline"), None), ("cronoq, Job", row.get("cronoq"), "to_job"),
                                     ("cronoq, Workers", row.get("pull"), "to_handler"),
                                     ("cronoq, Workers, `--events=warnings`", row.get("pull_lean"), "to_handler"),
                                     *sweep):
            if not run:
                continue
            lat = run["latency"]
            start = lat.get(start_key) if start_key else None
            cpu = run.get("cluster_cpu_seconds") or {}
            n = run["n"]

            def per(v: float | None) -> str:
                return "—" if v is None else f"{v / n * 1000:.1f}"

            first = run.get("succeeded_first_attempt", run.get("completed"))
            out.append(f"| {n} | {mode} | {_s(run.get('throughput'), '', 1)} | "
                       f"{_s(start['p50'], '', 3) + ' / ' + _s(start['p99'], '', 3) if start else '—'} | "
                       f"{_s(lat['to_succeeded']['p50'], '', 3)} / {_s(lat['to_succeeded']['p99'], '', 3)} | "
                       f"{_s((run.get('api') or {}).get('writes_per_task'), '', 2) if run.get('api') else '—'} | "
                       f"{per(cpu.get('kube-apiserver'))} | {per(cpu.get('etcd'))} | "
                       f"{per((run.get('operator') or {}).get('cpu_seconds'))} | "
                       f"{_s(run['workers_cpu_seconds_per_task'] * 1000, '', 1) if 'workers_cpu_seconds_per_task' in run else '—'} | "
                       f"{first}/{n} |")
    for p in r.get("paced_pull", []):
        lat = p["latency"]
        out.append(f"| {p['n']} | Workers, paced at {p['paced_rate']:.1f}/s (half max) | {_s(p.get('throughput'), '', 1)} | "
                   f"{_s(lat['to_handler']['p50'], '', 3)} / {_s(lat['to_handler']['p99'], '', 3)} | "
                   f"{_s(lat['to_succeeded']['p50'], '', 3)} / {_s(lat['to_succeeded']['p99'], '', 3)} | "
                   f"{_s(p['api']['writes_per_task'], '', 2)} | — | — | — | — | {p['succeeded_first_attempt']}/{p['n']} |")
    pull = rows[-1].get("pull") or rows[-1]["pull_sweep"][0]
    writes = [t for t in pull["api"]["table"] if t["write"]]
    out += ["", f"Writes per task of the Workers burst at N={pull['n']}: " +
            ", ".join(f"{t['verb']} {t['resource']} {t['per_task']:.3f}" for t in writes) + ".", ""]
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
                "| N | feature | tasks / s | create → Job p50 / p99 | create → Succeeded p50 / p99 | operator CPU ms / task "
                f"| writes / task | RSS after | {kept or 'after'} |", "|---|---|---|---|---|---|---|---|---|"]
        for ab in rows:
            for mode in ("off", "on"):
                run = ab[mode]
                lat, o, after = run["latency"], run["operator"], run.get("after")
                writes = ranges.per_task_writes(run) if run.get("api") else None
                out.append(f"| {ab['n']} | {mode} | {_s(run.get('throughput'), '', 1)} | "
                           f"{_s(lat['to_job']['p50'], '', 3)} / {_s(lat['to_job']['p99'], '', 3)} | "
                           f"{_s(lat['to_succeeded']['p50'], '', 3)} / {_s(lat['to_succeeded']['p99'], '', 3)} | "
                           f"{o['cpu_seconds_per_task'] * 1000:.2f} | {_s(writes, '', 2)} | "
                           f"{o['rss_after'] / MIB:.0f} MiB | {_after(after)} |")
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
           "| system | run | N | items/s | create → running p50 / p99 | create → succeeded p50 / p99 | "
           "API server ms | etcd ms | writes | requests | controller ms | controller RSS peak |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for f in rows:
        run = f.label if f.rate is None else f"{f.label} {f.rate:.1f}/s"
        flag = "" if f.complete else " (incomplete)"
        out.append(f"| {f.name}{flag} | {run} | {f.n} | {_s(f.throughput, '', 1)} | "
                   f"{_s(f.running.get('p50'))} / {_s(f.running.get('p99'))} | "
                   f"{_s(f.succeeded.get('p50'))} / {_s(f.succeeded.get('p99'))} | {_s(f.apiserver_ms, '', 1)} | "
                   f"{_s(f.etcd_ms, '', 1)} | {_s(f.writes, '', 2)} | {_s(f.requests, '', 2)} | "
                   f"{_s(f.controller_ms, '', 1)} | {_s(f.rss_peak / MIB if f.rss_peak else None, ' MiB', 0)} |")
    out.append("")
    verdicts = fourway.goals(r)
    if verdicts:
        out += ["Goals (issue 28; reported, not asserted):", "", "| Goal | Measured | |", "|---|---|---|"]
        out += [f"| {v.target} | {v.measured} | {v.mark} |" for v in verdicts]
        out.append("")
    kb = r.get("kueue_backlog")
    if kb:
        out += [f"Kueue's priority: {kb['n']} Jobs behind a ClusterQueue with room for {kb['concurrency']} at a time; "
                f"three Jobs of a WorkloadPriorityClass of value 1000 submitted behind them (create → Job started). "
                f"cronoq's own probe is in the backlog section.", "",
                "| probe | not finished when sent | finished before | create → started |", "|---|---|---|---|"]
        for p in kb["probes"]:
            out.append(f"| {p['name']} | {p['waiting_before']} | {p['finished_before']} | {_s(p['dispatch_seconds'])} |")
        out.append("")
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
           "| kind | peak live | rate × retention (+5 s running) |", "|---|---|---|"]
    for kind in ("tasks", "leases", "jobs", "pods"):
        out.append(f"| {kind} | {_n(peaks.get(kind))} | {expected.get(kind, 0):.0f} |")
    out += ["", "| t (s) | RSS MiB | Tasks | Jobs | pods | Leases | finished | deleted |",
            "|---|---|---|---|---|---|---|---|"]
    step = max(1, len(samples) // 15)
    for x in samples[::step]:
        out.append(f"| {x['t']:.0f} | {x['rss'] / MIB:.0f} | {_n(x.get('tasks'))} | {_n(x.get('jobs'))} | "
                   f"{_n(x.get('pods'))} | {_n(x.get('leases'))} | {_n(x.get('finished'))} | {_n(x.get('deleted'))} |")
    out.append("")
    return out


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
