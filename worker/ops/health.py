"""The worker's HTTP endpoints: `/metrics`, `/healthz` and `/readyz`, on a bounded server.

`/healthz` is 200 while the process serves HTTP; `/readyz` is 200 or 503 with the JSON of
the readiness check; anything else is the Prometheus exposition of the registry.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

import orjson
import waitress
from prometheus_client import CollectorRegistry, make_wsgi_app

# The metrics server (`MetricsServer`). The address is `metrics_host` (`DEFAULT_METRICS_HOST`:
# every interface, for containers; 127.0.0.1 for a laptop).
DEFAULT_METRICS_HOST = "0.0.0.0"
METRICS_THREADS = 2  # threads answering requests, whatever the number of connections
METRICS_CONNECTION_LIMIT = 500  # open connections; past it new ones wait in the backlog
METRICS_IDLE_TIMEOUT = 10  # seconds a connection may stay idle (or stalled mid-request)
METRICS_CLEANUP_INTERVAL = 1  # seconds between checks for idle connections
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


class MetricsServer:
    """A bounded HTTP server for the metrics endpoints, on waitress.

    The former server (wsgiref with a thread per connection and no timeout) grew a
    thread for every idle socket. Waitress reads requests on one asyncore loop and hands
    only complete requests to a fixed pool of threads, so idle or slow connections cost
    a socket, not a thread; it stops accepting past its connection limit and closes
    connections idle past the timeout (checked every `METRICS_CLEANUP_INTERVAL` s)."""

    def __init__(
        self,
        app: Callable[..., Iterable[bytes]],
        host: str,
        port: int,
        *,
        threads: int = METRICS_THREADS,
        connection_limit: int = METRICS_CONNECTION_LIMIT,
        idle_timeout: int = METRICS_IDLE_TIMEOUT,
    ) -> None:
        self._map: dict[int, Any] = {}
        self._server: Any = waitress.create_server(
            app,
            map=self._map,
            host=host,
            port=port,
            threads=threads,
            connection_limit=connection_limit,
            channel_timeout=idle_timeout,
            cleanup_interval=METRICS_CLEANUP_INTERVAL,
            max_request_header_size=METRICS_MAX_HEADER_BYTES,
            max_request_body_size=METRICS_MAX_HEADER_BYTES,
            asyncore_loop_timeout=1,
            ident="scorestream",
            expose_tracebacks=False,
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
