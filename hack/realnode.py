#!/usr/bin/env python3
"""A real node beside the kwok ones: kubelet + containerd + runc on this machine, for what only a
container can show (the SDK and the heartbeat sidecar in a pod, exit codes, kills, OOM, image and
config errors, the chart's operator as a pod).

    python3 hack/realnode.py build    # Debian packages; kubelet, containerd and pause from Go modules
    python3 hack/realnode.py up       # join the running devcluster as node cronoq-real-node
    python3 hack/realnode.py load IMG # copy an image from podman (or docker) into the node
    python3 hack/realnode.py down     # stop it and remove every trace (devcluster down does too)
    python3 hack/realnode.py status

`make cluster-up REAL_NODE=1` starts the cluster with it. The node is tainted
`cronoq.io/real-node=true:NoSchedule` and labelled `cronoq.io/real-node=true`, so only pods that
tolerate the taint land there; everything else stays on kwok.

How the pieces fit on a machine without a registry, without systemd and with cgroups v1:
- No registry: images are `podman save`d and imported into the node's containerd; the pause image
  is made here from hack/pause. Image GC is off: what it removed could not be pulled back.
- The kubelet needs a node address that is not loopback: the bridge `cronoq0` (10.88.0.1/16) is
  made first and is both the node's address and the pod network's gateway (CNI bridge plugin).
- Pods reach the API server (on 127.0.0.1) at the `kubernetes` Service address: one DNAT of
  10.96.0.1:443 to it, with `route_localnet` on the bridge. Its certificate names that address,
  so in-cluster configuration works unchanged. There is no kube-proxy: other Service addresses
  lead nowhere (the API server's service proxy reaches Services' pods).
- Nothing leaves the machine: no masquerade, no default route in pods, the service range routed
  onto the bridge, and forwarding between the bridge and any other interface dropped. The Service
  address is machine-wide, so there is one real node per machine.
- containerd runs with `restrict_oom_score_adj` (the machine lacks CAP_SYS_RESOURCE: a lower score
  than containerd's own kills runc's init) and cgroupfs; the kubelet with `failCgroupV1: false`.
- The API server authenticates to the kubelet with a client certificate and the kubelet asks the
  API server (webhook) who may read logs or exec; nothing is anonymous.

Standard library only, like devcluster.py, whose state directory and processes it shares.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import devcluster as dc  # noqa: E402

NODE = "cronoq-real-node"
TAINT_KEY = "cronoq.io/real-node"
BRIDGE, NODE_IP, POD_RANGE = "cronoq0", "10.88.0.1", "10.88.0.0/16"
SERVICE_IP = "10.96.0.1"  # the `kubernetes` Service: the first address of dc.SERVICE_RANGE
KUBELET_PORT, KUBELET_HEALTHZ = 26350 + dc._OFFSET, 26348 + dc._OFFSET
# containerd's state and socket: short fixed paths (unix socket names are limited to 108 bytes).
RUN = Path("/run/cronoq-realnode")
SOCKET = RUN / "containerd.sock"
DIR = dc.STATE / "realnode"
PAUSE_IMAGE = "localhost/cronoq/pause:1"
PROJECT_IMAGES = ("localhost/cronoq/operator:dev", "localhost/cronoq/worker-example:dev",
                  "localhost/cronoq/effects:dev")  # the last: tests/realnode/test_exactly_once.py's
COMPONENTS = ("kubelet", "containerd", "pause")
DEBIAN_PACKAGES = {"runc": "/usr/sbin/runc", "containernetworking-plugins": "/usr/lib/cni/bridge",
                   "iptables": "/usr/sbin/iptables"}
NAT_CHAIN, FORWARD_CHAIN = "CRONOQ-REALNODE-SVC", "CRONOQ-REALNODE-FWD"
PROCESSES = ("containerd", "kubelet")


def log(msg: str) -> None:
    print(f"realnode: {msg}", file=sys.stderr, flush=True)


def sh(*argv: str, check: bool = True, quiet: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=check, text=True, capture_output=quiet or not check)


# ---------------------------------------------------------------- installing and building


def install() -> dict[str, Path]:
    """Debian's runc, CNI plugins and iptables when missing; kubelet, containerd, pause built."""
    missing = [pkg for pkg, path in DEBIAN_PACKAGES.items() if not Path(path).exists()]
    if missing:
        log(f"installing {' '.join(missing)} from Debian's packages")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=True, env=env, stdout=subprocess.DEVNULL)
    paths: dict[str, Path] = {}
    for component in map(dc.Component, COMPONENTS):
        component.build()
        paths.update({b: component.cache_dir / b for b in component.binaries()})
    return paths


