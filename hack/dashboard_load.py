#!/usr/bin/env python3
"""How fast `cronoq dashboard` shows a list of 10,000 tasks, measured on the local cluster:

    CRONOQ_PORT_OFFSET=... .venv/bin/python hack/dashboard_load.py [--tasks 10000]

Creates the tasks (once; a second run reuses them) in namespace `dashboard-load`, which no
operator serves, starts `cronoq dashboard -n dashboard-load`, and times, over HTTP:
- cold: from the dashboard's start to the first page of /tasks (its watch cache lists every task
  in chunks of 500 and parses them first);
- warm: the first page, a page deep in the list, and a text filter, each the median of 20.
The numbers are printed; docs/how-to/dashboard.md keeps the last ones measured.
"""
from __future__ import annotations

import argparse
import http.cookiejar
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "dashboard-load"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=10_000)
    args = p.parse_args()
    kubeconfig = str(ROOT / ".cluster" / "kubeconfig")
    from kubernetes import client, config

    config.load_kube_config(config_file=kubeconfig)
    api = client.ApiClient()
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    try:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
    except client.ApiException as err:
        if err.status != 409:
            raise
    have = len(custom.list_namespaced_custom_object("cronoq.io", "v1alpha1", NAMESPACE, "tasks")["items"])
    if have < args.tasks:
        started = time.monotonic()

        def create(i: int) -> None:
            custom.create_namespaced_custom_object("cronoq.io", "v1alpha1", NAMESPACE, "tasks", {
                "apiVersion": "cronoq.io/v1alpha1", "kind": "Task",
                "metadata": {"name": f"load-{i:05}", "labels": {"batch": str(i % 10)}},
                "spec": {"image": "example.invalid/task:1", "pool": f"pool-{i % 4}", "key": f"key-{i}",
                         "payload": {"n": i}}})

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(create, range(have, args.tasks)))
        print(f"created {args.tasks - have} tasks in {time.monotonic() - started:.1f}s")

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    dashboard = subprocess.Popen([sys.executable, "-m", "cronoq", "dashboard", f"--kubeconfig={kubeconfig}",
                                  "-n", NAMESPACE, f"--port={port}"], stdout=subprocess.PIPE, text=True,
                                 stderr=subprocess.DEVNULL, env={**os.environ})
    try:
        # The dashboard lets in only who opened the URL it printed: keep its cookie, as a browser does.
        assert dashboard.stdout is not None
        token = dashboard.stdout.readline().split("?token=", 1)[1].split()[0]
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        while True:
            try:
                body = opener.open(f"{url}/tasks?token={token}", timeout=60).read().decode()
                break
            except OSError:
                time.sleep(0.05)
        cold = time.monotonic() - started
        assert f">{args.tasks}</span> tasks match" in body, "the first page does not count every task"
        print(f"cold: the first page of {args.tasks} tasks {cold:.2f}s after the dashboard started")
        for what, path in (("first page", "/tasks"), ("page 150", "/tasks?page=150"),
                           ("text filter", "/tasks?text=load-0999"), ("label and pool", "/tasks?label=batch%3D3&pool=pool-1")):
            times = []
            for _ in range(20):
                t = time.perf_counter()
                opener.open(url + path, timeout=30).read()
                times.append(time.perf_counter() - t)
            print(f"warm {what}: median {statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms")
        in_browser(url, token)
    finally:
        dashboard.terminate()
        dashboard.wait(10)
    return 0


def in_browser(url: str, token: str) -> None:
    """The first page as headless Chromium shows it: from navigation start to the load event."""
    import shutil

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    if not shutil.which("chromedriver"):
        print("browser: no chromedriver (make test-tools installs it); skipped")
        return
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    browser = webdriver.Chrome(options=options, service=Service(executable_path=shutil.which("chromedriver")))
    try:
        browser.get(f"{url}/?token={token}")  # the launch URL: the session cookie
        times = []
        for _ in range(5):
            browser.get(url + "/tasks")
            times.append(browser.execute_script(
                "const t = performance.getEntriesByType('navigation')[0]; return t.loadEventEnd - t.startTime;"))
        print(f"browser: the first page shown (navigation to load event) median {statistics.median(times):.0f} ms")
    finally:
        browser.quit()


if __name__ == "__main__":
    sys.exit(main())
