"""The worker's HTTP endpoints: `/metrics`, `/healthz` and `/readyz`, on a bounded server.

`/healthz` is 200 while the process serves HTTP; `/readyz` is 200 or 503 with the JSON of
the readiness check; anything else is the Prometheus exposition of the registry.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, make_wsgi_app
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.server import TcpWSGIServer
from waitress.task import ThreadedTaskDispatcher

# The metrics server (`MetricsServer`). The address is `metrics_host` (`DEFAULT_METRICS_HOST`:
# every interface, for containers; 127.0.0.1 for a laptop).
DEFAULT_METRICS_HOST = "0.0.0.0"
METRICS_THREADS = 2  # threads answering requests, whatever the number of connections
METRICS_CONNECTION_LIMIT = 500  # open connections in all (see `MetricsServer` past it)
METRICS_CONNECTIONS_PER_CLIENT = 50  # open connections from one remote address
METRICS_REQUEST_DEADLINE = 2.0  # seconds to receive a whole request, however it trickles
METRICS_IDLE_TIMEOUT = 10  # seconds a connection may stay idle between requests
METRICS_CLEANUP_INTERVAL = 1  # seconds between checks for late and idle connections
METRICS_MAX_HEADER_BYTES = 16 * 1024  # request headers (and bodies, which none needs)


def endpoints_app(
    registry: CollectorRegistry, readiness: Callable[[], dict[str, Any]]
) -> Callable[..., Iterable[bytes]]:
    """The WSGI application of the three endpoints."""
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/healthz":
            return _reply(start_response, "200 OK", b'{"status":"ok"}')
        if path == "/readyz":
            state = readiness()
            status = "200 OK" if state["ready"] else "503 Service Unavailable"
            return _reply(start_response, status, orjson.dumps(state))
        return metrics(environ, start_response)

    return app


def _reply(start_response: Callable[..., Any], status: str, body: bytes) -> list[bytes]:
    start_response(
        status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    )
    return [body]


class _DeadlineChannel(HTTPChannel):
    """A waitress connection that notes when the request it is receiving began: at
    accept for the first request, at its first byte for each later one."""

    server: _GuardedServer

    def __init__(self, server: _GuardedServer, sock: Any, addr: Any, adj: Any, map: Any) -> None:
        self.request_began: float | None = time.monotonic()
        super().__init__(server, sock, addr, adj, map=map)
        self.client = str(addr[0])
        server.track(self)

    def received(self, data: bytes) -> bool:
        if self.request is None and self.request_began is None:
            self.request_began = time.monotonic()
        handled: bool = super().received(data)
        if self.request is None:  # every byte so far belongs to complete requests
            self.request_began = None
        return handled

    def del_channel(self, map: Any = None) -> None:
        self.server.untrack(self)
        super().del_channel(map)

    def waiting(self) -> bool:
        """Nothing of this connection is being answered: it may be closed at no cost."""
        return not self.requests


class _GuardedServer(TcpWSGIServer):
    """Waitress's TCP server with a request deadline and connection caps.

    A request not received whole within `request_deadline` s is closed at the next
    maintenance pass. A new connection is always accepted while some connection is
    waiting for a request: past `per_client` connections from its address, the oldest
    waiting one from that address is closed; past `connection_limit` in all, the oldest
    waiting one of the address holding the most. A client that sends its request at
    once (a scraper, a probe) is thus answered however many slow sockets are open."""

    channel_class = _DeadlineChannel
    next_channel_cleanup: float = 0  # as in waitress (time.time() of the next maintenance)

    def __init__(
        self,
        app: Callable[..., Iterable[bytes]],
        adj: Adjustments,
        socket_map: dict[int, Any],
        *,
        per_client: int,
        request_deadline: float,
    ) -> None:
        self.per_client = per_client
        self.request_deadline = request_deadline
        self.by_client: dict[str, dict[_DeadlineChannel, None]] = {}  # oldest first
        dispatcher = ThreadedTaskDispatcher()
        dispatcher.set_thread_count(adj.threads)
        super().__init__(
            app, map=socket_map, dispatcher=dispatcher, adj=adj, sockinfo=adj.listen[0]
        )

    def track(self, channel: _DeadlineChannel) -> None:
        self.by_client.setdefault(channel.client, {})[channel] = None

    def untrack(self, channel: _DeadlineChannel) -> None:
        connections = self.by_client.get(channel.client, {})
        connections.pop(channel, None)
        if not connections:
            self.by_client.pop(channel.client, None)

    def readable(self) -> bool:
        """Run maintenance when due; accept while below the limit or some connection
        is waiting (it will be closed for the new one)."""
        now = time.time()
        if now >= self.next_channel_cleanup:
            self.next_channel_cleanup = now + self.adj.cleanup_interval
            self.maintenance(now)
        if not self.accepting:
            return False
        if len(self.active_channels) < self.adj.connection_limit:
            return True
        return any(channel.waiting() for channel in self.active_channels.values())

    def maintenance(self, now: float) -> None:
        """Close connections idle past the timeout (waitress) or late past the deadline."""
        super().maintenance(now)
        cutoff = time.monotonic() - self.request_deadline
        for channel in self.active_channels.values():
            began = channel.request_began
            if began is not None and began < cutoff and channel.waiting():
                channel.will_close = True

    def handle_accept(self) -> None:
        try:
            accepted = self.accept()
            if accepted is None:
                return
            conn, addr = accepted
            self.set_socket_options(conn)
        except OSError:
            return  # the peer left before accept finished: nothing to serve
        if not self._make_room_for(str(addr[0])):
            conn.close()  # every connection it could replace is being answered
            return
        self.channel_class(self, conn, addr, self.adj, map=self._map)

    def _make_room_for(self, client: str) -> bool:
        """Close the oldest waiting connection if a new one from `client` would pass a
        cap; False if there is none to close."""
        from_client = self.by_client.get(client, {})
        if len(from_client) >= self.per_client:
            victim = _oldest_waiting(from_client)
        elif len(self.active_channels) >= self.adj.connection_limit:
            largest = max(self.by_client.values(), key=len)
            victim = _oldest_waiting(largest) or _oldest_waiting(self.active_channels.values())
        else:
            return True
        if victim is None:
            return False
        victim.handle_close()
        return True


def _oldest_waiting(channels: Iterable[_DeadlineChannel]) -> _DeadlineChannel | None:
    return next((channel for channel in channels if channel.waiting()), None)


class MetricsServer:
    """A bounded HTTP server for the metrics endpoints, on waitress.

    The former server (wsgiref with a thread per connection and no timeout) grew a
    thread for every idle socket. Waitress reads requests on one poll loop and hands
    only complete requests to a fixed pool of threads, so idle or slow connections cost
    a socket, not a thread. A request must arrive whole within `request_deadline` s and
    a connection idle between requests is closed after `idle_timeout` s (both checked
    every `METRICS_CLEANUP_INTERVAL` s). Past `connections_per_client` connections from
    one address or `connection_limit` in all, a new connection replaces the oldest one
    still waiting for its request (see `_GuardedServer`), so slow sockets, even from the
    scraper's own address, cannot keep `/healthz` or `/metrics` from being answered."""

    def __init__(
        self,
        app: Callable[..., Iterable[bytes]],
        host: str,
        port: int,
        *,
        threads: int = METRICS_THREADS,
        connection_limit: int = METRICS_CONNECTION_LIMIT,
        connections_per_client: int = METRICS_CONNECTIONS_PER_CLIENT,
        request_deadline: float = METRICS_REQUEST_DEADLINE,
        idle_timeout: int = METRICS_IDLE_TIMEOUT,
    ) -> None:
        self._map: dict[int, Any] = {}
        adjustments = Adjustments(
            host=host,
            port=port,
            threads=threads,
            connection_limit=connection_limit,
            channel_timeout=idle_timeout,
            cleanup_interval=METRICS_CLEANUP_INTERVAL,
            max_request_header_size=METRICS_MAX_HEADER_BYTES,
            max_request_body_size=METRICS_MAX_HEADER_BYTES,
            asyncore_loop_timeout=1,
            asyncore_use_poll=True,  # select() fails on descriptors past 1024
            ident="scorestream",
            expose_tracebacks=False,
        )
        self._server = _GuardedServer(
            app,
            adjustments,
            self._map,
            per_client=connections_per_client,
            request_deadline=request_deadline,
        )
        self.port = int(self._server.effective_port)
        self.host = str(self._server.effective_host)
        self._thread = threading.Thread(target=self._server.run, name="metrics", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Close every connection and the listening socket, and end the threads."""

        def close_all() -> None:  # runs on the server's loop thread
            for dispatcher in list(self._map.values()):
                dispatcher.close()

        self._server.task_dispatcher.shutdown(cancel_pending=True, timeout=timeout)
        try:
            self._server.trigger.pull_trigger(close_all)
        except OSError:
            # The loop's wake-up pipe is already closed (seen once in CI: EBADF on the
            # write), so the thunk would never run. Close from here instead: the loop
            # wakes within `asyncore_loop_timeout`, finds its map empty and returns.
            close_all()
        self._thread.join(timeout)
