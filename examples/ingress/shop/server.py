"""The README's ingress recipe workload: answers /healthz (its readiness probe) and / on $PORT, loopback only."""
import http.server
import os


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        scheme = self.headers["X-Forwarded-Proto"]  # set by the hops: "https" when it came through the edge
        body = b"ok\n" if self.path == "/healthz" else f"hello from shop ({scheme})\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
