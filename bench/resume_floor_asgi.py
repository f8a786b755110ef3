"""The floor of bench/resume.py: what the inline path does for a terminal report, without Forest's code.

A bare ASGI app under the same uvicorn and workers as Host, answering the same
``POST /api/forest/v1/groves/<grove>/jobs/<job>/report`` from the same client: one statement in one
transaction on a kept pool (psycopg's, as Host's lean routes use) ends the job, tails its node (state,
exit code, outputs, the event row) and ends the run, then reads whether anything waits for the Grove (the
wake-up's indexed read; a waiter would be woken through Redis, and the bench has none, as ours has none).
Its SQL comes from the bench (``RESUME_FLOOR_SQL``, built from the models' metadata), so a renamed column
fails the floor rather than letting it drift. No credential check, no body validation, no lifecycle checks:
the cheapest honest way to commit the same rows, so the floor is as strong as it can be."""
from __future__ import annotations

import json
import os
import re

from psycopg_pool import AsyncConnectionPool

SQL = os.environ.get("RESUME_FLOOR_SQL", "")
PATH = re.compile(r"^/api/forest/v1/groves/(?P<grove>[0-9a-f-]{36})/jobs/(?P<job>[0-9a-f-]{36})/report$")
POOL: AsyncConnectionPool | None = None


async def _answer(send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def app(scope, receive, send):
    global POOL
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                POOL = AsyncConnectionPool(os.environ["DATABASE_URL"], min_size=4, max_size=16, open=False)
                await POOL.open(wait=True)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if POOL is not None:
                    await POOL.close()
                await send({"type": "lifespan.shutdown.complete"})
                return
    body, more = b"", True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    match = PATH.match(scope["path"]) if scope["method"] == "POST" else None
    if match is None:  # /healthz, and nothing else the bench sends here
        return await _answer(send, 200, b"{}")
    report = json.loads(body or b"{}")
    async with POOL.connection() as conn:
        await conn.execute(SQL, {"grove": match["grove"], "job": match["job"],
                                 "exit_code": report.get("exit_code"),
                                 "outputs": json.dumps(report.get("outputs") or {})}, prepare=True)
    return await _answer(send, 200, b'{"accepted":true}')
