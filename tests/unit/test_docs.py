"""The docs site (mkdocs.yml, docs/) and the README's examples, without a cluster: the site builds
with warnings as errors (a broken link or anchor fails it; shown by breaking one), it loads
nothing from the internet and has its search box, the reference tables are the models', and
every YAML and shell example is either run by a test or checked here against the models and
the CLI's parser. The cluster half is tests/integration/test_examples.py (the API server takes
every manifest of the docs)."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cronoq.api import docgen
from cronoq.api.pool import TaskPool, TaskPoolSpec
from cronoq.api.schedule import TaskSchedule
from cronoq.api.task import Task, TaskSpec
from cronoq.cli import UsageError, parser

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted((REPO / "docs").rglob("*.md")) + [REPO / "README.md"]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
KINDS = {"Task": Task, "TaskPool": TaskPool, "TaskSchedule": TaskSchedule}

# Examples that are not cronoq objects (by the line they start with), and the test of what each says.
# The quota is applied as written; the other three are snippets of a Role, a pod and a Prometheus
# configuration whose settings those tests check, not applied verbatim.
EXERCISED_ELSEWHERE = {
    "apiVersion: v1\nkind: ResourceQuota": "tests/integration/test_shared_cluster.py (the quota, applied)",
    "- apiGroups: [\"cronoq.io\"]": "tests/chart/test_worker_lease_policy.py (the serve rule the chart grants)",
    "# the worker's pod": "tests/chart/test_worker_lease_policy.py (the worker name checked against its pod)",
    "scrape_configs:": "tests/integration/test_prometheus.py (Prometheus scraping the operator)",
    "workers:\n  grants:": "tests/chart/test_render.py (the pages' workers.grants values, rendered; "
                          "docs/how-to/scaling-workers.md's by tests/chart/test_worker_fleet.py)",
    "# prometheus-adapter's rules": "tests/chart/test_worker_fleet.py (its query is the chart's, for the HPA's pool)",
}


def examples(*languages: str) -> list[tuple[str, str]]:
    """(page, code) of every fenced block in those languages, README included."""
    return [(str(page.relative_to(REPO)), m.group(2)) for page in PAGES for m in FENCE.finditer(page.read_text())
            if m.group(1) in languages]


def build(docs: Path | None = None, tmp: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict`, as `make docs` runs it (of a copy of the docs when given). Never with
    -q: it silences the warnings, and --strict then passes a broken link."""
    config = REPO / "mkdocs.yml"
    if docs is not None:
        assert tmp is not None
        text = config.read_text().replace("docs_dir: docs", f"docs_dir: {docs}")
        config = tmp / "mkdocs.yml"
        config.write_text(text)
    site = (tmp or Path(os.environ.get("TMPDIR", "/tmp"))) / "site"
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          capture_output=True, text=True, cwd=REPO, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def test_the_reference_pages_are_the_models():
    for model in docgen.MODELS:
        current = docgen.page(model).read_text()
        assert docgen.rendered(model, current) == current, (
            f"{docgen.page(model)} drifted from the models: run `python -m cronoq.api.docgen`")


def test_a_field_without_a_description_fails_the_reference(monkeypatch):
    schema = docgen.object_schema(Task)
    del schema["properties"]["spec"]["properties"]["pool"]["description"]
    monkeypatch.setattr(docgen, "object_schema", lambda model: schema)
    with pytest.raises(ValueError, match=r"\.spec\.pool: no description"):
        docgen.table(Task)


def test_the_site_builds_strict_offline_with_a_search_box(tmp_path):
    done = build(tmp=tmp_path)
    assert done.returncode == 0, done.stderr
    site = tmp_path / "site"
    assert (site / "search" / "search_index.json").is_file()
    pages = {p: p.read_text() for p in site.rglob("*.html")}
    assert all('class="md-search__input"' in html for html in pages.values())
    fetched = {m for html in pages.values()
               for m in re.findall(r"<(?:script|link|img|iframe)\b[^>]*?(?:src|href)=\"((?:https?:)?//[^\"]+)", html)}
    assert not fetched, f"the site loads these from the internet: {sorted(fetched)}"
    assert not any('class="mermaid"' in html for html in pages.values())  # Material would fetch mermaid.js


