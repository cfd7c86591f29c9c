#!/usr/bin/env python3
"""The local test control plane: real Kubernetes binaries built from Go modules, kwok nodes.

    python3 hack/devcluster.py build   # build (or reuse) the pinned binaries in ~/.cache/cronoq
    python3 hack/devcluster.py build jaeger   # only the named build modules (TEST_ONLY ones too)
    python3 hack/devcluster.py up      # start etcd, apiserver, controller-manager, scheduler, kwok
    CRONOQ_REAL_NODE=1 python3 hack/devcluster.py up   # and a real node (hack/realnode.py)
    python3 hack/devcluster.py down    # stop everything it started, free the ports, wipe state
    python3 hack/devcluster.py status  # say what runs
    python3 hack/devcluster.py restart kube-apiserver   # stop one component, start it again (faults)
    CRONOQ_KUBE=1.31 CRONOQ_PORT_OFFSET=600 python3 hack/devcluster.py up   # the oldest supported release

The control plane's release is a parameter: CRONOQ_KUBE names a build module hack/controlplane-<KUBE>/
(unset: hack/controlplane/, the default and newest release). Such a cluster keeps its state in
.cluster-<KUBE>/ unless CRONOQ_CLUSTER_DIR says otherwise; give it its own CRONOQ_PORT_OFFSET too.

Binaries are built from the build modules in hack/<component>/ (pinned go.mod + go.sum) into
~/.cache/cronoq/<component>-<hash of the module files>/, so a second build rebuilds nothing and a
version bump builds afresh. Runtime state (PKI, etcd data, logs, pids, kubeconfig) lives in
.cluster/ at the repository root. Everything listens on 127.0.0.1 only.

Standard library only: the pytest fixture and the Makefile call it before anything is installed.
"""
from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HACK = REPO / "hack"
# The control plane's release line: "" is the default (hack/controlplane/), "1.31" hack/controlplane-1.31/.
KUBE = os.environ.get("CRONOQ_KUBE", "")
CONTROLPLANE = f"controlplane-{KUBE}" if KUBE else "controlplane"
STATE = Path(os.environ.get("CRONOQ_CLUSTER_DIR", REPO / (f".cluster-{KUBE}" if KUBE else ".cluster")))
CACHE = Path(os.environ.get("CRONOQ_CACHE", Path.home() / ".cache" / "cronoq"))
KUBECONFIG = STATE / "kubeconfig"
NODES = int(os.environ.get("CRONOQ_KWOK_NODES", "2"))
# CRONOQ_REAL_NODE=1 (`make cluster-up REAL_NODE=1`): `up` adds a real node (hack/realnode.py).
REAL_NODE = int(os.environ.get("CRONOQ_REAL_NODE", "0") == "1")

# Ports, all on loopback. Unusual numbers, so a developer's own cluster is left alone, and below
# Linux's ephemeral range (32768+), so an outgoing connection never holds one we must bind.
# CRONOQ_PORT_OFFSET shifts them all, so a second cluster can run beside the first.
_OFFSET = int(os.environ.get("CRONOQ_PORT_OFFSET", "0"))
ETCD_CLIENT, ETCD_PEER = 22379 + _OFFSET, 22380 + _OFFSET
APISERVER = 26443 + _OFFSET
CONTROLLER_MANAGER, SCHEDULER, KWOK = 26257 + _OFFSET, 26259 + _OFFSET, 26250 + _OFFSET
PORTS = (ETCD_CLIENT, ETCD_PEER, APISERVER, CONTROLLER_MANAGER, SCHEDULER, KWOK)
SERVICE_RANGE = "10.96.0.0/16"

# Each build module and the binaries it provides (its go.mod `tool` lines). toxiproxy and
# prometheus are no part of the cluster: the network fault tests put toxiproxy between an operator
# and the API server; the chart's alerts are tested with promtool, and a real Prometheus scrapes an operator.
COMPONENTS = (CONTROLPLANE, "etcd", "kwok", "helm", "toxiproxy", "prometheus")
TEST_ONLY = ("jaeger",)
"""Built by `devcluster.py build jaeger` (`make go-tools`), never by `up`: Jaeger receives the
operator's spans in the tracing test only, and its build is the longest of all (minutes of CPU),
which `make demo` should not pay."""


class ClusterError(RuntimeError):
    """Something kept the cluster from coming up; the message says what and where to look."""


