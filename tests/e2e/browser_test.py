#!/usr/bin/env python3
"""Drives headless Chromium through chromedriver (W3C WebDriver over HTTP,
standard library only): loads the exporter's landing page, checks the table
lists every simulated device, injects a fault through xdm-sim's control API,
waits for the page's own refresh to show it, and saves a screenshot.

Usage: browser_test.py EXPORTER_URL CONTROL_URL DEVICES SCREENSHOT_PATH"""
import base64
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

exporter, control, devices, shot = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def call(method, url, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


port = free_port()
driver = subprocess.Popen(["chromedriver", f"--port={port}"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
base = f"http://127.0.0.1:{port}"
try:
    for _ in range(200):
        try:
            call("GET", base + "/status")
            break
        except OSError:
            time.sleep(0.05)
    caps = {"capabilities": {"alwaysMatch": {"goog:chromeOptions": {
        "binary": "/usr/bin/chromium",
        "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--window-size=1400,900",
                 f"--user-data-dir=/tmp/xpu-chromium-{os.getpid()}"]}}}}
    session = call("POST", base + "/session", caps)["value"]["sessionId"]
    s = f"{base}/session/{session}"

    def script(js):
        return call("POST", s + "/execute/sync", {"script": js, "args": []})["value"]

    call("POST", s + "/url", {"url": exporter + "/"})
    rows = script("return document.querySelectorAll('#devices tbody tr').length")
    if rows != devices:
        sys.exit(f"FAIL: the table lists {rows} devices, want {devices}")
    print(f"table lists all {rows} devices")
    call("POST", s + "/timeouts", {"script": 10000})
    urllib.request.urlopen(urllib.request.Request(
        control + "/control/fault", data=b'{"minor":2,"code":"0x80E18400"}', method="POST"))
    t0 = time.time()
    text = ""
    while time.time() - t0 < 10:
        text = script("return document.querySelectorAll('#devices tbody tr')[2].textContent")
        if "0x80E18400" in text:
            break
        time.sleep(0.2)
    else:
        sys.exit(f"FAIL: the fault did not appear in the table within 10 s: {text}")
    print(f"fault appeared in the table after {time.time() - t0:.1f} s: {text[:120]}")
    if "default/alloc-notebook" not in text:
        sys.exit(f"FAIL: the pod holding device 2 is not in its row: {text}")
    png = call("GET", s + "/screenshot")["value"]
    os.makedirs(os.path.dirname(shot), exist_ok=True)
    with open(shot, "wb") as f:
        f.write(base64.b64decode(png))
    print(f"screenshot saved to {shot}")
    call("DELETE", s)
finally:
    driver.terminate()
    driver.wait()
