"""The emulator's HTTP server: waitress on 127.0.0.1, with a bounded number of threads.

Waitress reads every request (its head and body) in one I/O loop and hands only complete requests to
a fixed pool of THREADS threads. A client that connects and sends nothing, or a byte a minute, or
keeps an idle keep-alive connection, costs a socket and a little buffer, never a thread, so
thousands of them leave the API answering; a connection idle for IDLE_TIMEOUT_S seconds is closed.
(A thread per connection, as a development server has, let 3,000 slow clients pin 3,000 threads.)
Bodies larger than a little are buffered on disk, not in memory, until the request is complete.
"""

from __future__ import annotations

import logging
import resource
import threading
from collections.abc import Callable, Iterable
from typing import Any

THREADS = 64  # requests served at once: the tool waits on up to 32 operations in parallel
IDLE_TIMEOUT_S = 30  # a connection with no request in progress and no byte received this long is closed
MAX_UPLOAD = 2**40  # the largest request waitress buffers; the gate caps every body but media uploads far lower


def connection_limit() -> int:
    """Connections held at once: as many as this process's open-file limit leaves room for (at most 10,000)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 10_000
    return max(100, min(10_000, soft - 256))


class HttpServer:
    """One WSGI app served on host:port in a background thread until stop()."""

    def __init__(self, app: Callable[[dict, Callable], Iterable[bytes]], host: str, port: int = 0) -> None:
        from waitress import wasyncore
        from waitress.server import create_server

        # Waitress warns of every request that waits for a free thread (a burst is normal here) and of handlers
        # still running at stop (their threads are daemons); an emulator bug's traceback (ERROR) still shows.
        logging.getLogger("waitress").setLevel(logging.ERROR)
        self._wasyncore = wasyncore
        self._server: Any = create_server(
            app, host=host, port=port, threads=THREADS, ident="gcpgpu-emulator",
            channel_timeout=IDLE_TIMEOUT_S, cleanup_interval=max(1, min(5, IDLE_TIMEOUT_S)),
            connection_limit=connection_limit(), max_request_body_size=MAX_UPLOAD,
            asyncore_use_poll=True,  # select() stops at file descriptor 1024
            asyncore_loop_timeout=1, clear_untrusted_proxy_headers=False)
        self.port = int(self._server.effective_port)  # waitress gives it as text
        # A request's thread wakes the I/O loop through the trigger pipe as it ends, which may be just after its
        # client has its answer and stop() has closed that pipe: its write then failed (EBADF, an exception in
        # the thread) or, once the number was reused, put a byte into whatever file now held it (the next
        # emulator's trigger, a socket, a state file being saved). So the pipe closes under a lock, and a
        # wake-up after that is dropped: nothing is left for the loop to do then.
        self._closing = threading.Lock()
        self._closed = False
        self._server.pull_trigger = self._pull_trigger
        self._thread = threading.Thread(target=self._server.run, name="emulator-http", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Close every connection and the listening socket, then let the threads go (returns in well under a second)."""
        server = self._server

        def close_all() -> None:
            with self._closing:
                self._closed = True
                self._wasyncore.close_all(server._map, ignore_all=True)

        # The I/O loop closes its own sockets (a thunk runs in its thread) and ends when none is left.
        with self._closing:
            if self._closed:
                return
        server.trigger.pull_trigger(close_all)
        self._thread.join(5)
        server.task_dispatcher.shutdown(cancel_pending=True, timeout=0.5)

    def _pull_trigger(self) -> None:
        with self._closing:
            if not self._closed:
                self._server.trigger.pull_trigger()