def log(msg: str) -> None:
    print(f"devcluster: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- building the binaries


# Build tags and version stamps some components need. containerd's btrfs snapshotter wants C
# headers; the kubelet reports its version to the API server as its node's kubeletVersion, and the
# API server its own at /version (`kubectl version`; the version tests check they run the release asked for).
BUILD_TAGS = {"containerd": "no_btrfs"}
# A control plane of another release (controlplane-1.31) is stamped as the default one is.
STAMPED = {"kubelet": "k8s.io/kubernetes", "controlplane": "k8s.io/kubernetes"}


@dataclass(frozen=True)
class Component:
    name: str

    @property
    def module(self) -> Path:
        return HACK / self.name

    def tools(self) -> list[str]:
        """Packages named on the `tool` lines of the build module's go.mod."""
        tools, inside = [], False
        for line in (self.module / "go.mod").read_text().splitlines():
            line = line.split("//")[0].strip()
            if line == "tool (":
                inside = True
            elif inside and line == ")":
                inside = False
            elif inside and line:
                tools.append(line)
            elif line.startswith("tool "):
                tools.append(line.split()[1])
        return tools

    def binaries(self) -> list[str]:
        # The etcd server package is the module root; its binary is called etcd. toxiproxy's server
        # is its cmd/server package; its binary is called toxiproxy-server, as its releases call it.
        renamed = {"/server/v3": "etcd", "toxiproxy/v2/cmd/server": "toxiproxy-server"}
        return [next((b for suffix, b in renamed.items() if t.endswith(suffix)), t.rsplit("/", 1)[1])
                for t in self.tools()]

    def ldflags(self) -> str:
        """-s -w, and for a stamped component the version of the module it is built from."""
        flags = "-s -w"
        module = STAMPED.get(self.name) or STAMPED.get(self.name.split("-", 1)[0])
        if module:
            version = self.release(module)
            major, minor = version.lstrip("v").split(".")[:2]
            base = "k8s.io/component-base/version"
            flags += (f" -X {base}.gitVersion={version} -X {base}.gitMajor={major} -X {base}.gitMinor={minor}"
                      f" -X {base}.gitTreeState=clean")
        return flags

    def release(self, module: str = "k8s.io/kubernetes") -> str:
        """The version of `module` its go.mod requires (the Kubernetes release it builds)."""
        return next(line.split()[1] for line in (self.module / "go.mod").read_text().splitlines()
                    if line.split()[:1] == [module] or line.split()[:2] == ["require", module])

    @property
    def cache_dir(self) -> Path:
        digest = hashlib.sha256()
        for f in ("go.mod", "go.sum", *sorted(p.name for p in self.module.glob("*.go"))):
            digest.update((self.module / f).read_bytes())
        digest.update(go_version().encode())
        return CACHE / f"{self.name}-{digest.hexdigest()[:12]}"

    def built(self) -> bool:
        return (self.cache_dir / ".complete").exists()

    def build(self) -> None:
        """Build once. Builders of one component take turns (a lock file beside its cache): a second
        one (a test's fixture while `make go-tools` builds) once emptied the first one's partial
        directory, and the cache kept promtool without prometheus."""
        if self.built():
            return
        CACHE.mkdir(parents=True, exist_ok=True)
        with open(CACHE / f".{self.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not self.built():
                self._build()

    def _build(self) -> None:
        out = self.cache_dir
        tmp = out.with_name(out.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        log(f"building {self.name} ({', '.join(self.binaries())}) into {out}; the first time takes minutes")
        started = time.monotonic()
        for tool, binary in zip(self.tools(), self.binaries()):
            tags = [f"-tags={BUILD_TAGS[self.name]}"] if self.name in BUILD_TAGS else []
            cmd = ["go", "build", "-trimpath", f"-ldflags={self.ldflags()}", *tags, "-o", str(tmp / binary), tool]
            subprocess.run(cmd, cwd=self.module, check=True, env={**os.environ, "CGO_ENABLED": "0"})
        (tmp / ".complete").write_text(f"built in {time.monotonic() - started:.0f}s\n")
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
        log(f"built {self.name} in {time.monotonic() - started:.0f}s")


_GO_VERSION: str | None = None


def go_version() -> str:
    global _GO_VERSION
    if _GO_VERSION is None:
        if shutil.which("go") is None:
            raise ClusterError("the Go toolchain is needed to build the test control plane; `go` is not on PATH")
        _GO_VERSION = subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout.strip()
    return _GO_VERSION


def build() -> dict[str, Path]:
    """Build every component once; link the binaries into .cluster/bin; return name -> path."""
    paths: dict[str, Path] = {}
    for c in map(Component, COMPONENTS):
        c.build()
        paths.update({b: c.cache_dir / b for b in c.binaries()})
    bindir = STATE / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    for name, path in paths.items():
        link = bindir / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(path)
    return paths


# ---------------------------------------------------------------- certificates


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_pki(pki: Path) -> None:
    """A CA, the apiserver's serving cert, client certs per component, the service-account key."""
    if (pki / ".complete").exists():
        return
    shutil.rmtree(pki, ignore_errors=True)
    pki.mkdir(parents=True)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650", "-subj", "/CN=cronoq-test-ca",
            "-keyout", str(pki / "ca.key"), "-out", str(pki / "ca.crt"))
    openssl("genrsa", "-out", str(pki / "sa.key"), "2048")
    openssl("rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))
    sans = "subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default," \
           "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    issue(pki, "apiserver", "/CN=kube-apiserver", ["-extfile", _ext(pki, sans + "\nextendedKeyUsage=serverAuth")])
    client = ["-extfile", _ext(pki, "extendedKeyUsage=clientAuth")]
    issue(pki, "admin", "/O=system:masters/CN=cronoq-admin", client)
    issue(pki, "controller-manager", "/CN=system:kube-controller-manager", client)
    issue(pki, "scheduler", "/CN=system:kube-scheduler", client)
    # The API server's identity toward kubelets (logs, exec): a real node authorizes it by webhook.
    issue(pki, "apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client", client)
    (pki / ".complete").write_text("ok\n")


def _ext(pki: Path, text: str) -> str:
    path = pki / f"ext-{hashlib.sha1(text.encode()).hexdigest()[:8]}.cnf"
    path.write_text(text + "\n")
    return str(path)


def issue(pki: Path, name: str, subject: str, extra: list[str]) -> None:
    key, csr, crt = (str(pki / f"{name}.{s}") for s in ("key", "csr", "crt"))
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", key, "-out", csr)
    openssl("x509", "-req", "-in", csr, "-CA", str(pki / "ca.crt"), "-CAkey", str(pki / "ca.key"),
            "-CAcreateserial", "-days", "3650", "-out", crt, *extra)


def write_kubeconfig(path: Path, pki: Path, user: str) -> None:
    def b64(f: str) -> str:
        return base64.b64encode((pki / f).read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "cronoq-test", "cluster": {
            "server": f"https://127.0.0.1:{APISERVER}", "certificate-authority-data": b64("ca.crt")}}],
        "users": [{"name": user, "user": {
            "client-certificate-data": b64(f"{user}.crt"), "client-key-data": b64(f"{user}.key")}}],
        "contexts": [{"name": "cronoq-test", "context": {"cluster": "cronoq-test", "user": user}}],
        "current-context": "cronoq-test",
    }
    path.write_text(json.dumps(config, indent=2))  # JSON is YAML: every client reads it
    path.chmod(0o600)


# ---------------------------------------------------------------- processes


def pidfile(name: str) -> Path:
    return STATE / "run" / f"{name}.pid"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); look at its state.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def running(name: str) -> int | None:
    try:
        pid = int(pidfile(name).read_text())
    except (OSError, ValueError):
        return None
    return pid if alive(pid) else None


