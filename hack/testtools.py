#!/usr/bin/env python3
"""Install the system tools the tests run besides the control plane, when missing:

    python3 hack/testtools.py      # faketime (libfaketime), for the clock-skew fault test;
                                   # chromium and chromedriver, for the dashboard's browser test;
                                   # postgresql, the real database of the fencing tests
                                   # (tests/support/postgres.py)

From Debian's packages with apt-get (we run as root on Debian; CI starts on a fresh machine),
as hack/image.py installs podman. Standard library only: make runs it before anything else.
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys

PACKAGES = {"faketime": "faketime", "chromium": "chromium", "chromedriver": "chromium-driver", "initdb": "postgresql"}
"""Binary → the Debian package that provides it."""
ELSEWHERE = {"initdb": "/usr/lib/postgresql/*/bin/initdb"}
"""Binaries a package installs off PATH (Debian's postgresql puts only wrappers there)."""


def found(binary: str) -> bool:
    return shutil.which(binary) is not None or bool(glob.glob(ELSEWHERE.get(binary, "/nonexistent")))


def main() -> int:
    missing = sorted({package for binary, package in PACKAGES.items() if not found(binary)})
    if not missing:
        return 0
    if shutil.which("apt-get") is None:
        print(f"testtools: {', '.join(missing)} missing and no apt-get to install them; install them by hand",
              file=sys.stderr)
        return 1
    print(f"testtools: installing {' '.join(missing)} from Debian's packages", file=sys.stderr, flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=True, env=env, stdout=subprocess.DEVNULL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
