"""The chart ships the CRDs of crds/ (generated from the API models) unchanged: Helm installs
charts/cronoq/crds/ before anything else, so a drifted copy would install an old API."""
from __future__ import annotations

from tests.chart.chart import CHART, REPO

SOURCE = REPO / "crds"
COPY = CHART / "crds"
RESYNC = "run charts/sync-crds.sh to copy crds/*.yaml into charts/cronoq/crds/"


def test_chart_crds_are_the_crds_of_the_repository_byte_for_byte():
    source = {p.name: p.read_bytes() for p in SOURCE.glob("*.yaml")}
    copy = {p.name: p.read_bytes() for p in COPY.glob("*.yaml")}
    assert source, "crds/ holds no CRD"
    assert sorted(copy) == sorted(source), f"the chart's CRD files {sorted(copy)} are not crds/'s {sorted(source)}: {RESYNC}"
    drifted = [name for name in source if copy[name] != source[name]]
    assert not drifted, f"charts/cronoq/crds/ differs from crds/ in {drifted}: {RESYNC}"


def test_chart_crd_directory_holds_only_crd_files():
    # Helm installs every file of crds/, whatever its name: nothing else may live there.
    assert sorted(p.name for p in COPY.iterdir()) == sorted(p.name for p in COPY.glob("*.yaml"))