def start(name: str, argv: list[str]) -> None:
    logs = STATE / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    pidfile(name).parent.mkdir(parents=True, exist_ok=True)
    out = open(logs / f"{name}.log", "ab")
    # A session of its own: the cluster outlives the make or pytest process that started it.
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, cwd=STATE)
    pidfile(name).write_text(str(proc.pid))
    pidfile(name).with_suffix(".argv").write_text(json.dumps(argv))  # for `restart`


def stop(name: str) -> None:
    pid = running(name)
    if pid:
        os.killpg(pid, signal.SIGTERM) if _is_group_leader(pid) else os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    pidfile(name).unlink(missing_ok=True)


def restart(name: str) -> None:
    """Stop one component and start it again with the same arguments (fault tests: an API server
    or etcd going away mid-run), then wait until the cluster answers again."""
    if name not in PROCESSES:
        raise ClusterError(f"unknown component {name!r}; one of {', '.join(PROCESSES)}")
    argv = json.loads(pidfile(name).with_suffix(".argv").read_text())
    stop(name)
    start(name, argv)
    wait_for("kube-apiserver /readyz", lambda: api_get("/readyz")[0] == 200, 90, "kube-apiserver")
    log(f"restarted {name}")


def wait_for(what: str, check, timeout: float, logname: str | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if logname and running(logname) is None:
            raise ClusterError(f"{logname} exited while waiting for {what}; see {STATE / 'logs' / (logname + '.log')}")
        try:
            if check():
                return
        except (OSError, urllib.error.URLError, ssl.SSLError, ValueError):
            pass
        time.sleep(0.2)
    hint = f"; see {STATE / 'logs' / (logname + '.log')}" if logname else ""
    raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}{hint}")


