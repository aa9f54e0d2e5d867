#!/usr/bin/env python3
"""Hostile HTTP clients against a running xpu-exporter, while real probes time
every endpoint. Usage: slow_clients.py PORT ATTACKERS ROUNDS

ATTACKERS clients, taking turns among three kinds, each reconnecting as soon
as it is cut off: a head sent one header line a second, a POST announcing a 1 GB body
sent one byte a second, and a connection that sends nothing. Meanwhile
/-/healthy, /-/ready and /metrics are fetched ROUNDS times each; the script
prints the slowest answer and exits 1 if any probe failed or took 1 s or more.
"""
import socket
import sys
import threading
import time
import urllib.request

port, attackers, rounds = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
stop = threading.Event()
connected = [0]
lock = threading.Lock()


def attack(kind):
    while not stop.is_set():
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            with lock:
                connected[0] += 1
            if kind == "head":
                s.sendall(b"GET /-/healthy HTTP/1.1\r\nHost: x\r\n")
            elif kind == "body":
                s.sendall(b"POST /-/healthy HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Length: 1000000000\r\n\r\n")
            while not stop.is_set():
                stop.wait(1)
                if kind == "head":
                    s.sendall(b"X-Slow: 1\r\n")
                elif kind == "body":
                    s.sendall(b"a")
                else:
                    s.settimeout(1)
                    try:
                        if s.recv(1) == b"":
                            break
                    except socket.timeout:
                        pass
        except OSError:
            stop.wait(0.05)


kinds = ("head", "body", "idle")
threads = [threading.Thread(target=attack, args=(kinds[i % 3],), daemon=True)
           for i in range(attackers)]
for t in threads:
    t.start()
# Let the attackers occupy the workers first.
deadline = time.time() + 10
while connected[0] < attackers and time.time() < deadline:
    time.sleep(0.05)
time.sleep(1.5)

worst, failures = 0.0, []
for _ in range(rounds):
    for path in ("/-/healthy", "/-/ready", "/metrics"):
        t0 = time.time()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                r.read()
                status = r.status
        except Exception as e:  # noqa: BLE001 - any failure is a failure
            status = repr(e)
        took = time.time() - t0
        worst = max(worst, took)
        if status != 200 or took >= 1.0:
            failures.append(f"{path}: {status} in {took:.3f} s")
    time.sleep(0.2)
stop.set()
print(f"attacker connections made: {connected[0]}; slowest probe {worst * 1000:.0f} ms")
if connected[0] <= attackers:
    failures.append("attackers were never cut off and reconnected: the test proved nothing")
for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