# ---------------------------------------------------------------- images


def image_archive(tag: str, files: dict[str, Path], entrypoint: list[str]) -> bytes:
    """A one-layer image in `docker save` form, as containerd imports it: `files` maps paths in
    the image to files on this machine."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        for inside, source in files.items():
            info = tar.gettarinfo(str(source), arcname=inside.lstrip("/"))
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            with open(source, "rb") as f:
                tar.addfile(info, f)
    layer_bytes = layer.getvalue()
    config = json.dumps({
        "architecture": "amd64", "os": "linux", "config": {"Entrypoint": entrypoint},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer_bytes).hexdigest()]},
    }).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [tag], "Layers": ["layer.tar"]}]).encode()
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for name, data in ((config_name, config), ("layer.tar", layer_bytes), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return archive.getvalue()


def ctr(bins: dict[str, Path], *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(bins["ctr"]), f"--address={SOCKET}", "--namespace=k8s.io", *args],
                          text=True, capture_output=True, **kwargs)


def import_archive(bins: dict[str, Path], archive: Path) -> None:
    result = ctr(bins, "images", "import", "--platform=linux/amd64", str(archive))
    if result.returncode != 0:
        raise dc.ClusterError(f"ctr images import {archive}: {result.stderr.strip()}")


def engine() -> list[str] | None:
    """The command line of the image engine holding the project's images: podman, else docker."""
    if shutil.which("podman"):
        return ["podman", "--runtime", "runc"]
    if shutil.which("docker"):
        return ["docker"]
    return None


def load(images: list[str], bins: dict[str, Path] | None = None) -> None:
    """Copy images from podman (or docker) into the node's containerd, by tag: one archive for
    all of them, so the layers they share are written once."""
    if not images:
        return
    bins = bins or binaries()
    cmd = engine()
    if cmd is None:
        raise dc.ClusterError("neither podman nor docker is here to take images from (make image installs podman)")
    started = time.monotonic()
    (DIR / "images").mkdir(parents=True, exist_ok=True)
    archive = DIR / "images" / "load.tar"
    archive.unlink(missing_ok=True)
    save = [*cmd, "save", f"--output={archive}", *images]
    if cmd[0] == "podman":
        save[len(cmd) + 1:len(cmd) + 1] = ["--format=docker-archive", "--multi-image-archive"]
    result = subprocess.run(save, text=True, capture_output=True)
    if result.returncode != 0:
        raise dc.ClusterError(f"cannot save {' '.join(images)}: {result.stderr.strip()} (make image builds them)")
    try:
        import_archive(bins, archive)
    finally:
        archive.unlink(missing_ok=True)
    log(f"loaded {', '.join(images)} in {time.monotonic() - started:.1f}s")


def project_images() -> list[str]:
    """The project's images that the image engine has (`make image` builds them)."""
    cmd = engine()
    if cmd is None:
        return []
    return [i for i in PROJECT_IMAGES
            if subprocess.run([*cmd, "image", "inspect", i], capture_output=True).returncode == 0]


# ---------------------------------------------------------------- network