def api_context() -> ssl.SSLContext:
    pki = STATE / "pki"
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    return ctx


def api_get(path: str, timeout: float = 2.0) -> tuple[int, bytes]:
    url = f"https://127.0.0.1:{APISERVER}{path}"
    try:
        with urllib.request.urlopen(url, context=api_context(), timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def api_patch(path: str, body: dict, timeout: float = 5.0) -> int:
    """A JSON merge patch."""
    request = urllib.request.Request(f"https://127.0.0.1:{APISERVER}{path}", method="PATCH", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/merge-patch+json"})
    try:
        with urllib.request.urlopen(request, context=api_context(), timeout=timeout) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


def api_delete(path: str, timeout: float = 5.0) -> int:
    request = urllib.request.Request(f"https://127.0.0.1:{APISERVER}{path}", method="DELETE")
    try:
        with urllib.request.urlopen(request, context=api_context(), timeout=timeout) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


def http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=1) as resp:
        return resp.status == 200


def ready_nodes() -> int:
    status, body = api_get("/api/v1/nodes")
    if status != 200:
        return 0
    count = 0
    for node in json.loads(body)["items"]:
        conds = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
        taints = [t["key"] for t in node.get("spec", {}).get("taints", []) or []]
        if conds.get("Ready") == "True" and "node.kubernetes.io/not-ready" not in taints:
            count += 1
    return count


def healthy(real_node: bool = bool(REAL_NODE)) -> bool:
    """Every process alive and the API answering (and the real node Ready, when asked for): `up`
    then has nothing to do."""
    if not all(running(n) for n in PROCESSES):
        return False
    try:
        return (api_get("/readyz")[0] == 200 and ready_nodes() >= NODES
                and (not real_node or realnode().healthy()))
    except (OSError, urllib.error.URLError, ssl.SSLError):
        return False


PROCESSES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


def node_manifest(i: int) -> dict:
    name = f"kwok-node-{i}"
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                       "kubernetes.io/arch": "amd64", "type": "kwok"},
        },
        "status": {"capacity": {"cpu": "64", "memory": "256Gi", "pods": "2000", "ephemeral-storage": "1Ti"}},
    }


