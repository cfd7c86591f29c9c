"""A TCP proxy that can stall the connections open at one moment while new ones pass: what a NAT
or load balancer does when it loses a flow's state (an idle timeout, a failover) and goes on
holding the connection without forwarding a byte of it. Neither end sees a close or a reset; TCP
keepalives are answered by the proxy's own sockets. Only a client's own timeout can notice.

Toxiproxy cannot do this: a toxic applies to every connection of its proxy, the new ones too
(tests/support/toxiproxy.py), so stalling the watches that way would stall their replacements.

    with Blackhole(upstream="127.0.0.1:26443") as hole:
        kubeconfig = through(admin_kubeconfig, hole, tmp_path / "k")   # hole.listen is host:port
        ...
        hole.stall()   # every connection open now: nothing more through it, either way, ever
"""
from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field


@dataclass(eq=False)
class _Link:
    stalled: bool = False


@dataclass
class Blackhole:
    upstream: str
    """host:port to forward to."""
    listen: str = ""
    """host:port it listens on, set once started."""
    _links: set[_Link] = field(default_factory=set)
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _never: asyncio.Event | None = None

    def __enter__(self) -> Blackhole:
        started = threading.Event()
        self._loop = asyncio.new_event_loop()

        async def serve() -> None:
            self._never = asyncio.Event()
            server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
            self.listen = "127.0.0.1:%d" % server.sockets[0].getsockname()[1]
            started.set()
            async with server:
                await self._never.wait()
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in rest:
                t.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(serve(),), daemon=True)
        self._thread.start()
        if not started.wait(10):
            raise AssertionError("the blackhole proxy did not start")
        return self

    def __exit__(self, *_: object) -> None:
        assert self._loop is not None and self._never is not None and self._thread is not None
        self._loop.call_soon_threadsafe(self._never.set)
        self._thread.join(timeout=10)

    def stall(self) -> int:
        """Stall every connection open now; those opened afterwards pass. Returns how many."""
        assert self._loop is not None

        def mark() -> int:
            for link in self._links:
                link.stalled = True
            return len(self._links)
        return asyncio.run_coroutine_threadsafe(_call(mark), self._loop).result(timeout=10)

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        host, port = self.upstream.rsplit(":", 1)
        try:
            server_r, server_w = await asyncio.open_connection(host, int(port))
        except OSError:
            client_w.close()
            return
        link = _Link()
        self._links.add(link)
        try:
            await asyncio.gather(self._pump(client_r, server_w, link), self._pump(server_r, client_w, link))
        finally:
            self._links.discard(link)
            for w in (client_w, server_w):
                w.close()

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, link: _Link) -> None:
        assert self._never is not None
        while True:
            try:
                data = await source.read(65536)
            except OSError:
                data = b""
            if link.stalled:  # hold the connection open and forward nothing, until the proxy stops
                await self._never.wait()
                return
            if not data:
                if sink.can_write_eof():
                    sink.write_eof()
                return
            sink.write(data)
            try:
                await sink.drain()
            except OSError:
                return


async def _call(fn):  # noqa: ANN001, ANN202 - a plain function run in the proxy's loop
    return fn()
