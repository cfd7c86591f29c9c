#!/usr/bin/env python3
"""Build cronoq's images on this machine, with podman or docker, whichever works here.

    python3 hack/image.py build            # the operator image, the worker example's and the effects image
    python3 hack/image.py engine           # print the engine that would build them
    python3 hack/image.py tags             # print the tags the build gives

docker is used when its daemon answers; otherwise podman, installed from Debian's packages when
missing (we run as root on Debian; CI starts on a fresh machine). CRONOQ_ENGINE=podman|docker
forces one (the image tests run their containers with podman, so they build with it). The public build pulls
`python:3.11-slim-bookworm`; where no image registry is reachable, the podman build makes an
equivalent base from Debian's packages (mmdebstrap, about 30 s), cached as a tarball in
~/.cache/cronoq and imported once into podman's storage, so later builds reuse it;
CRONOQ_IMAGE_BASE=<image> uses that base instead (where a registry is reachable).

The machine's CA bundle is mounted read-only over the image's during the build, and pip is told
to use it: package downloads may go through a TLS-inspecting proxy that only it trusts.

Standard library only: `make image` runs it before anything is installed.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("CRONOQ_CACHE", Path.home() / ".cache" / "cronoq"))
OPERATOR_IMAGE = os.environ.get("CRONOQ_IMAGE", "localhost/cronoq/operator:dev")
WORKER_IMAGE = os.environ.get("CRONOQ_WORKER_IMAGE", "localhost/cronoq/worker-example:dev")
EFFECTS_IMAGE = os.environ.get("CRONOQ_EFFECTS_IMAGE", "localhost/cronoq/effects:dev")
"""The exactly-once run's Job-mode task image (tests/realnode/effects.Dockerfile): the operator
image with Debian's python3-psycopg and tests/support/effects.py."""
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"

# The local base: Debian bookworm's Python 3.11 with venv and pip, like python:3.11-slim-bookworm.
SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-pip", "python3-venv", "ca-certificates")
DEBIAN_PACKAGES = ("podman", "runc", "mmdebstrap")


def log(msg: str) -> None:
    print(f"image: {msg}", file=sys.stderr, flush=True)


def run(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, **kwargs)


def docker_works() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0


def engine() -> str:
    """'docker' when a docker daemon answers, else 'podman' (installed when missing)."""
    forced = os.environ.get("CRONOQ_ENGINE")
    if forced not in (None, "", "podman", "docker"):
        raise SystemExit(f"image: CRONOQ_ENGINE={forced}: podman or docker")
    if forced == "docker" or (not forced and docker_works()):
        return "docker"
    # mmdebstrap only makes the local base; a base given by CRONOQ_IMAGE_BASE is pulled instead.
    wanted = DEBIAN_PACKAGES if not os.environ.get("CRONOQ_IMAGE_BASE") else ("podman", "runc")
    missing = [p for p in wanted if shutil.which(p) is None]  # each package's binary has its name
    if missing:
        if shutil.which("apt-get") is None:
            raise SystemExit(f"image: neither a docker daemon nor podman here, and no apt-get to install {missing}")
        log(f"installing {' '.join(missing)} from Debian's packages")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        run("apt-get", "update", "-qq", env=env)
        run("apt-get", "install", "-y", "-qq", *missing, env=env, stdout=subprocess.DEVNULL)
    return "podman"


def podman(*args: str) -> list[str]:
    """A podman command line. crun refuses this machine's hybrid cgroup layout; runc does not."""
    return ["podman", "--runtime", "runc", *args]


def engine_argv(name: str, *args: str) -> list[str]:
    return podman(*args) if name == "podman" else ["docker", *args]


