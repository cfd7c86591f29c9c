#!/usr/bin/env python3
"""Wait until every Task in the namespace has ended (or the timeout passes), then show them.
Used by `make demo`; reads KUBECONFIG like kubectl."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

TERMINAL = {"Succeeded", "Failed", "DeadLettered", "Cancelled", "Skipped"}


def phases(namespace: str | None) -> dict[str, str]:
    args = ["kubectl", "get", "tasks", "-o", "json"] + (["-n", namespace] if namespace else [])
    items = json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)["items"]
    return {t["metadata"]["name"]: (t.get("status") or {}).get("phase", "") for t in items}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--namespace", "-n")
    args = parser.parse_args()
    deadline = time.monotonic() + args.timeout
    print("waiting for the example tasks to finish ...", flush=True)
    while time.monotonic() < deadline:
        seen = phases(args.namespace)
        if seen and all(p in TERMINAL for p in seen.values()):
            break
        time.sleep(1)
    subprocess.run(["kubectl", "get", "tasks", "-o", "wide"] + (["-n", args.namespace] if args.namespace else []))
    unfinished = [n for n, p in phases(args.namespace).items() if p not in TERMINAL]
    if unfinished:
        print(f"still running after {args.timeout:.0f}s: {', '.join(unfinished)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
