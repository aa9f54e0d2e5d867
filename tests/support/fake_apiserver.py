#!/usr/bin/env python3
"""A stand-in for the Kubernetes API server, for the exporter's tests: the
real list/watch protocol for pods (resourceVersion, chunked watch streams of
JSON lines, bookmarks, ERROR 410 for an expired resourceVersion, limit and
continue), GET of nodes, PATCH of a node's status (strategic merge of
conditions by type) and POST of Events, over HTTPS with bearer tokens.

Usage: fake_apiserver.py CERT KEY TOKEN   (prints "port=N" when listening)

Control (no token needed, under /control/):
  POST   /control/pod           body: a Pod object; adds or replaces it
  DELETE /control/pod?namespace=NS&name=N
  POST   /control/node          body: a Node object
  POST   /control/break         closes every open watch abruptly
  POST   /control/compact       every resourceVersion handed out so far expires
                                ({"break": true}: and every open watch closes)
  POST   /control/auth          body: {"status": 200|401|403[, "methods": ["PATCH"...]]}
                                (only those methods answer so; default all)
  GET    /control/requests      every API request's path, in order
  GET    /control/agents        the same, as [User-Agent, path] pairs
  GET    /control/patches       every accepted status patch, in order (bodies)
  GET    /control/events        every Event created, in order (as stored)
"""
import json
import ssl
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CERT, KEY, TOKEN = sys.argv[1:4]
lock = threading.Condition()
state = {
    "rv": 100,             # the last resourceVersion handed out
    "compacted": 0,        # resourceVersions up to this one have expired
    "pods": {},            # (namespace, name) -> pod
    "events": [],          # (rv, type, pod) in order
    "node": None,
    "auth": 200,
    "auth_methods": None,  # None: every method
    "patches": [],
    "created": [],         # Events
    "breaks": 0,           # generation of /control/break
    "requests": [],
    "agents": [],
}


def bump(obj):
    state["rv"] += 1
    obj.setdefault("metadata", {})["resourceVersion"] = str(state["rv"])
    return state["rv"]


