"""`cronoq dashboard` in a real browser (Debian's headless Chromium, driven by Selenium) against
the real cluster and the session's operator: its pages render real tasks, a change appears on an
open page within seconds, and an action works for an editor and shows the API server's refusal
to a viewer. The browser opens the launch URL each dashboard prints, as a person would; without
it, pages, reads and actions are refused. The two people are ServiceAccounts with a token in a kubeconfig of their own, bound
to the roles the chart ships (cronoq-view, cronoq-edit) beside Kubernetes' own view role: the
dashboard runs as each of them, as `cronoq dashboard --kubeconfig` would for a person.

One browser for the whole file, one namespace (the session operator's `t-*`), and one dashboard
per person. Screenshots of each page go to $CRONOQ_DASHBOARD_SCREENSHOTS (docs/dashboard
refreshes the docs' images), else to a temporary folder.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from tests.support.operator import free_port
from tests.support.tasks import Cronoq
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cluster

ROLES = {  # as charts/cronoq/templates/user-roles.yaml renders them
    "view": [{"apiGroups": ["cronoq.io"], "verbs": ["get", "list", "watch"],
              "resources": ["tasks", "taskschedules", "taskpools", "tasks/status", "taskschedules/status",
                            "taskpools/status"]}],
    "edit": [{"apiGroups": ["cronoq.io"], "verbs": ["get", "list", "watch"],
              "resources": ["tasks", "taskschedules", "taskpools", "tasks/status", "taskschedules/status",
                            "taskpools/status"]},
             {"apiGroups": ["cronoq.io"], "resources": ["tasks", "taskschedules"],
              "verbs": ["create", "update", "patch", "delete", "deletecollection"]}],
}


@pytest.fixture(scope="module")
def dashboard_ns(api, operator, kubectl):
    """The module's namespace, served by the session operator, with a pool of kwok pods."""
    from kubernetes import client

    name = f"t-dashboard-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name,
                                                                          labels={"cronoq.io/test": "true"})))
    wait_until(lambda: core.read_namespaced_service_account("default", name), timeout=30, what="default SA")
    yield Cronoq(api, name, operator)
    core.delete_namespace(name, propagation_policy="Background")


def _person(kubectl, api, kubeconfig: str, namespace: str, role: str, tmp: Path) -> Path:
    """A ServiceAccount bound to cronoq-<role> (as the chart has it) and Kubernetes' view, and a
    kubeconfig that speaks as it."""
    from kubernetes import client

    rbac = client.RbacAuthorizationV1Api(api)
    cluster_role = f"cronoq-dashboard-test-{role}"
    try:
        rbac.create_cluster_role(client.V1ClusterRole(metadata=client.V1ObjectMeta(name=cluster_role),
                                                      rules=ROLES[role]))
    except client.ApiException as err:
        if err.status != 409:
            raise
    sa = f"{role}er"
    client.CoreV1Api(api).create_namespaced_service_account(namespace, client.V1ServiceAccount(
        metadata=client.V1ObjectMeta(name=sa)))
    for ref in (cluster_role, "view"):
        rbac.create_namespaced_role_binding(namespace, client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name=f"{sa}-{ref}"),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=ref),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name=sa, namespace=namespace)]))
    token = kubectl("create", "token", sa, "-n", namespace, "--duration=2h").stdout.strip()
    admin = yaml.safe_load(Path(kubeconfig).read_text())
    cluster = admin["clusters"][0]
    config = {"apiVersion": "v1", "kind": "Config", "clusters": [cluster],
              "users": [{"name": sa, "user": {"token": token}}],
              "contexts": [{"name": sa, "context": {"cluster": cluster["name"], "user": sa, "namespace": namespace}}],
              "current-context": sa}
    path = tmp / f"{sa}.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