def up() -> Path:
    """Start the cluster (or find it running); return the admin kubeconfig's path."""
    if healthy():
        log(f"already running; KUBECONFIG={KUBECONFIG}")
        return KUBECONFIG
    down(quiet=True)
    started = time.monotonic()
    bins = build()
    pki = STATE / "pki"
    make_pki(pki)
    for user in ("admin", "controller-manager", "scheduler"):
        write_kubeconfig(STATE / f"{user}.kubeconfig", pki, user)
    shutil.copy(STATE / "admin.kubeconfig", KUBECONFIG)
    KUBECONFIG.chmod(0o600)

    start("etcd", [str(bins["etcd"]), "--name=cronoq", f"--data-dir={STATE / 'etcd'}",
                   f"--listen-client-urls=http://127.0.0.1:{ETCD_CLIENT}",
                   f"--advertise-client-urls=http://127.0.0.1:{ETCD_CLIENT}",
                   f"--listen-peer-urls=http://127.0.0.1:{ETCD_PEER}",
                   f"--initial-advertise-peer-urls=http://127.0.0.1:{ETCD_PEER}",
                   f"--initial-cluster=cronoq=http://127.0.0.1:{ETCD_PEER}",
                   "--unsafe-no-fsync",  # a throwaway test store: durability buys nothing here
                   "--quota-backend-bytes=8589934592", "--log-level=warn"])
    wait_for("etcd", lambda: http_ok(f"http://127.0.0.1:{ETCD_CLIENT}/health"), 30, "etcd")

    start("kube-apiserver", [
        str(bins["kube-apiserver"]),
        f"--etcd-servers=http://127.0.0.1:{ETCD_CLIENT}",
        "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={APISERVER}",
        # Since 1.37 the endpoint reconciler refuses a loopback address for the `kubernetes`
        # Service; nothing here needs its endpoints (the real node DNATs the Service IP itself).
        "--endpoint-reconciler-type=none",
        f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",  # on top of the default set
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        f"--service-cluster-ip-range={SERVICE_RANGE}",
        "--allow-privileged=true",
        # /debug/pprof only when asked (the pull profile, a retired bench study): a test cluster serves no profiles.
        "--profiling=" + ("true" if os.environ.get("CRONOQ_APISERVER_PROFILING") == "1" else "false"),
        # Logs and exec go to the node's InternalIP (kwok, on loopback), not its unresolvable hostname.
        "--kubelet-preferred-address-types=InternalIP",
        f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
        f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
        "--max-requests-inflight=2000", "--max-mutating-requests-inflight=1000",
        *audit_flags(),
    ])
    wait_for("kube-apiserver /readyz", lambda: api_get("/readyz")[0] == 200, 90, "kube-apiserver")

    common = ["--bind-address=127.0.0.1", "--leader-elect=false"]
    cm = STATE / "controller-manager.kubeconfig"
    start("kube-controller-manager", [
        str(bins["kube-controller-manager"]), *common, f"--secure-port={CONTROLLER_MANAGER}",
        f"--kubeconfig={cm}", f"--authentication-kubeconfig={cm}", f"--authorization-kubeconfig={cm}",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={pki / 'ca.crt'}",
        f"--cluster-signing-cert-file={pki / 'ca.crt'}", f"--cluster-signing-key-file={pki / 'ca.key'}",
        "--controllers=*",
        # Client limits lifted, so the Job controller never is the bottleneck we measure.
        "--kube-api-qps=1000", "--kube-api-burst=2000",
        "--concurrent-job-syncs=50", "--concurrent-gc-syncs=50",
        f"--service-cluster-ip-range={SERVICE_RANGE}",
    ])
    sched_config = STATE / "scheduler-config.yaml"
    sched_kubeconfig = STATE / "scheduler.kubeconfig"
    sched_config.write_text(json.dumps({
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(sched_kubeconfig), "qps": 1000, "burst": 2000},
        "leaderElection": {"leaderElect": False},
    }))
    start("kube-scheduler", [
        str(bins["kube-scheduler"]), f"--config={sched_config}", "--bind-address=127.0.0.1",
        f"--secure-port={SCHEDULER}",
        f"--authentication-kubeconfig={sched_kubeconfig}", f"--authorization-kubeconfig={sched_kubeconfig}",
    ])
    start("kwok", [
        str(bins["kwok"]), f"--kubeconfig={KUBECONFIG}", f"--config={HACK / 'kwok-stages.yaml'}",
        f"--config={pod_logs()}",
        "--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
        "--node-ip=127.0.0.1", f"--node-port={KWOK}", f"--server-address=127.0.0.1:{KWOK}",
        "--cidr=10.244.0.1/16", "--node-lease-duration-seconds=40",
    ])
    nodes = STATE / "nodes.json"
    nodes.write_text(json.dumps({"apiVersion": "v1", "kind": "List",
                                 "items": [node_manifest(i) for i in range(NODES)]}))
    wait_for("nodes to be created", lambda: kubectl(bins, "apply", "-f", str(nodes)) == 0, 30)
    wait_for(f"{NODES} Ready kwok nodes", lambda: ready_nodes() >= NODES, 60, "kwok")
    # Pods need the namespace's default ServiceAccount, which the controller-manager creates.
    wait_for("the default ServiceAccount",
             lambda: api_get("/api/v1/namespaces/default/serviceaccounts/default")[0] == 200, 30,
             "kube-controller-manager")
    if REAL_NODE:
        realnode().up()
    log(f"up in {time.monotonic() - started:.1f}s; export KUBECONFIG={KUBECONFIG} PATH={STATE / 'bin'}:$PATH")
    return KUBECONFIG


