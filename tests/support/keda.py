"""KEDA's published ScaledObject CRD, to check the chart's ScaledObject against the real schema
without running KEDA: the CRD comes from KEDA's Go module as the Go module proxy serves it
(`go mod download`, checked against the checksum database and the sum pinned here; nothing is
built), and is cached like the cluster's tools in $CRONOQ_CACHE (~/.cache/cronoq)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

MODULE = "github.com/kedacore/keda/v2"
VERSION = "v2.21.1"
SUM = "h1:AoPpnkEeuSYUb1dAqQO5Pud9BpCPiOqurnKtnKobl6Q="
"""The module zip's hash, as go.sum would pin it."""
CRD = "config/crd/bases/keda.sh_scaledobjects.yaml"
NAME = "scaledobjects.keda.sh"


def scaledobject_crd() -> Path:
    """The ScaledObject CRD of KEDA `VERSION`, downloaded once (a 3 MB zip, seconds)."""
    cache = Path(os.environ.get("CRONOQ_CACHE", Path.home() / ".cache" / "cronoq")) / f"keda-crd-{VERSION}"
    crd = cache / Path(CRD).name
    if crd.exists():
        return crd
    assert shutil.which("go"), "KEDA's CRD comes from its Go module: Go must be on PATH (as for the test cluster)"
    modcache = cache.with_name(cache.name + ".modcache")
    cache.parent.mkdir(parents=True, exist_ok=True)
    # The module needs a newer Go to build than this machine's; it is downloaded, never built, so the
    # go command's word on that is ignored (and it must not fetch a toolchain for it).
    env = {**os.environ, "GOMODCACHE": str(modcache), "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod"}
    result = subprocess.run(["go", "mod", "download", "-json", f"{MODULE}@{VERSION}"], cwd=cache.parent, env=env,
                            capture_output=True, text=True, timeout=300)
    info = json.loads(result.stdout or "{}")
    error = info.get("Error", "")
    assert not error or "requires go" in error, f"downloading {MODULE}@{VERSION} failed: {error or result.stderr}"
    assert info.get("Sum") == SUM, f"{MODULE}@{VERSION} is not the module pinned here: {info.get('Sum')}"
    with zipfile.ZipFile(info["Zip"]) as module:
        text = module.read(f"{MODULE}@{VERSION}/{CRD}")
    cache.mkdir(parents=True, exist_ok=True)
    crd.with_suffix(".tmp").write_bytes(text)
    crd.with_suffix(".tmp").rename(crd)
    subprocess.run(["go", "clean", "-modcache"], env=env, capture_output=True, timeout=120)
    shutil.rmtree(modcache, ignore_errors=True)
    return crd