def network_up() -> None:
    """The bridge, the service route, the DNAT to the API server and the forwarding fence."""
    (DIR / "ip_forward").exists() or (DIR / "ip_forward").write_text(Path("/proc/sys/net/ipv4/ip_forward").read_text())
    if sh("ip", "link", "show", BRIDGE, check=False).returncode != 0:
        sh("ip", "link", "add", BRIDGE, "type", "bridge")
    sh("ip", "addr", "replace", f"{NODE_IP}/16", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")
    # Service addresses never follow the default route, off the machine.
    sh("ip", "route", "replace", dc.SERVICE_RANGE, "dev", BRIDGE, "src", NODE_IP)
    Path(f"/proc/sys/net/ipv4/conf/{BRIDGE}/route_localnet").write_text("1")
    iptables_down()
    sh("iptables", "-t", "nat", "-N", NAT_CHAIN)
    sh("iptables", "-t", "nat", "-A", NAT_CHAIN, "-d", f"{SERVICE_IP}/32", "-p", "tcp", "--dport", "443",
       "-j", "DNAT", "--to-destination", f"127.0.0.1:{dc.APISERVER}")
    sh("iptables", "-t", "nat", "-A", "PREROUTING", "-i", BRIDGE, "-j", NAT_CHAIN)
    sh("iptables", "-t", "nat", "-A", "OUTPUT", "-d", f"{SERVICE_IP}/32", "-j", NAT_CHAIN)
    sh("iptables", "-N", FORWARD_CHAIN)
    sh("iptables", "-A", FORWARD_CHAIN, "-i", BRIDGE, "!", "-o", BRIDGE, "-j", "DROP")
    sh("iptables", "-A", FORWARD_CHAIN, "!", "-i", BRIDGE, "-o", BRIDGE, "-j", "DROP")
    sh("iptables", "-I", "FORWARD", "1", "-j", FORWARD_CHAIN)
    cni = DIR / "cni"
    (cni / "net.d").mkdir(parents=True, exist_ok=True)
    (cni / "net.d" / "10-cronoq.conflist").write_text(json.dumps({
        "cniVersion": "1.0.0", "name": "cronoq-realnode",
        "plugins": [
            {"type": "bridge", "bridge": BRIDGE, "isGateway": True, "isDefaultGateway": False,
             "ipMasq": False, "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_RANGE, "gateway": NODE_IP}]],
                      "routes": [{"dst": dc.SERVICE_RANGE}], "dataDir": str(cni / "ipam")}},
            {"type": "loopback"},
        ],
    }, indent=2))


def iptables_down() -> None:
    """Remove our chains and the jumps to them; and the chains the kubelet made (none existed
    before it ran: it makes them on every start)."""
    for rule in (("-t", "nat", "-D", "PREROUTING", "-i", BRIDGE, "-j", NAT_CHAIN),
                 ("-t", "nat", "-D", "OUTPUT", "-d", f"{SERVICE_IP}/32", "-j", NAT_CHAIN),
                 ("-D", "FORWARD", "-j", FORWARD_CHAIN),
                 ("-D", "INPUT", "-j", "KUBE-FIREWALL"), ("-D", "OUTPUT", "-j", "KUBE-FIREWALL")):
        while sh("iptables", *rule, check=False).returncode == 0:
            pass
    for table, chain in (("nat", NAT_CHAIN), ("filter", FORWARD_CHAIN),
                         *((t, c) for t in ("filter", "nat", "mangle")
                           for c in ("KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT"))):
        sh("iptables", "-t", table, "-F", chain, check=False)
        sh("iptables", "-t", table, "-X", chain, check=False)


def network_down() -> None:
    iptables_down()
    sh("ip", "link", "del", BRIDGE, check=False)
    saved = DIR / "ip_forward"
    if saved.exists():  # the CNI bridge plugin turned forwarding on; put back what was there
        Path("/proc/sys/net/ipv4/ip_forward").write_text(saved.read_text())
        saved.unlink()


# ---------------------------------------------------------------- containerd and the kubelet