class Dashboard:
    """`cronoq dashboard` as a person runs it, on a port of its own."""

    def __init__(self, kubeconfig: Path, log: Path, archive: str | None = None) -> None:
        import http.cookiejar
        import urllib.request

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cronoq", "dashboard", f"--kubeconfig={kubeconfig}", f"--port={self.port}",
             *([f"--archive={archive}"] if archive else [])],
            stdout=open(log, "wb"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

        def printed() -> str | None:
            assert self.process.poll() is None, f"the dashboard exited: {log.read_text()}"
            found = re.search(rf"open (http://127\.0\.0\.1:{self.port}/\?token=[A-Za-z0-9_-]+) ", log.read_text())
            return found.group(1) if found else None

        self.launch_url: str = wait_until(printed, timeout=60, what=f"the dashboard's launch URL (log: {log})")
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))

        def up() -> bool:
            # The launch URL sets the cookie and sends the client on to the page without the token.
            with opener.open(self.launch_url.replace("/?", "/tasks?"), timeout=5) as answer:
                return answer.status == 200 and answer.url == self.url + "/tasks"

        wait_until(up, timeout=60, what=f"the dashboard on {self.url} (log: {log})")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> str:
    """The archive the dashboards read (`--archive`): a SQLite file, filled by the history test."""
    return f"sqlite:///{tmp_path_factory.mktemp('archive') / 'archive.db'}"


@pytest.fixture(scope="module")
def people(kubectl, api, kubeconfig, dashboard_ns, tmp_path_factory, browser, archive):
    """A dashboard per person, each opened in the browser through the URL it printed."""
    tmp = tmp_path_factory.mktemp("dashboard")
    dashboards = {role: Dashboard(_person(kubectl, api, kubeconfig, dashboard_ns.namespace, role, tmp),
                                  tmp / f"{role}.log", archive) for role in ("edit", "view")}
    for d in dashboards.values():
        browser.get(d.launch_url)
        assert browser.current_url == d.url + "/", browser.current_url  # the token left the address bar
    yield dashboards
    for d in dashboards.values():
        d.stop()


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium from Debian's packages (`make test-tools` installs it)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert binary and driver, "chromium and chromedriver are missing: `make test-tools` installs them"
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1440,1000",
                "--disable-gpu"):
        options.add_argument(arg)
    chrome = webdriver.Chrome(options=options, service=Service(executable_path=driver))
    chrome.implicitly_wait(0)
    yield chrome
    chrome.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    where = os.environ.get("CRONOQ_DASHBOARD_SCREENSHOTS")
    path = Path(where) if where else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def story(dashboard_ns):
    """Real tasks in every state the pages show: a chain that ran (one attempt failed, the next
    succeeded), a task that dead-lettered, tasks waiting in a paused pool, and a schedule."""
    cq = dashboard_ns
    cq.pool("default", concurrency=2, leaseTTL="0s")
    cq.pool("held", concurrency=1, paused=True, leaseTTL="0s")
    cq.task("extract", outcome_a1="Fail", exit_code_a1=1, message_a1="source not ready",
            retry={"maxAttempts": 3, "initialBackoff": "1s"})
    cq.task("transform", dependsOn=[{"task": "extract"}], delay="1s")
    cq.task("load", dependsOn=[{"task": "transform"}])
    cq.task("broken", outcome="Fail", exit_code=3, reason="BadInput", retry={"maxAttempts": 1})
    cq.task("waiting-1", pool="held", key="batch-7")
    cq.task("waiting-2", pool="held")
    cq.custom.create_namespaced_custom_object("cronoq.io", "v1alpha1", cq.namespace, "taskschedules", {
        "apiVersion": "cronoq.io/v1alpha1", "kind": "TaskSchedule", "metadata": {"name": "nightly"},
        "spec": {"schedule": "0 3 * * *", "taskTemplate": {"spec": {"image": "example.invalid/task:1"}}}})
    cq.wait_phase("load", "Succeeded", timeout=90)
    cq.wait_phase("broken", "DeadLettered")
    cq.wait_phase("waiting-1", "Queued")
    return cq


def _wait_text(browser, css: str, text: str, timeout: float = 10) -> float:
    """Seconds until an element matching `css` shows `text`."""
    from selenium.webdriver.common.by import By

    started = time.monotonic()
    wait_until(lambda: any(text in e.text for e in browser.find_elements(By.CSS_SELECTOR, css)),
               timeout=timeout, interval=0.05, what=f"{css!r} showing {text!r}")
    return time.monotonic() - started