def status(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
            "reason": reason, "code": code}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def body(self):
        n = int(self.headers.get("Content-Length", "0"))
        return json.loads(self.rfile.read(n) or b"{}")

    # --- control -----------------------------------------------------------
    def do_POST(self):
        url = urllib.parse.urlparse(self.path)
        with lock:
            if url.path == "/control/pod":
                pod = self.body()
                key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
                kind = "MODIFIED" if key in state["pods"] else "ADDED"
                rv = bump(pod)
                state["pods"][key] = pod
                state["events"].append((rv, kind, pod))
            elif url.path == "/control/node":
                state["node"] = self.body()
            elif url.path == "/control/break":
                state["breaks"] += 1
            elif url.path == "/control/compact":
                state["rv"] += 1
                state["compacted"] = state["rv"]
                state["events"] = []
                # {"break": true}: and close every watch in the same step, so
                # that no bookmark can hand out the new resourceVersion before
                # the watch breaks (its resume then always meets the 410).
                if self.body().get("break"):
                    state["breaks"] += 1
            elif url.path == "/control/auth":
                body = self.body()
                state["auth"] = body["status"]
                state["auth_methods"] = body.get("methods")
            elif url.path.startswith("/api/"):
                return self.api_post(url)
            else:
                return self.send_json(404, {})
            lock.notify_all()
        self.send_json(200, {"ok": True})

    def do_DELETE(self):
        url = urllib.parse.urlparse(self.path)
        q = urllib.parse.parse_qs(url.query)
        with lock:
            key = (q["namespace"][0], q["name"][0])
            pod = state["pods"].pop(key, None)
            if pod is None:
                return self.send_json(404, {})
            rv = bump(pod)
            state["events"].append((rv, "DELETED", pod))
            lock.notify_all()
        self.send_json(200, {"ok": True})

    # --- the API -----------------------------------------------------------
    def refused(self, method):
        """An answer for a request the token or RBAC refuses, else None."""
        with lock:
            state["requests"].append(method + " " + self.path if method != "GET" else self.path)
            state["agents"].append([self.headers.get("User-Agent", ""), state["requests"][-1]])
            auth, methods = state["auth"], state["auth_methods"]
        if self.headers.get("Authorization") != "Bearer " + TOKEN:
            return 401, status(401, "Unauthorized", "Unauthorized")
        if auth != 200 and (methods is None or method in methods):
            return auth, status(auth, "Forbidden", "forbidden: User "
                                "\"system:serviceaccount:xpu:xpu-exporter\" cannot " + method)
        return None

    def do_PATCH(self):
        url = urllib.parse.urlparse(self.path)
        bad = self.refused("PATCH")
        if bad:
            return self.send_json(*bad)
        if not (url.path.startswith("/api/v1/nodes/") and url.path.endswith("/status")):
            return self.send_json(404, status(404, "NotFound", "the server could not find it"))
        if self.headers.get("Content-Type") != "application/strategic-merge-patch+json":
            return self.send_json(415, status(415, "UnsupportedMediaType", "not a strategic merge patch"))
        name = urllib.parse.unquote(url.path[len("/api/v1/nodes/"):-len("/status")])
        patch = self.body()
        with lock:
            node = state["node"]
            if node is None or node["metadata"]["name"] != name:
                return self.send_json(404, status(404, "NotFound", f'nodes "{name}" not found'))
            if set(patch) != {"status"} or set(patch["status"]) != {"conditions"}:
                return self.send_json(422, status(422, "Invalid", "only status.conditions here"))
            conds = node.setdefault("status", {}).setdefault("conditions", [])
            for c in patch["status"]["conditions"]:
                for field in ("type", "status", "reason", "message", "lastTransitionTime"):
                    if not isinstance(c.get(field), str):
                        return self.send_json(422, status(422, "Invalid", f"condition {field}"))
                # Strategic merge: conditions merge by type.
                conds[:] = [o for o in conds if o.get("type") != c["type"]] + [c]
            state["patches"].append(patch)
            bump(node)
            lock.notify_all()
            answer = node
        self.send_json(200, answer)

    def api_post(self, url):  # under lock (a reentrant one)
        bad = self.refused("POST")
        if bad:
            return self.send_json(*bad)
        if not (url.path.startswith("/api/v1/namespaces/") and url.path.endswith("/events")):
            return self.send_json(404, status(404, "NotFound", "the server could not find it"))
        ns = url.path[len("/api/v1/namespaces/"):-len("/events")]
        ev = self.body()
        meta = ev.get("metadata", {})
        obj = ev.get("involvedObject", {})
        if (ev.get("kind") != "Event" or meta.get("namespace", ns) != ns or ns != "default"
                or not (meta.get("name") or meta.get("generateName"))
                or obj.get("kind") != "Node" or not obj.get("name")
                or ev.get("type") not in ("Normal", "Warning") or not ev.get("reason")
                or len(ev.get("message", "")) > 1024 or not ev.get("firstTimestamp")):
            return self.send_json(422, status(422, "Invalid", "not a valid Node event"))
        if not meta.get("name"):
            meta["name"] = meta["generateName"] + "%05x" % len(state["created"])
        if any(e["metadata"]["name"] == meta["name"] for e in state["created"]):
            return self.send_json(409, status(409, "AlreadyExists",
                                              f'events "{meta["name"]}" already exists'))
        ev["metadata"] = meta
        bump(ev)
        state["created"].append(ev)
        lock.notify_all()
        self.send_json(201, ev)

    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        if url.path in ("/control/requests", "/control/patches", "/control/events",
                        "/control/agents"):
            with lock:
                key = {"/control/requests": "requests", "/control/patches": "patches",
                       "/control/events": "created", "/control/agents": "agents"}[url.path]
                return self.send_json(200, state[key])
        q = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        bad = self.refused("GET")
        if bad:
            return self.send_json(*bad)
        if url.path.startswith("/api/v1/nodes/"):
            name = urllib.parse.unquote(url.path[len("/api/v1/nodes/"):])
            with lock:
                node = state["node"]
            if node is None or node["metadata"]["name"] != name:
                return self.send_json(404, status(404, "NotFound", f'nodes "{name}" not found'))
            return self.send_json(200, node)
        if url.path != "/api/v1/pods":
            return self.send_json(404, status(404, "NotFound", "the server could not find it"))
        selector = q.get("fieldSelector", "")
        if not selector.startswith("spec.nodeName="):
            # The exporter must never list the whole cluster.
            return self.send_json(400, status(400, "BadRequest", "cluster-wide list refused"))
        node = selector[len("spec.nodeName="):]
        if q.get("watch") in ("true", "1"):
            return self.watch(node, q)
        with lock:
            pods = sorted((p for p in state["pods"].values() if p["spec"].get("nodeName") == node),
                          key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"]))
            rv = str(state["rv"])
        start = int(q.get("continue", "0") or 0)
        limit = int(q.get("limit", "0") or 0) or len(pods)
        page = pods[start:start + limit]
        meta = {"resourceVersion": rv}
        if start + limit < len(pods):
            meta["continue"] = str(start + limit)
        self.send_json(200, {"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": page})

    def watch(self, node, q):
        rv = int(q.get("resourceVersion", "0") or 0)
        timeout = float(q.get("timeoutSeconds", "60"))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def send(obj):
            data = (json.dumps(obj) + "\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        with lock:
            if rv < state["compacted"]:
                send({"type": "ERROR", "object": status(410, "Expired",
                                                        f"too old resource version: {rv}")})
                self.wfile.write(b"0\r\n\r\n")
                return
            breaks = state["breaks"]
        import time
        deadline = time.monotonic() + timeout
        next_bookmark = time.monotonic() + 1.0
        while True:
            with lock:
                lock.wait_for(lambda: state["breaks"] != breaks or any(
                    e[0] > rv for e in state["events"]), timeout=0.2)
                if state["breaks"] != breaks:
                    # Abrupt: no final chunk, the connection just drops.
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                events = [e for e in state["events"] if e[0] > rv]
                current = state["rv"]
            try:
                for erv, kind, pod in events:
                    rv = erv
                    if pod["spec"].get("nodeName") == node:
                        send({"type": kind, "object": pod})
                now = time.monotonic()
                if now >= next_bookmark:
                    send({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1",
                          "metadata": {"resourceVersion": str(max(rv, current))}}})
                    rv = max(rv, current)
                    next_bookmark = now + 1.0
                if now >= deadline:
                    self.wfile.write(b"0\r\n\r\n")
                    return
            except (BrokenPipeError, ConnectionResetError):
                return


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(CERT, KEY)
server.socket = ctx.wrap_socket(server.socket, server_side=True)
print(f"port={server.server_address[1]}", flush=True)
server.serve_forever()