def test_a_broken_link_or_anchor_fails_the_build(tmp_path):
    docs = tmp_path / "docs"
    shutil.copytree(REPO / "docs", docs)
    page = docs / "concepts" / "keys.md"
    page.write_text(page.read_text() + "\nSee [retries](../how-to/retries.md#no-such-anchor) and [x](nowhere.md).\n")
    done = build(docs, tmp_path)
    assert done.returncode != 0
    assert "contains a link 'nowhere.md', but the target 'concepts/nowhere.md' is not found" in done.stderr
    assert "'../how-to/retries.md#no-such-anchor', but the doc 'how-to/retries.md' does not contain an anchor" in (
        done.stderr)


def test_the_readmes_links_reach_pages():
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", (REPO / "README.md").read_text()):
        if not target.startswith("http"):
            assert (REPO / target).is_file(), f"README links to {target}, which does not exist"


def _manifests(code: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(code) if doc]


@pytest.mark.parametrize("page,code", examples("yaml"), ids=lambda v: v if v.endswith(".md") else "")
def test_every_yaml_example_is_valid_and_exercised(page, code):
    docs = _manifests(code)
    assert docs, f"{page}: an empty YAML example"
    example_files = {p.read_text().strip() for p in (REPO / "examples").rglob("*.yaml")}
    if code.strip() in example_files:
        return  # an examples/ file, applied and run to its end by tests/integration/test_examples.py
    for doc in docs:
        if not isinstance(doc, dict):
            assert any(code.lstrip().startswith(start) for start in EXERCISED_ELSEWHERE), (
                f"{page}: a YAML example no test applies:\n{code}")
        elif doc.get("apiVersion") == "cronoq.io/v1alpha1":
            KINDS[doc["kind"]].model_validate(doc)  # and the API server takes it: test_examples.py
        elif set(doc) == {"spec"}:  # a fragment of a spec: a task's or a pool's
            spec = doc["spec"]
            try:
                TaskSpec.model_validate(spec)
            except ValueError:
                TaskPoolSpec.model_validate(spec)
        else:
            assert any(code.lstrip().startswith(start) for start in EXERCISED_ELSEWHERE), (
                f"{page}: a YAML example no test applies:\n{code}")


def _commands(language: str, code: str) -> list[tuple[str, str | None]]:
    """The `cronoq …` commands of a shell block, or of a console block's `$ ` lines (continuation
    lines joined), each with the error the block shows it printing, if any."""
    lines = re.sub(r"\\\n\s*", " ", code).splitlines()
    found = []
    for line, after in zip(lines, lines[1:] + [""]):
        if language == "console" and not line.startswith("$ "):
            continue
        line = line.removeprefix("$ ")
        if re.match(r"(kubectl )?cronoq \w", line):
            command = line.split(" #", 1)[0].split(" | ", 1)[0].split(" && ", 1)[0]
            found.append((command, after.removeprefix("error: ") if after.startswith("error: ") else None))
    return found


def test_every_cronoq_command_in_the_docs_parses_or_fails_as_shown():
    commands = [(page, *c) for language in ("sh", "console") for page, code in examples(language)
                for c in _commands(language, code)]
    assert len(commands) > 40
    for page, command, error in commands:
        argv = shlex.split(command)
        argv = argv[2:] if argv[0] == "kubectl" else argv[1:]
        if error is None:
            try:
                parser().parse_args(argv)
            except (SystemExit, UsageError) as failed:
                pytest.fail(f"{page}: `{command}` does not parse: {failed}")
        elif error.startswith("cronoq") and "unrecognized" in error:  # an error of the parser: shown as it is
            with pytest.raises(UsageError) as failed:
                parser().parse_args(argv)
            assert error.split(": ")[-1] in str(failed.value), (page, command)