def _live(browser) -> None:
    """The page's event stream is connected (changes from now on reach it)."""
    _wait_text(browser, "#live-state.on", "live")


def test_without_the_launch_url_pages_reads_and_actions_are_refused(people, story):
    """Another local user can connect to 127.0.0.1 too, but has not the printed URL."""
    import urllib.error
    import urllib.request

    ns, dashboard = story.namespace, people["edit"]
    for method, path in (("GET", "/"), ("GET", f"/tasks/{ns}/broken"), ("GET", f"/tasks/{ns}/broken/events"),
                         ("GET", f"/tasks/{ns}/broken/logs/1"), ("POST", "/actions/retry")):
        request = urllib.request.Request(dashboard.url + path, method=method,
                                         data=f"namespace={ns}&name=broken".encode() if method == "POST" else None)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        assert refused.value.code == 403, (method, path)
        assert "open the URL `cronoq dashboard` printed when it started" in refused.value.read().decode()


def test_the_overview_and_the_task_list_render_real_tasks(browser, people, story, shots):
    from selenium.webdriver.common.by import By

    ns = story.namespace
    browser.get(people["edit"].url + "/")
    row = browser.find_element(By.CSS_SELECTOR, f'tr[data-pool="{ns}/held"]')
    assert row.find_element(By.CSS_SELECTOR, "td.queued").text == "2"
    assert "paused" in row.find_element(By.CSS_SELECTOR, "td.paused").text
    assert "waiting-1" in row.text or "waiting-2" in row.text  # the one waiting longest
    finished = browser.find_element(By.CSS_SELECTOR, f'tr[data-pool="{ns}/default"]').text
    assert "Succeeded 3" in finished and "DeadLettered 1" in finished
    browser.save_screenshot(str(shots / "overview.png"))

    browser.get(people["edit"].url + "/tasks")
    names = {e.get_attribute("data-task") for e in browser.find_elements(By.CSS_SELECTOR, "tr[data-task]")}
    assert {"extract", "transform", "load", "broken", "waiting-1", "waiting-2"} <= names
    browser.get(people["edit"].url + "/tasks?phase=DeadLettered")
    assert [e.get_attribute("data-task") for e in browser.find_elements(By.CSS_SELECTOR, "tr[data-task]")] == \
        ["broken"]
    browser.get(people["edit"].url + "/tasks?text=waiting&pool=held&key=batch-7")
    assert [e.get_attribute("data-task") for e in browser.find_elements(By.CSS_SELECTOR, "tr[data-task]")] == \
        ["waiting-1"]
    browser.get(people["edit"].url + "/tasks?phase=Nope")
    assert "phase: 'Nope' is none of" in browser.find_element(By.CSS_SELECTOR, "p.error").text
    browser.get(people["edit"].url + "/tasks")
    browser.save_screenshot(str(shots / "tasks.png"))


def test_the_task_page_shows_attempts_events_logs_and_the_graph(browser, people, story, shots):
    from selenium.webdriver.common.by import By

    browser.get(f"{people['edit'].url}/tasks/{story.namespace}/extract")
    attempts = browser.find_elements(By.CSS_SELECTOR, "tr.attempt")
    assert len(attempts) == 2, re.findall(r"ERR_[A-Z_]+|HTTP ERROR \d+", browser.page_source)
    assert "Retryable" in attempts[0].text and "source not ready" in attempts[0].text
    assert "Success" in attempts[1].text
    assert len(browser.find_elements(By.CSS_SELECTOR, "tr.attempt .bar")) == 2
    _wait_text(browser, "#events", "AttemptEnded")
    _wait_text(browser, "details.log", "kwok")  # the test cluster's pods log a line of kwok's
    # the graph: Cytoscape drew extract → transform → load on its canvas
    wait_until(lambda: browser.execute_script(
        "return document.querySelectorAll('#graph canvas').length") > 0, timeout=10, what="the graph's canvas")
    browser.save_screenshot(str(shots / "task.png"))