def containerd_config() -> Path:
    config = DIR / "containerd.toml"
    config.write_text(f"""version = 3
root = "{DIR / 'containerd'}"
state = "{RUN}"

[grpc]
  address = "{SOCKET}"
[ttrpc]
  address = "{SOCKET}.ttrpc"
[debug]
  address = "{RUN / 'debug.sock'}"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{PAUSE_IMAGE}"

[plugins.'io.containerd.cri.v1.runtime']
  enable_selinux = false
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "{DEBIAN_PACKAGES['runc']}"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "{DIR / 'cni' / 'net.d'}"
    max_conf_num = 1
""")
    return config


def kubelet_files() -> tuple[Path, Path]:
    """The node's client certificate (group system:nodes: the Node authorizer and NodeRestriction
    apply), its kubeconfig and the KubeletConfiguration."""
    pki, own = dc.STATE / "pki", DIR / "pki"
    own.mkdir(parents=True, exist_ok=True)
    ext = own / "client.ext"
    ext.write_text("extendedKeyUsage=clientAuth\n")
    dc.openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/O=system:nodes/CN=system:node:{NODE}",
               "-keyout", str(own / "node.key"), "-out", str(own / "node.csr"))
    dc.openssl("x509", "-req", "-in", str(own / "node.csr"), "-CA", str(pki / "ca.crt"), "-CAkey", str(pki / "ca.key"),
               "-CAcreateserial", "-days", "30", "-out", str(own / "node.crt"), "-extfile", str(ext))
    kubeconfig = DIR / "kubelet.kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "node",
        "clusters": [{"name": "cronoq-test", "cluster": {
            "server": f"https://127.0.0.1:{dc.APISERVER}", "certificate-authority": str(pki / "ca.crt")}}],
        "users": [{"name": "node", "user": {"client-certificate": str(own / "node.crt"),
                                            "client-key": str(own / "node.key")}}],
        "contexts": [{"name": "node", "context": {"cluster": "cronoq-test", "user": "node"}}],
    }))
    resolv = DIR / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\n")  # pods resolve nothing: they have no way out anyway
    config = DIR / "kubelet.yaml"
    config.write_text(json.dumps({
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "failCgroupV1": False,          # cgroups are v1 here; kubelets since 1.35 refuse them otherwise
        "cgroupDriver": "cgroupfs",     # no systemd
        "containerRuntimeEndpoint": f"unix://{SOCKET}",
        "address": NODE_IP, "port": KUBELET_PORT, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": KUBELET_HEALTHZ,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(pki / "ca.crt")}},
        "authorization": {"mode": "Webhook"},
        "failSwapOn": False,
        "oomScoreAdj": 0,               # no CAP_SYS_RESOURCE: the kubelet cannot go below 0
        "resolvConf": str(resolv), "clusterDomain": "cluster.local",
        "rotateCertificates": False, "serverTLSBootstrap": False,
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                         "nodefs.inodesFree": "1%"},
        "enforceNodeAllocatable": ["pods"],
        "registerWithTaints": [{"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}],
        "maxPods": 50,
    }, indent=2))
    return kubeconfig, config


def binaries() -> dict[str, Path]:
    return {b: c.cache_dir / b for c in map(dc.Component, COMPONENTS) for b in c.binaries()}


def up() -> None:
    """Join the running devcluster (`devcluster.py up` first) with a real node; return once it is
    Ready with the project's images loaded."""
    if not dc.healthy(real_node=False):
        raise dc.ClusterError("the devcluster is not running; start it first (hack/devcluster.py up)")
    if healthy():
        log(f"node {NODE} already running")
        return
    down(quiet=True, keep_cluster_objects=False)
    started = time.monotonic()
    bins = install()
    DIR.mkdir(parents=True, exist_ok=True)
    network_up()
    RUN.mkdir(parents=True, exist_ok=True)
    dc.start("containerd", [str(bins["containerd"]), f"--config={containerd_config()}"])
    dc.wait_for("containerd's socket", lambda: ctr(bins, "version").returncode == 0, 30, "containerd")
    pause = DIR / "pause.tar"
    pause.write_bytes(image_archive(PAUSE_IMAGE, {"/pause": bins["pause"]}, ["/pause"]))
    import_archive(bins, pause)
    load(project_images(), bins)
    kubeconfig, config = kubelet_files()
    dc.start("kubelet", [str(bins["kubelet"]), f"--config={config}", f"--kubeconfig={kubeconfig}",
                         f"--hostname-override={NODE}", f"--node-ip={NODE_IP}", f"--root-dir={DIR / 'kubelet'}",
                         f"--cert-dir={DIR / 'pki'}", f"--node-labels={TAINT_KEY}=true", "--v=1"])
    dc.wait_for(f"node {NODE} Ready", node_ready, 90, "kubelet")
    log(f"node {NODE} up in {time.monotonic() - started:.1f}s (taint {TAINT_KEY}=true:NoSchedule)")


def node_ready() -> bool:
    status, body = dc.api_get(f"/api/v1/nodes/{NODE}")
    if status != 200:
        return False
    conditions = {c["type"]: c["status"] for c in json.loads(body).get("status", {}).get("conditions", [])}
    return conditions.get("Ready") == "True"


def healthy() -> bool:
    try:
        return all(dc.running(p) for p in PROCESSES) and node_ready()
    except (OSError, ValueError):
        return False


# ---------------------------------------------------------------- teardown


def down(quiet: bool = False, keep_cluster_objects: bool = False) -> None:
    """Stop the node and leave nothing behind: no process, mount, cgroup, iptables rule, network
    namespace or bridge. With the API server still up, the node's pods are deleted first, so the
    kubelet itself tears their containers, sandboxes and volumes down."""
    if not (dc.running("kubelet") or dc.running("containerd") or DIR.exists()):
        return  # this cluster has no real node (another cluster on this machine may have one)
    if dc.running("kubelet") and not keep_cluster_objects and dc.running("kube-apiserver"):
        delete_pods()
    dc.stop("kubelet")
    bins = binaries()
    if SOCKET.exists() and bins["ctr"].exists():
        for task in ctr(bins, "tasks", "ls", "--quiet").stdout.split():
            ctr(bins, "tasks", "kill", "--signal=SIGKILL", task)
        for task in ctr(bins, "tasks", "ls", "--quiet").stdout.split():
            ctr(bins, "tasks", "delete", "--force", task)
        for container in ctr(bins, "containers", "ls", "--quiet").stdout.split():
            ctr(bins, "containers", "delete", container)
    dc.stop("containerd")
    kill_shims()
    unmount()
    remove_cgroups()
    network_down()
    if dc.running("kube-apiserver") and not keep_cluster_objects:
        dc.api_delete(f"/api/v1/nodes/{NODE}")
    shutil.rmtree(RUN, ignore_errors=True)
    shutil.rmtree(DIR, ignore_errors=True)
    # Paths the kubelet and the shims make whatever their configured directories (only if empty).
    Path("/var/lib/kubelet/device-plugins/kubelet.sock").unlink(missing_ok=True)
    for d in ("/var/lib/kubelet/device-plugins", "/var/lib/kubelet", "/run/containerd/runc/k8s.io",
              "/run/containerd/runc", "/run/containerd/s", "/run/containerd/fifo", "/run/containerd"):
        try:
            os.rmdir(d)
        except OSError:
            pass
    if not quiet:
        log(f"node {NODE} down")


def delete_pods() -> None:
    """Cordon the node (a Deployment's replacement pods then stay Pending instead of landing
    here again), delete its pods and wait (at most 60 s) until the kubelet has removed them."""
    dc.api_patch(f"/api/v1/nodes/{NODE}", {"spec": {"unschedulable": True}})
    path = f"/api/v1/pods?fieldSelector=spec.nodeName%3D{NODE}"
    status, body = dc.api_get(path)
    if status != 200:
        return
    for pod in json.loads(body)["items"]:
        meta = pod["metadata"]
        dc.api_delete(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}?gracePeriodSeconds=1")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status, body = dc.api_get(path)
        if status != 200 or not json.loads(body)["items"]:
            return
        time.sleep(0.5)


def kill_shims() -> None:
    """Shims outlive containerd by design; ours are those serving our socket, killed by pid."""
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if args and args[0].endswith(b"containerd-shim-runc-v2") and str(SOCKET).encode() in b" ".join(args):
            try:
                os.kill(int(proc.name), 9)
            except ProcessLookupError:
                pass


def unmount() -> None:
    prefixes = (str(DIR), str(RUN), "/run/netns/cni-", "/run/containerd")
    for _ in range(3):  # lazily, deepest first; a second pass catches what a parent hid
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
        ours = sorted((m for m in mounts if m.startswith(prefixes)), reverse=True)
        if not ours:
            break
        for mount in ours:
            subprocess.run(["umount", "-l", mount], capture_output=True)
    for netns in Path("/run/netns").glob("cni-*") if Path("/run/netns").exists() else ():
        netns.unlink(missing_ok=True)


def remove_cgroups() -> None:
    """The kubelet's cgroup tree in every v1 hierarchy (and v2's, should there be one)."""
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        tree = hierarchy / "kubepods"
        if not tree.is_dir():
            continue
        for sub in sorted((p for p in tree.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            try:
                sub.rmdir()
            except OSError:
                pass
        try:
            tree.rmdir()
        except OSError:
            pass


def leftovers() -> list[str]:
    """What `down` must have removed; empty when the machine is as before `up`."""
    found = [f"process {p}" for p in PROCESSES if dc.running(p)]
    found += [f"bridge {BRIDGE}"] if sh("ip", "link", "show", BRIDGE, check=False).returncode == 0 else []
    rules = sh("iptables-save", check=False).stdout
    found += [f"iptables {word}" for word in ("CRONOQ-REALNODE", "KUBE-") if word in rules]
    mounts = Path("/proc/mounts").read_text()
    found += [f"mount under {p}" for p in (str(DIR), str(RUN), "/run/netns/cni-") if p in mounts]
    found += [f"cgroup {h}/kubepods" for h in Path("/sys/fs/cgroup").iterdir() if (h / "kubepods").exists()]
    found += [f"directory {d}" for d in (DIR, RUN) if d.exists()]
    found += [f"shim pid {p.name}" for p in Path("/proc").glob("[0-9]*") if _is_our_shim(p)]
    return found


def _is_our_shim(proc: Path) -> bool:
    try:
        return str(SOCKET).encode() in (proc / "cmdline").read_bytes()
    except OSError:
        return False


def status() -> int:
    for name in PROCESSES:
        pid = dc.running(name)
        print(f"{name:24} {'running pid ' + str(pid) if pid else 'stopped'}")
    ok = healthy()
    print(f"{'node ' + NODE:24} {'Ready' if ok else 'not ready'}")
    return 0 if ok else 1


def main(argv: list[str]) -> int:
    cmd = argv[1] if len(argv) > 1 else "status"
    try:
        if cmd == "build":
            for name, path in install().items():
                print(f"{name:24} {path}")
        elif cmd == "up":
            up()
        elif cmd == "down":
            down()
            if rest := leftovers():
                log(f"left behind: {', '.join(rest)}")
                return 1
        elif cmd == "load" and len(argv) > 2:
            load(argv[2:])
        elif cmd == "status":
            return status()
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except dc.ClusterError as err:
        log(f"error: {err}")
        return 1
    except subprocess.CalledProcessError as err:
        log(f"error: {' '.join(map(str, err.cmd))} exited {err.returncode}: {err.stderr or ''}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