def realnode():
    """hack/realnode.py, which builds on this module (and imports it by name: one copy of it)."""
    sys.modules.setdefault("devcluster", sys.modules[__name__])
    if str(HACK) not in sys.path:
        sys.path.insert(0, str(HACK))
    import realnode as module
    return module


POD_LOG_LINES = ("cronoq test cluster: a kwok pod runs no container;",
                 "this log is served by kwok for every pod (ClusterLogs in .cluster/kwok-logs.yaml)")
"""What `kubectl logs` (and `cronoq logs`) print for any pod of the test cluster."""


def pod_logs() -> Path:
    """kwok config serving POD_LOG_LINES as every pod's log (kwok's ClusterLogs), so that log
    reading goes the real way: API server → the node's kubelet endpoint (kwok) → a CRI log file.
    Written at start, since ClusterLogs needs an absolute path."""
    logfile = STATE / "pod-logs" / "task.log"
    logfile.parent.mkdir(parents=True, exist_ok=True)
    logfile.write_text("".join(f"2026-01-01T00:00:0{i}.000000000Z stdout F {line}\n"
                               for i, line in enumerate(POD_LOG_LINES)))
    config = STATE / "kwok-logs.yaml"
    config.write_text(json.dumps({"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "ClusterLogs",
                                  "metadata": {"name": "cronoq-pod-logs"},
                                  "spec": {"logs": [{"logsFile": str(logfile), "follow": False}]}}))
    return config


def audit_flags() -> list[str]:
    """With CRONOQ_AUDIT=1 the apiserver logs every request's user and verb (for bench/)."""
    if os.environ.get("CRONOQ_AUDIT") != "1":
        return []
    policy = STATE / "audit-policy.yaml"
    policy.write_text(json.dumps({"apiVersion": "audit.k8s.io/v1", "kind": "Policy",
                                  "omitStages": ["RequestReceived"], "rules": [{"level": "Metadata"}]}))
    return [f"--audit-policy-file={policy}", f"--audit-log-path={STATE / 'logs' / 'audit.log'}",
            "--audit-log-format=json", "--audit-log-mode=batch", "--audit-log-maxsize=0"]


def kubectl(bins: dict[str, Path], *args: str) -> int:
    return subprocess.run([str(bins["kubectl"]), f"--kubeconfig={KUBECONFIG}", *args],
                          capture_output=True).returncode


def down(quiet: bool = False) -> None:
    """Stop what `up` started (newest first; and an operator `make operator-up` started), then
    wipe the cluster state but keep the binaries. A real node goes first, while the API server
    can still tell its kubelet to tear its pods down."""
    realnode().down(quiet=quiet)
    for name in ("operator", *reversed(PROCESSES)):
        was = running(name)
        stop(name)
        if was and not quiet:
            log(f"stopped {name}")
    for sub in ("etcd", "run", "pki"):
        shutil.rmtree(STATE / sub, ignore_errors=True)
    for f in STATE.glob("*.kubeconfig"):
        f.unlink()
    KUBECONFIG.unlink(missing_ok=True)


def _is_group_leader(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


def status() -> int:
    for name in PROCESSES:
        pid = running(name)
        print(f"{name:24} {'running pid ' + str(pid) if pid else 'stopped'}")
    ok = healthy()
    print(f"{'cluster':24} {'healthy, KUBECONFIG=' + str(KUBECONFIG) if ok else 'not healthy'}")
    return 0 if ok else 1


def main(argv: list[str]) -> int:
    cmd = argv[1] if len(argv) > 1 else "status"
    try:
        if cmd == "build" and len(argv) > 2:  # named build modules only, e.g. TEST_ONLY's
            for component in map(Component, argv[2:]):
                component.build()
                for binary in component.binaries():
                    print(f"{binary:24} {component.cache_dir / binary}")
        elif cmd == "build":
            for name, path in build().items():
                print(f"{name:24} {path}")
        elif cmd == "up":
            print(up())
        elif cmd == "down":
            down()
        elif cmd == "status":
            return status()
        elif cmd == "restart" and len(argv) > 2:
            restart(argv[2])
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except ClusterError as err:
        log(f"error: {err}")
        return 1
    except subprocess.CalledProcessError as err:
        log(f"error: {' '.join(map(str, err.cmd))} exited {err.returncode}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