def test_a_change_appears_on_an_open_page_without_a_reload(browser, people, story):
    from selenium.webdriver.common.by import By

    ns = story.namespace
    browser.get(f"{people['edit'].url}/tasks/{ns}/waiting-1")
    _live(browser)
    assert browser.find_element(By.ID, "phase").text == "Queued"
    started = time.monotonic()
    story.custom.patch_namespaced_custom_object("cronoq.io", "v1alpha1", ns, "taskpools", "held",
                                                {"spec": {"paused": False}})
    _wait_text(browser, "#phase", "Succeeded", timeout=30)
    phase_seconds = time.monotonic() - started

    browser.get(f"{people['edit'].url}/tasks?namespace={ns}")
    _live(browser)
    started = time.monotonic()
    story.task("newcomer", pool="held")
    _wait_text(browser, "tr[data-task=newcomer]", "newcomer", timeout=30)  # without a reload
    list_seconds = time.monotonic() - started
    # The times are printed, not asserted (a loaded machine makes any bound fail by chance);
    # docs/how-to/dashboard.md has them from hack/dashboard_pages.py.
    print(f"\ndashboard: a new task on the open list after {list_seconds:.2f}s; "
          f"a resumed pool's task shown Succeeded after {phase_seconds:.2f}s (the operator's run included)")


def test_the_history_page_lists_the_archives_executions_filtered_and_paged(browser, people, story, archive, shots):
    """The History page (`--archive`) over the archive as the operator writes it: the rows of the
    story's real statuses (engine.history, what the operator's writer writes) and of a task deleted
    from the cluster since, which the page still lists, unlinked."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    from cronoq.api import Task
    from cronoq.archive import Database
    from cronoq.engine import history

    ns = story.namespace
    story.task("doomed", pool="default")
    story.wait_phase("doomed", "Succeeded")
    tasks = [Task.model_validate(story.get(n)) for n in ("extract", "transform", "load", "broken", "doomed")]
    db = Database.open(archive)
    db.migrate()
    db.write([history.rows(history.Identity.of(t), t.status) for t in tasks])
    db.close()
    story.custom.delete_namespaced_custom_object("cronoq.io", "v1alpha1", ns, "tasks", "doomed")
    ended = sorted(((a.finished_at, t.metadata.uid, a.number, t.metadata.name, a.outcome.value)
                    for t in tasks for a in t.status.attempts if a.outcome is not None), reverse=True)
    expected = [(name, str(number)) for _, _, number, name, _ in ended]
    assert len(expected) == 6, ended  # extract 2, transform, load, broken, doomed

    def shown() -> list[tuple[str, str]]:
        return [(e.get_attribute("data-task"), e.get_attribute("data-attempt"))
                for e in browser.find_elements(By.CSS_SELECTOR, "tr.execution")]

    url = people["view"].url
    def forgotten() -> bool:
        browser.get(f"{url}/tasks")
        return not browser.find_elements(By.CSS_SELECTOR, 'tr[data-task="doomed"]')
    wait_until(forgotten, timeout=30, what="the deleted task gone from the dashboard's cache")
    browser.get(f"{url}/history")
    assert shown() == expected, browser.find_element(By.TAG_NAME, "main").text
    doomed = browser.find_element(By.CSS_SELECTOR, 'tr.execution[data-task="doomed"]')
    assert "(deleted)" in doomed.text and not doomed.find_elements(By.TAG_NAME, "a")
    extract = browser.find_element(By.CSS_SELECTOR, 'tr.execution[data-task="extract"]')
    assert extract.find_element(By.TAG_NAME, "a").get_attribute("href").endswith(f"/tasks/{ns}/extract")
    browser.save_screenshot(str(shots / "history.png"))

    Select(browser.find_element(By.NAME, "outcome")).select_by_visible_text("Retryable")
    browser.find_element(By.CSS_SELECTOR, "form.filters button[type=submit]").click()
    wait_until(lambda: "outcome=Retryable" in browser.current_url, timeout=10, what="the filtered page")
    assert shown() == [(name, str(number)) for _, _, number, name, outcome in ended if outcome == "Retryable"]
    assert sorted(shown()) == [("broken", "1"), ("extract", "1")]

    browser.get(f"{url}/history?size=4")
    assert shown() == expected[:4]
    browser.find_element(By.CSS_SELECTOR, 'a[rel="next"]').click()
    wait_until(lambda: "older=" in browser.current_url, timeout=10, what="the older page")
    assert shown() == expected[4:] and "Page 2" in browser.find_element(By.CSS_SELECTOR, "p.count").text
    browser.find_element(By.CSS_SELECTOR, 'a[rel="prev"]').click()
    wait_until(lambda: "newer=" in browser.current_url, timeout=10, what="the newer page")
    assert shown() == expected[:4]


def _act(browser, button_text: str, within: str = "body") -> str:
    """Click the button (the first so named within `within`), accept its confirmation, and
    return what the page says."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    before = browser.find_element(By.ID, "flash").text
    button = next(b for b in browser.find_elements(By.CSS_SELECTOR, f"{within} button") if b.text == button_text)
    button.click()
    WebDriverWait(browser, 5).until(expected_conditions.alert_is_present())
    browser.switch_to.alert.accept()
    wait_until(lambda: browser.find_element(By.ID, "flash").text not in ("", before), timeout=10,
               what="the action's answer")
    return browser.find_element(By.ID, "flash").text


