"""A run's results as files: JSON (everything), Markdown (what a reader needs) and the chart."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.targets import MIB, judge

COMPONENT_NAMES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


def write(results: dict[str, Any], into: Path, stamp: str) -> None:
    into.mkdir(parents=True, exist_ok=True)
    text = json.dumps(results, indent=1, default=str)
    (into / f"run-{stamp}.json").write_text(text)
    (into / "latest.json").write_text(text)
    (into / "latest.md").write_text(markdown(results))
    try:
        from bench.chart import draw
        draw(results, into / "latest.png")
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
           "Pods succeed as soon as they start (kwok, `kwok.cronoq.io/delay: 0s`). Latencies run from the create "
           "request being sent to the first watch event showing the milestone. Times in seconds.", ""]

    out += ["## Targets", "", "| Target | Measured | |", "|---|---|---|"]
    out += [f"| {v.target} | {v.measured} | {v.mark} |" for v in judge(r)]
    out.append("")

    rows = r.get("throughput", [])
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
        for p in r.get("paced", []):
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
            out += ["## Operator CPU and memory", "", "| Run | N | CPU s / task | CPU s total | RSS peak | RSS after |",
                    "|---|---|---|---|---|---|"]
            for c in burst + r.get("paced", []):
                o = c["operator"]
                out.append(f"| {c['label']} | {c['n']} | {o['cpu_seconds_per_task'] * 1000:.1f} ms | {o['cpu_seconds']:.1f} | "
                           f"{o['rss_peak'] / MIB:.0f} MiB | {o['rss_after'] / MIB:.0f} MiB |")
            if r.get("backlog"):
                o = r["backlog"]["operator"]
                out.append(f"| backlog | {r['backlog']['n']} | {o['cpu_seconds_per_task'] * 1000:.1f} ms | "
                           f"{o['cpu_seconds']:.1f} | {o['rss_peak'] / MIB:.0f} MiB | {o['rss_after'] / MIB:.0f} MiB |")
            out.append("")

    idle = r.get("idle")
    if idle:
        out += ["## Idle with finished Tasks present", "",
                f"A fresh operator over {idle['tasks_present']} finished Tasks "
                f"({', '.join(f'{k}: {v}' for k, v in idle['by_namespace'].items() if v)}): /readyz after "
                f"{idle['startup_seconds']:.1f}s, initial listing done (`cronoq_leader` 1) after "
                f"{_s(idle.get('listed_seconds'), 's', 1)}, CPU quiet (< 5% of a core) after "
                f"{_s(idle.get('settled_seconds'), 's', 0)} and {idle.get('cpu_seconds_to_settle', 0):.0f} CPU s; "
                f"RSS peak while starting {idle.get('rss_peak_startup', 0) / MIB:.0f} MiB. "
                f"Then, over {idle['idle_seconds']:.0f}s idle: RSS {idle['rss_idle'] / MIB:.0f} MiB "
                f"({idle['rss_bytes_per_task'] / 1024:.1f} KiB per task, interpreter included), CPU "
                f"{idle['idle_cpu_fraction'] * 100:.1f}% of a core, {idle['idle_requests']} requests "
                f"({idle['idle_writes']} writes)." + _timeline(idle), ""]
        if idle.get("note"):
            out += [f"_{idle['note']}_", ""]
        fp = idle.get("task_footprint") or {}
        if fp:
            out += [f"One finished Task, measured with tracemalloc over {fp['sample']} of them: "
                    f"{fp['json_bytes'] / 1024:.1f} KiB of JSON ({fp['json_bytes_without_managed_fields'] / 1024:.1f} KiB "
                    f"without managedFields); as the raw dict the store keeps {fp['raw_dict_bytes'] / 1024:.1f} KiB "
                    f"({fp['raw_dict_bytes_without_managed_fields'] / 1024:.1f} KiB without managedFields), "
                    f"and its pydantic model another {_s((fp.get('model_bytes') or 0) / 1024, ' KiB', 1)}.", ""]
            listing = fp.get("startup_listing") or {}
            for kind in ("jobs", "pods"):
                if kind in listing:
                    x = listing[kind]
                    out += [f"Listing {x['objects']} {kind} as the operator's startup does (kubernetes client models, "
                            f"then sanitize_for_serialization) holds {x['typed_bytes_per_object'] / 1024:.1f} KiB per "
                            f"object; raw JSON (`_preload_content=False`) {x['raw_bytes_per_object'] / 1024:.1f} KiB.", ""]

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

    fo = r.get("failover")
    if fo:
        out += ["## Failover", ""]
        if not fo.get("available"):
            out += [f"Not available: {fo.get('reason')}.", ""]
        elif fo.get("error"):
            out += [f"Error: {fo['error']}.", ""]
        else:
            out += ["| round | SIGKILL → leader metric on the standby | SIGKILL → first Job by the new leader |",
                    "|---|---|---|"]
            for x in fo["rounds"]:
                out.append(f"| {x['round']} | {_s(x['seconds_to_leader_metric'], 's', 1)} | "
                           f"{_s(x['seconds_to_first_job'], 's', 1)} |")
            out.append("")

    profiles = [(c["label"] + f" N={c['n']}", c["profile"]) for c in [row.get("cronoq") or {} for row in rows]
                if c.get("profile")]
    if bl and bl.get("profile"):
        profiles.append((f"backlog N={bl['n']}", bl["profile"]))
    if profiles:
        out += ["## Where the operator's CPU goes (py-spy, samples of the running operator)", ""]
        for label, p in profiles:
            out += [f"### {label}: {p['samples']} samples at {p['rate']} Hz", "",
                    "By activity: " + ", ".join(f"{k} {v}%" for k, v in p.get("by_activity_percent", {}).items()) + ".",
                    "",
                    "By library (innermost matching frame): " +
                    ", ".join(f"{k} {v}%" for k, v in p["by_library_percent"].items()) + ".", "",
                    "| inclusive % | function |", "|---|---|"]
            out += [f"| {pct} | `{f}` |" for f, pct in p["top_inclusive_percent"][:15]]
            out += ["", "| self % | function |", "|---|---|"]
            out += [f"| {pct} | `{f}` |" for f, pct in p["top_self_percent"][:12]]
            out.append("")
    out += ["Raw numbers: `latest.json`; chart: `latest.png`; analysis: `bench/README.md`.", ""]
    return "\n".join(out)


def _timeline(idle: dict[str, Any]) -> str:
    points = idle.get("rss_timeline") or []
    if not points:
        return ""
    return (" RSS over the idle window: " + ", ".join(f"{t:.0f}s {rss / MIB:.0f}" for t, rss, _ in points[::3])
            + " MiB.")


def _la(la) -> str:
    return "/".join(f"{x:.1f}" for x in la) if la else "–"
