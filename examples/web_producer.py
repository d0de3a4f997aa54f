"""A web handler that dispatches tasks: ``python examples/web_producer.py``.

A tiny Trio HTTP endpoint (``POST /thumbnails`` with a JSON body) that enqueues a task
for the workers of examples/worker.py and answers 202 with the task id. A web
application only produces: it opens a client, never a runner. Run with ``--self-test``
to start it, post one request to it, and stop (the test suite does that).
"""

from __future__ import annotations

import json
import os
import sys
from functools import partial

import trio

import trunner

GROUP = "thumbnails"


async def handle(stream: trio.SocketStream, client: trunner.Client) -> None:
    request = b""
    while b"\r\n\r\n" not in request:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return
        request += chunk
    head, _, body = request.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    length = next(
        (
            int(v)
            for k, _, v in (h.partition(":") for h in lines[1:])
            if k.lower() == "content-length"
        ),
        0,
    )
    while len(body) < length:
        body += await stream.receive_some(65536)
    if (method, path) != ("POST", "/thumbnails"):
        status, answer = "404 Not Found", {"error": "POST /thumbnails"}
    else:
        try:
            task_id = await client.dispatch("resize", json.loads(body))
            status, answer = "202 Accepted", {"task_id": task_id}
        except (ValueError, trunner.InvalidPayload) as exc:
            status, answer = "400 Bad Request", {"error": str(exc)}
        except trunner.RedisUnavailable:
            status, answer = "503 Service Unavailable", {"error": "queue unavailable"}
    data = json.dumps(answer).encode()
    await stream.send_all(
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
        + data
    )


async def main(self_test: bool) -> None:
    url = os.environ.get("REDIS_URL", "memory://web-producer")
    async with trunner.open_client(url, GROUP) as client, trio.open_nursery() as nursery:

        async def serve(stream: trio.SocketStream) -> None:
            async with stream:
                await handle(stream, client)

        (listener,) = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
        port = listener.socket.getsockname()[1]
        print(f"listening on http://127.0.0.1:{port}/thumbnails", flush=True)
        if self_test:
            async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
                body = b'{"image": "cat.png"}'
                await stream.send_all(
                    b"POST /thumbnails HTTP/1.1\r\nContent-Length: "
                    + str(len(body)).encode()
                    + b"\r\n\r\n"
                    + body
                )
                reply = b""
                while chunk := await stream.receive_some(65536):
                    reply += chunk
            print(reply.decode().split("\r\n")[0], reply.decode().split("\r\n\r\n")[1])
            print("queued:", await client.admin.queue_length())
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main, "--self-test" in sys.argv)