def test_an_action_works_for_an_editor_and_a_viewer_sees_the_refusal(browser, people, story, shots):
    ns = story.namespace
    browser.get(f"{people['view'].url}/tasks/{ns}/broken")
    said = _act(browser, "Retry")
    assert "the API server refused" in said and "forbidden" in said and "viewer" in said, said
    assert [t["metadata"]["name"] for t in story.custom.list_namespaced_custom_object(
        "cronoq.io", "v1alpha1", ns, "tasks", label_selector="cronoq.io/retry-of=broken")["items"]] == []

    browser.get(f"{people['edit'].url}/tasks/{ns}/broken")
    said = _act(browser, "Retry")
    assert f"task {ns}/broken retried as broken-r-" in said, said
    retried = story.custom.list_namespaced_custom_object("cronoq.io", "v1alpha1", ns, "tasks",
                                                         label_selector="cronoq.io/retry-of=broken")["items"]
    assert len(retried) == 1
    _wait_text(browser, "#live", "Retried as")  # the page follows: the new task is linked

    # the retry dead-letters too (it plays the same failure); the bulk retry takes it, not `broken` again
    again = retried[0]["metadata"]["name"]
    story.wait_phase(again, "DeadLettered")
    browser.get(f"{people['edit'].url}/")
    said = _act(browser, "Retry dead letters", within=f'tr[data-pool="{ns}/default"]')
    assert f"1 dead-lettered task of pool {ns}/default retried (1 retried already)" in said, said
    assert len(story.custom.list_namespaced_custom_object("cronoq.io", "v1alpha1", ns, "tasks",
                                                          label_selector=f"cronoq.io/retry-of={again}")["items"]) == 1
    said = _act(browser, "Pause", within=f'tr[data-pool="{ns}/default"]')  # pools are cronoq-admin's
    assert "the API server refused" in said and "taskpools" in said, said

    browser.get(f"{people['edit'].url}/schedules")
    said = _act(browser, "Trigger")
    assert f"schedule {ns}/nightly fired: task nightly-manual-" in said, said
    _wait_text(browser, f'tr[data-schedule="{ns}/nightly"]', "all")  # its task is listed
    browser.save_screenshot(str(shots / "schedules.png"))


def test_a_tab_in_the_background_lets_go_of_its_stream_and_reloads_when_shown(browser, people, story):
    """A browser has 6 connections per host: a hidden tab must not keep its event stream."""
    browser.get(f"{people['edit'].url}/tasks?namespace={story.namespace}")
    _live(browser)
    page = browser.current_window_handle
    browser.execute_script("window.marker = 'before'")
    browser.switch_to.new_window("tab")  # the dashboard's tab goes to the background
    wait_until(lambda: browser.execute_script("return document.visibilityState") == "visible", timeout=5)
    browser.close()
    browser.switch_to.window(page)
    wait_until(lambda: browser.execute_script("return window.marker === undefined"), timeout=10,
               what="the page reloaded once shown again")
    _live(browser)
