#!/usr/bin/env python3
"""A stand-in for the Kubernetes API server, for the exporter's tests: the
real list/watch protocol for pods (resourceVersion, chunked watch streams of
JSON lines, bookmarks, ERROR 410 for an expired resourceVersion, limit and
continue), GET of nodes, PATCH of a node's status (strategic merge of
conditions by type) and POST of Events, over HTTPS with bearer tokens; and
the DRA API a device-taint writer reads and writes: discovery of each
resource.k8s.io version, this node's ResourceSlices (list and watch) and
DeviceTaintRules (create, update with resourceVersion, delete with
preconditions, list by label), each version served or not.

Usage: fake_apiserver.py CERT KEY TOKEN   (prints "port=N" when listening)

Control (no token needed, under /control/):
  POST   /control/pod           body: a Pod object; adds or replaces it
  DELETE /control/pod?namespace=NS&name=N
  POST   /control/node          body: a Node object
  GET    /control/node          the Node as it is now
  POST   /control/break         closes every open watch abruptly
  POST   /control/compact       every resourceVersion handed out so far expires
                                ({"break": true}: and every open watch closes)
  POST   /control/auth          body: {"status": 200|401|403[, "methods": ["PATCH"...]]}
                                (only those methods answer so; default all)
  GET    /control/requests      every API request's path, in order
  GET    /control/agents        the same, as [User-Agent, path] pairs
  GET    /control/times         the same, as [seconds (monotonic), path] pairs
  GET    /control/patches       every accepted status patch, in order (bodies)
  GET    /control/events        every Event created, in order (as stored)
  POST   /control/served        body: {"v1": ["resourceslices"], "v1beta2": [...]}: the
                                resource.k8s.io versions served and what each serves
  POST   /control/slice         body: a ResourceSlice; adds or replaces it
  DELETE /control/slice?name=N
  POST   /control/rule          body: a DeviceTaintRule, stored as it is (another
                                agent's, or one left by an earlier run)
  GET    /control/rules         every DeviceTaintRule now
  GET    /control/rulewrites    every accepted write of a rule: [method, name, effect, value]
  POST   /control/fault         body: {"prefix": "/apis/", "method": "PUT" (optional),
                                "status": 500|409|403..., "hang": seconds, "times": N,
                                "body_contains": TEXT (optional: a rule write whose body
                                has TEXT), "path_contains": TEXT (optional: a request
                                whose path and query have TEXT), "body": TEXT (optional:
                                sent as it is, in place of a Status), "committed": true
                                (optional: a node status patch or a rule's
                                delete is applied first, its answer lost), "headers": {NAME: VALUE} (optional: sent with
                                the answer, e.g. Retry-After)}: the next N requests that match answer so
                                (after the hang)
"""
import time
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
    "served": {"v1": ["resourceslices"], "v1beta2": ["resourceslices", "devicetaintrules"]},
    "slices": {},          # name -> ResourceSlice
    "rules": {},           # name -> DeviceTaintRule
    "rulewrites": [],
    "faults": [],
    "times": [],           # [monotonic seconds, request] for each API request
}
GROUP = "/apis/resource.k8s.io/"


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

    def send_json(self, code, obj, headers=None):
        """obj: a JSON value, or a str sent as it is (an injected body);
        headers: more of them (an injected fault's)."""
        body = obj.encode() if isinstance(obj, str) else json.dumps(obj).encode()
        self.send_response(code)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
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
        if url.path.startswith(GROUP):  # not under the lock: a fault may hang it
            return self.rules_api("POST", url)
        if url.path.startswith("/api/"):  # the same: an Event post's fault may hang it
            return self.api_post(url)
        with lock:
            if url.path == "/control/pod":
                pod = self.body()
                key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
                kind = "MODIFIED" if key in state["pods"] else "ADDED"
                rv = bump(pod)
                state["pods"][key] = pod
                state["events"].append((rv, kind, pod, "pods"))
            elif url.path == "/control/slice":
                sl = self.body()
                name = sl["metadata"]["name"]
                kind = "MODIFIED" if name in state["slices"] else "ADDED"
                rv = bump(sl)
                state["slices"][name] = sl
                state["events"].append((rv, kind, sl, "resourceslices"))
            elif url.path == "/control/rule":
                rule = self.body()
                bump(rule)
                state["rules"][rule["metadata"]["name"]] = rule
            elif url.path == "/control/served":
                state["served"] = self.body()
            elif url.path == "/control/fault":
                state["faults"].append(self.body())
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

            else:
                return self.send_json(404, {})
            lock.notify_all()
        self.send_json(200, {"ok": True})

    def do_DELETE(self):
        url = urllib.parse.urlparse(self.path)
        q = urllib.parse.parse_qs(url.query)
        if url.path.startswith(GROUP):
            return self.rules_api("DELETE", url)
        if url.path == "/control/slice":
            with lock:
                sl = state["slices"].pop(q["name"][0], None)
                if sl is None:
                    return self.send_json(404, {})
                rv = bump(sl)
                state["events"].append((rv, "DELETED", sl, "resourceslices"))
                lock.notify_all()
            return self.send_json(200, {"ok": True})
        with lock:
            key = (q["namespace"][0], q["name"][0])
            pod = state["pods"].pop(key, None)
            if pod is None:
                return self.send_json(404, {})
            rv = bump(pod)
            state["events"].append((rv, "DELETED", pod, "pods"))
            lock.notify_all()
        self.send_json(200, {"ok": True})

    # --- the API -----------------------------------------------------------
    def refused(self, method):
        """An answer for a request the token or RBAC refuses, else None."""
        with lock:
            state["requests"].append(method + " " + self.path if method != "GET" else self.path)
            state["times"].append([time.monotonic(), state["requests"][-1]])
            state["agents"].append([self.headers.get("User-Agent", ""), state["requests"][-1]])
            auth, methods = state["auth"], state["auth_methods"]
        if self.headers.get("Authorization") != "Bearer " + TOKEN:
            return 401, status(401, "Unauthorized", "Unauthorized")
        fault = None
        with lock:
            for f in state["faults"]:
                if ("body_contains" not in f and self.path.startswith(f.get("prefix", "/"))
                        and f.get("path_contains", "") in self.path
                        and f.get("times", 1) > 0 and f.get("method", method) == method):
                    f["times"] = f.get("times", 1) - 1
                    fault = dict(f)
                    break
        if fault and fault.get("committed"):
            self.committed_fault = fault  # answered once the write is applied
            return None
        if fault:
            time.sleep(fault.get("hang", 0))
            code = fault.get("status", 500)
            headers = fault.get("headers", {})
            if "body" in fault:
                return code, fault["body"], headers
            reason = {409: "Conflict", 403: "Forbidden", 429: "TooManyRequests"}.get(
                code, "InternalError")
            return code, status(code, reason, "injected fault"), headers
        if auth != 200 and (methods is None or method in methods):
            return auth, status(auth, "Forbidden", "forbidden: User "
                                "\"system:serviceaccount:xpu:xpu-exporter\" cannot " + method)
        return None

    def do_PUT(self):
        return self.rules_api("PUT", urllib.parse.urlparse(self.path))

    def served(self, version, resource):
        with lock:
            return resource in state["served"].get(version, [])

    def rules_api(self, method, url):
        """DeviceTaintRules (cluster-scoped) in each served version."""
        bad = self.refused(method)
        if bad:
            return self.send_json(*bad)
        parts = url.path[len(GROUP):].split("/")
        if len(parts) not in (2, 3) or parts[1] != "devicetaintrules" or not self.served(
                parts[0], "devicetaintrules"):
            return self.send_json(404, status(404, "NotFound", "the server could not find it"))
        version, name = parts[0], (urllib.parse.unquote(parts[2]) if len(parts) == 3 else None)
        body = self.body() if method in ("POST", "PUT") or int(
            self.headers.get("Content-Length", "0")) else {}
        with lock:
            for f in state["faults"]:
                if ("body_contains" in f and f["body_contains"] in json.dumps(body)
                        and f.get("times", 1) > 0 and f.get("method", method) == method):
                    f["times"] = f.get("times", 1) - 1
                    code = f.get("status", 403)
                    return self.send_json(code, status(code, "Forbidden", "denied by policy"))
            rules = state["rules"]
            if method == "DELETE":
                if name not in rules:
                    return self.send_json(404, status(404, "NotFound", f'"{name}" not found'))
                want = (body.get("preconditions") or {}).get("resourceVersion")
                if want and want != rules[name]["metadata"]["resourceVersion"]:
                    return self.send_json(409, status(409, "Conflict", "precondition failed"))
                gone = rules.pop(name)
                state["rulewrites"].append(["DELETE", name, None, None])
                lock.notify_all()
                fault = getattr(self, "committed_fault", None)
                if fault:  # applied, its answer lost
                    self.committed_fault = None
                    code = fault.get("status", 500)
                    return self.send_json(code, status(code, "InternalError", "injected fault"))
                return self.send_json(200, gone)
            spec = body.get("spec", {})
            taint = spec.get("taint", {})
            sel = spec.get("deviceSelector", {})
            effects = ("NoSchedule", "NoExecute") if version == "v1alpha3" else (
                "None", "NoSchedule", "NoExecute")
            meta = body.get("metadata", {})
            if (body.get("kind") != "DeviceTaintRule"
                    or body.get("apiVersion") != "resource.k8s.io/" + version
                    or not meta.get("name") or len(meta["name"]) > 253
                    or not taint.get("key") or taint.get("effect") not in effects
                    or len(taint.get("value", "")) > 63 or not sel.get("device")
                    or any(len(v) > 63 for v in meta.get("labels", {}).values())):
                return self.send_json(422, status(422, "Invalid", "not a valid DeviceTaintRule"))
            if method == "POST":
                if name is not None:
                    return self.send_json(405, status(405, "MethodNotAllowed", "POST to a name"))
                if meta["name"] in rules:
                    return self.send_json(409, status(409, "AlreadyExists",
                                                      f'"{meta["name"]}" already exists'))
                taint.setdefault("timeAdded", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            else:
                old = rules.get(name)
                if old is None or meta["name"] != name:
                    return self.send_json(404, status(404, "NotFound", f'"{name}" not found'))
                if meta.get("resourceVersion") != old["metadata"]["resourceVersion"]:
                    return self.send_json(409, status(409, "Conflict",
                                                      "the object has been modified"))
                old_taint = old["spec"]["taint"]
                if taint.get("effect") != old_taint.get("effect"):
                    taint["timeAdded"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                else:
                    taint["timeAdded"] = old_taint.get("timeAdded")
            bump(body)
            rules[meta["name"]] = body
            state["rulewrites"].append([method, meta["name"], taint.get("effect"),
                                        taint.get("value")])
            lock.notify_all()
        return self.send_json(201 if method == "POST" else 200, body)

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
                # A strategic merge patch's directive: the condition of that type goes.
                if c.get("$patch") == "delete" and isinstance(c.get("type"), str) and len(c) == 2:
                    conds[:] = [o for o in conds if o.get("type") != c["type"]]
                    continue
                for field in ("type", "status", "reason", "message", "lastTransitionTime"):
                    if not isinstance(c.get(field), str):
                        return self.send_json(422, status(422, "Invalid", f"condition {field}"))
                # Strategic merge: conditions merge by type.
                conds[:] = [o for o in conds if o.get("type") != c["type"]] + [c]
            state["patches"].append(patch)
            bump(node)
            lock.notify_all()
            answer = node
        fault = getattr(self, "committed_fault", None)
        if fault:
            self.committed_fault = None
            time.sleep(fault.get("hang", 0))
            code = fault.get("status", 500)
            return self.send_json(code, status(code, "InternalError", "injected fault"))
        self.send_json(200, answer)

    def api_post(self, url):
        bad = self.refused("POST")  # a fault's hang outside the lock
        if bad:
            return self.send_json(*bad)
        if not (url.path.startswith("/api/v1/namespaces/") and url.path.endswith("/events")):
            return self.send_json(404, status(404, "NotFound", "the server could not find it"))
        ev = self.body()
        with lock:
            return self.create_event(url, ev)

    def create_event(self, url, ev):  # under lock
        ns = url.path[len("/api/v1/namespaces/"):-len("/events")]
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
                        "/control/agents", "/control/rulewrites", "/control/times"):
            with lock:
                key = {"/control/requests": "requests", "/control/patches": "patches",
                       "/control/events": "created", "/control/agents": "agents",
                       "/control/rulewrites": "rulewrites", "/control/times": "times"}[url.path]
                return self.send_json(200, state[key])
        if url.path == "/control/node":
            with lock:
                return self.send_json(200, state["node"])
        if url.path == "/control/rules":
            with lock:
                return self.send_json(200, sorted(state["rules"].values(),
                                                  key=lambda r: r["metadata"]["name"]))
        q = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        bad = self.refused("GET")
        if bad:
            return self.send_json(*bad)
        if url.path.startswith(GROUP):
            return self.group_get(url, q)
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
            return self.watch(q, lambda res, obj: res == "pods" and
                              obj["spec"].get("nodeName") == node, "Pod")
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

    def group_get(self, url, q):
        parts = url.path[len(GROUP):].split("/")
        version = parts[0]
        with lock:
            served = state["served"].get(version)
        if served is None:
            return self.send_json(404, status(404, "NotFound", "the server could not find it"))
        if len(parts) == 1 or parts[1] == "":
            return self.send_json(200, {
                "kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": "resource.k8s.io/" + version,
                "resources": [{"name": r, "namespaced": False, "kind": r,
                               "verbs": ["get", "list", "watch"]} for r in served]})
        if parts[1] not in served:
            return self.send_json(404, status(404, "NotFound", "the server could not find it"))
        if parts[1] == "devicetaintrules":
            with lock:
                rules = state["rules"]
                if len(parts) == 3:
                    r = rules.get(urllib.parse.unquote(parts[2]))
                    return self.send_json(200, r) if r else self.send_json(
                        404, status(404, "NotFound", "not found"))
                want = dict(kv.split("=", 1) for kv in q.get("labelSelector", "").split(",") if kv)
                items = [r for r in rules.values() if all(
                    r["metadata"].get("labels", {}).get(k) == v for k, v in want.items())]
                return self.send_json(200, {"kind": "DeviceTaintRuleList",
                                            "apiVersion": "resource.k8s.io/" + version,
                                            "metadata": {"resourceVersion": str(state["rv"])},
                                            "items": items})
        # resourceslices: this node's only
        selector = q.get("fieldSelector", "")
        if not selector.startswith("spec.nodeName="):
            return self.send_json(400, status(400, "BadRequest", "cluster-wide list refused"))
        node = selector[len("spec.nodeName="):]
        if q.get("watch") in ("true", "1"):
            return self.watch(q, lambda res, obj: res == "resourceslices" and
                              obj["spec"].get("nodeName") == node, "ResourceSlice")
        with lock:
            items = [s for s in state["slices"].values() if s["spec"].get("nodeName") == node]
            return self.send_json(200, {"kind": "ResourceSliceList",
                                        "apiVersion": "resource.k8s.io/" + version,
                                        "metadata": {"resourceVersion": str(state["rv"])},
                                        "items": items})

    def watch(self, q, wanted, kind_name):
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
                for erv, kind, obj, res in events:
                    rv = erv
                    if wanted(res, obj):
                        send({"type": kind, "object": obj})
                now = time.monotonic()
                if now >= next_bookmark:
                    send({"type": "BOOKMARK", "object": {"kind": kind_name, "apiVersion": "v1",
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
