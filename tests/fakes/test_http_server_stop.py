"""The emulator's HTTP server stops cleanly even when a request's thread ends after stop() (issue 37: a full run
failed with EBADF from waitress's trigger pipe while an emulator stopped)."""

from __future__ import annotations

import http.client
import os
import threading

from gcpgpu.fakes.http_server import HttpServer


def test_a_requests_thread_that_ends_after_stop_writes_nothing_anywhere():
    """A request's thread wakes the I/O loop as it ends, after its client has the answer; the client's test
    may have stopped the server by then. That wake-up must neither fail nor reach the file that now holds
    the closed pipe's number."""
    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    srv = HttpServer(app, "127.0.0.1")
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    conn.request("GET", "/")
    assert conn.getresponse().read() == b"ok"
    conn.close()
    wake = srv._server.pull_trigger  # what each request's thread calls as it ends (waitress's channel.service)
    trigger_fd = srv._server.trigger.trigger
    srv.stop()
    # The next files opened take the numbers the trigger pipe had, as the next emulator's pipes and files do.
    pipes = [os.pipe() for _ in range(4)]
    try:
        reused = [w for _r, w in pipes if w == trigger_fd] + [r for r, _w in pipes if r == trigger_fd]
        assert reused, "no pipe took the closed trigger's number"
        errors: list[BaseException] = []

        def late_request_end() -> None:
            try:
                wake()
            except BaseException as e:  # noqa: BLE001 - what the thread would have died of
                errors.append(e)

        t = threading.Thread(target=late_request_end)
        t.start()
        t.join(10)
        assert errors == []
        for r, _w in pipes:
            os.set_blocking(r, False)
            try:
                got = os.read(r, 10)
            except BlockingIOError:
                got = b""
            assert got == b"", "the late wake-up wrote into a file that was not its own"
    finally:
        for r, w in pipes:
            os.close(r)
            os.close(w)