def local_base() -> str:
    """The tag of the Debian-made base in podman's storage, made (and cached) when missing."""
    digest = hashlib.sha256(f"{SUITE} minbase {' '.join(BASE_PACKAGES)}".encode()).hexdigest()[:12]
    tag = f"localhost/cronoq/base:{SUITE}-{digest}"
    if subprocess.run(podman("image", "exists", tag)).returncode == 0:
        return tag
    tarball = CACHE / f"image-base-{digest}" / "base.tar"
    if not tarball.exists():
        tarball.parent.mkdir(parents=True, exist_ok=True)
        partial = tarball.with_name("base.partial.tar")  # mmdebstrap picks its output format by the name
        log(f"making the {SUITE} base from Debian's packages into {tarball} (about 30 s)")
        started = time.monotonic()
        run("mmdebstrap", "--quiet", "--variant=minbase", "--format=tar", f"--include={','.join(BASE_PACKAGES)}", SUITE, str(partial))
        partial.rename(tarball)
        log(f"made the base in {time.monotonic() - started:.0f}s")
    log(f"importing {tarball} as {tag}")
    run(*podman("import", "--quiet", str(tarball), tag), stdout=subprocess.DEVNULL)
    return tag


def build_args(name: str) -> list[str]:
    """The engine's build flags for this machine: the CA bundle, the local base for podman."""
    args: list[str] = []
    if Path(CA_BUNDLE).is_file():
        args += [f"--build-arg=PIP_CERT={CA_BUNDLE}"]
        if name == "podman":  # docker build has no bind mounts; its daemon trusts what it trusts
            args += [f"--volume={CA_BUNDLE}:{CA_BUNDLE}:ro"]
    if name == "podman":
        # CRONOQ_IMAGE_BASE names a base to pull where a registry is reachable (CI's runners).
        base = os.environ.get("CRONOQ_IMAGE_BASE") or local_base()
        args += ["--network=host", f"--build-arg=BASE={base}"]
    return args


def build(name: str, *, worker: bool = True) -> None:
    common = build_args(name)
    started = time.monotonic()
    log(f"building {OPERATOR_IMAGE} with {name}")
    run(*engine_argv(name, "build", *common, f"--tag={OPERATOR_IMAGE}", "--file=Dockerfile", "."), cwd=REPO)
    log(f"built {OPERATOR_IMAGE} in {time.monotonic() - started:.0f}s ({size(name, OPERATOR_IMAGE)})")
    if worker:
        started = time.monotonic()
        context = REPO / "examples" / "worker"
        run(*engine_argv(name, "build", f"--build-arg=BASE={OPERATOR_IMAGE}", f"--tag={WORKER_IMAGE}",
                         "--file=Dockerfile", "."), cwd=context)
        log(f"built {WORKER_IMAGE} in {time.monotonic() - started:.0f}s ({size(name, WORKER_IMAGE)})")
        started = time.monotonic()
        # psycopg's stage is on the base (cached while the operator image changes): the same flags.
        run(*engine_argv(name, "build", *common, f"--build-arg=OPERATOR={OPERATOR_IMAGE}", f"--tag={EFFECTS_IMAGE}",
                         f"--file={REPO / 'tests' / 'realnode' / 'effects.Dockerfile'}", "."),
            cwd=REPO / "tests" / "support")
        log(f"built {EFFECTS_IMAGE} in {time.monotonic() - started:.0f}s ({size(name, EFFECTS_IMAGE)})")


def size(name: str, tag: str) -> str:
    out = subprocess.run(engine_argv(name, "image", "inspect", "--format={{.Size}}", tag),
                         capture_output=True, text=True).stdout.strip()
    return f"{int(out) / 1e6:.0f} MB" if out.isdigit() else "size unknown"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the operator image, the worker example's image and the effects image")
    b.add_argument("--no-worker", action="store_true", help="the operator image only")
    sub.add_parser("engine", help="print the engine that builds and runs the images")
    sub.add_parser("tags", help="print the tags of the images it builds")
    args = parser.parse_args(argv)
    if args.command == "engine":
        print(engine())
    elif args.command == "tags":
        print(OPERATOR_IMAGE)
        print(WORKER_IMAGE)
        print(EFFECTS_IMAGE)
    else:
        build(engine(), worker=not args.no_worker)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
