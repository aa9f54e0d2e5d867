#!/usr/bin/env python3
"""A minimal Alertmanager webhook receiver for the end-to-end test: appends
each notification (one JSON document per line) to OUT_FILE. Binds 127.0.0.1
on PORT (0 picks one) and writes the bound port to PORT_FILE."""
import http.server
import sys

out_file, port, port_file = sys.argv[1], int(sys.argv[2]), sys.argv[3]


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with open(out_file, "ab") as f:
            f.write(body.replace(b"\n", b" ") + b"\n")
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


server = http.server.HTTPServer(("127.0.0.1", port), Handler)
with open(port_file, "w") as f:
    f.write(str(server.server_address[1]))
server.serve_forever()
