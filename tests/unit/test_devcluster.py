"""The pure parts of hack/devcluster.py: which binaries each build module yields, and the cache key."""
from __future__ import annotations

import shutil

import pytest

from tests.support.cluster import load_devcluster, namespace_name

devcluster = load_devcluster()


def test_every_build_module_names_the_binaries_the_cluster_runs():
    binaries = {b for name in devcluster.COMPONENTS for b in devcluster.Component(name).binaries()}
    assert binaries == {"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "etcd", "kwok", "helm",
                        "toxiproxy-server", "prometheus", "promtool"}
    assert [b for name in devcluster.TEST_ONLY for b in devcluster.Component(name).binaries()] == ["jaeger"], \
        "built by `make go-tools` only"


def test_the_cache_key_follows_the_pinned_module_files(tmp_path, monkeypatch):
    shutil.copytree(devcluster.HACK / "kwok", tmp_path / "kwok")
    monkeypatch.setattr(devcluster, "HACK", tmp_path)
    component = devcluster.Component("kwok")
    before = component.cache_dir
    assert component.cache_dir == before, "stable: a second run finds the same cache"
    gosum = tmp_path / "kwok" / "go.sum"
    gosum.write_text(gosum.read_text() + "example.com/bumped v1.0.0 h1:x=\n")
    assert component.cache_dir != before, "a version bump builds afresh"
    assert component.cache_dir.name.startswith("kwok-")


def test_the_control_planes_release_is_a_parameter(monkeypatch):
    """CRONOQ_KUBE=1.31 picks the build module hack/controlplane-1.31: its own cache key, state
    directory and version stamp; unset, the default module and .cluster/."""
    import sys

    default = devcluster.Component(devcluster.CONTROLPLANE)
    monkeypatch.setenv("CRONOQ_KUBE", "1.31")
    monkeypatch.delenv("CRONOQ_CLUSTER_DIR", raising=False)
    try:
        oldest = load_devcluster()
    finally:
        sys.modules["devcluster"] = devcluster
    assert oldest.CONTROLPLANE == "controlplane-1.31" and oldest.CONTROLPLANE in oldest.COMPONENTS
    assert oldest.STATE.name == ".cluster-1.31"
    component = oldest.Component(oldest.CONTROLPLANE)
    assert component.module == devcluster.HACK / "controlplane-1.31"
    assert component.binaries() == default.binaries()
    assert "gitVersion=v1.31.14" in component.ldflags() and "gitMinor=31" in component.ldflags()
    assert "gitVersion=v1.37.2" in default.ldflags(), "the default control plane reports its release too"
    assert component.cache_dir.name.startswith("controlplane-1.31-") and component.cache_dir != default.cache_dir


@pytest.mark.parametrize("test_name", ["test_a[Succeed-1]", "x" * 200, "Test_Upper_CASE"])
def test_namespace_names_are_valid_dns_labels(test_name):
    name = namespace_name(test_name)
    assert len(name) <= 63 and name == name.lower() and name[0].isalpha() and name[-1].isalnum()
    assert all(c.isalnum() or c == "-" for c in name)
    assert namespace_name(test_name) != name, "unique per call"


def test_the_real_node_components_and_how_they_are_built():
    realnode = devcluster.realnode()
    binaries = {b for name in realnode.COMPONENTS for b in devcluster.Component(name).binaries()}
    assert binaries == {"kubelet", "containerd", "containerd-shim-runc-v2", "ctr", "pause"}
    kubelet = devcluster.Component("kubelet").ldflags()
    assert "-X k8s.io/component-base/version.gitVersion=v1.37.2" in kubelet, "the node reports its real version"
    assert "gitMinor=37" in kubelet
    assert devcluster.BUILD_TAGS == {"containerd": "no_btrfs"}


def test_the_kubelet_is_the_control_planes_release():
    """The real node runs the release the API server runs (and shares its build's Go cache);
    Kubernetes' version skew policy would allow an older kubelet, never a newer one."""
    def minor(module: str) -> int:
        return int(devcluster.Component(module).release().split(".")[1])
    assert devcluster.Component("kubelet").release() == devcluster.Component("controlplane").release()
    assert 0 <= minor("controlplane-1.31") - 31 <= 0, "the oldest control plane is 1.31"


def test_the_pause_image_is_an_archive_containerd_can_import(tmp_path):
    import io
    import json
    import tarfile

    binary = tmp_path / "pause"
    binary.write_bytes(b"\x7fELF fake")
    binary.chmod(0o755)
    archive = devcluster.realnode().image_archive("localhost/cronoq/pause:1", {"/pause": binary}, ["/pause"])
    with tarfile.open(fileobj=io.BytesIO(archive)) as outer:
        manifest = json.loads(outer.extractfile("manifest.json").read())
        assert manifest[0]["RepoTags"] == ["localhost/cronoq/pause:1"]
        config = json.loads(outer.extractfile(manifest[0]["Config"]).read())
        layer = tarfile.open(fileobj=io.BytesIO(outer.extractfile(manifest[0]["Layers"][0]).read()))
    assert config["config"]["Entrypoint"] == ["/pause"]
    member = layer.getmember("pause")
    assert member.mode & 0o111 and member.uid == 0
