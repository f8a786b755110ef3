"""The empty-HTTP floor of bench/heartbeat.py: an ASGI app that reads the body and answers a fixed JSON
body, served by the same uvicorn with the same workers, so the bench can show what HTTP alone costs."""

BODY = b'{"server_time":"2026-01-01T00:00:00Z","stale_after_s":90}'


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]})
    await send({"type": "http.response.body", "body": BODY})
