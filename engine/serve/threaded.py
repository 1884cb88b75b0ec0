"""The server on uvicorn in a thread of this process (tests, benches, a notebook): `with serving(app) as url:`."""

import contextlib
import socket
import threading
import time

START_TIMEOUT = 30.0  # seconds


@contextlib.contextmanager
def serving(app, host: str = "127.0.0.1", port: int = 0, send_buffer: int | None = None):
    """app served at host (a free port by default) -> its /v1 URL; stopped when the block ends. send_buffer:
    the kernel's send buffer of every connection, in bytes (a test of a client that stops reading fills it)."""
    import uvicorn

    from engine.serve.guard import uvicorn_config

    server = uvicorn.Server(uvicorn_config(app, host, port))
    sockets = None
    if send_buffer is not None:  # a listening socket's buffer sizes pass to the connections it accepts
        listener = socket.create_server((host, port))
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
        sockets = [listener]
    thread = threading.Thread(target=server.run, kwargs={"sockets": sockets}, daemon=True, name="uvicorn")
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError("the server did not start (uvicorn's log says why)")
        time.sleep(0.02)
    bound = server.servers[0].sockets[0].getsockname()[1]  # the port the system gave (port 0: any free one)
    try:
        yield f"http://{host}:{bound}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
