"""A real Postgres server for the tests: Debian's `postgresql` package (installed by `make test`,
hack/testtools.py), its own cluster made by initdb in a temporary directory, listening on a free
port of 127.0.0.1 (and a Unix socket in that directory, nowhere else), stopped by its pid.

Postgres refuses to run as root, so when the tests run as root (CI does) the server runs as the
package's `postgres` user, which owns the directory. Every database is local and trusted: no
password, nothing reachable from outside the machine.
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.operator import free_port
from tests.support.waiting import wait_until

SUPERUSER = "cronoq"


def binaries() -> Path:
    """The directory of initdb and postgres: on PATH, else Debian's /usr/lib/postgresql/<version>/bin
    (the package puts only wrappers on PATH), the newest version."""
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if not versions:
        raise FileNotFoundError("no initdb: install Debian's postgresql package (`make test-tools` does)")
    return Path(versions[-1]).parent


@dataclass
class PostgresServer:
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="cronoq-pg-")))
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None
    _databases: int = 0

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        return self.root / "postgres.log"

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user={SUPERUSER} dbname={dbname} connect_timeout=5"

    def _as_owner(self) -> dict:
        """Popen arguments that run a command as the directory's owner (`postgres` when we are root)."""
        if os.geteuid() != 0:
            return {}
        owner = pwd.getpwnam("postgres")
        return {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []}

    def start(self) -> PostgresServer:
        bin_dir = binaries()
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
        env = {**os.environ, "LC_ALL": "C.UTF-8", "TZ": "UTC"}
        subprocess.run([str(bin_dir / "initdb"), "-D", str(self.data), "-U", SUPERUSER, "--auth=trust",
                        "--encoding=UTF8", "--no-sync"], check=True, env=env, cwd=self.root,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **self._as_owner())
        log = open(self.log_path, "ab")
        # fsync off: the tests check what commits, not what survives a power cut, and the machine is shared.
        self.process = subprocess.Popen(
            [str(bin_dir / "postgres"), "-D", str(self.data), "-p", str(self.port), "-h", "127.0.0.1",
             "-k", str(self.root), "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
             "-c", "max_connections=200", "-c", "shared_buffers=32MB"],
            env=env, cwd=self.root, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            **self._as_owner())
        wait_until(self.ready, timeout=60, what=f"Postgres on 127.0.0.1:{self.port} (log: {self.log_path})")
        return self

    def ready(self) -> bool:
        import psycopg

        if self.process is None or self.process.poll() is not None:
            raise AssertionError(f"postgres exited; see {self.log_path}:\n{self.tail()}")
        try:
            with psycopg.connect(self.dsn(), connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def database(self, prefix: str = "t") -> str:
        """A new, empty database; its DSN."""
        import psycopg

        self._databases += 1
        name = f"{prefix}_{os.getpid()}_{self._databases}"
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    def stop(self) -> None:
        """Fast shutdown (SIGINT: roll back what is open, then stop), SIGKILL if it hangs; then the directory goes."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        deadline = time.monotonic() + 5
        while self.root.exists() and time.monotonic() < deadline:
            shutil.rmtree(self.root, ignore_errors=True)

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
