#!/usr/bin/env bash
# The landing page in a real browser (headless Chromium + chromedriver from
# Debian): every device listed, an injected fault shown within seconds by the
# page's own refresh, a screenshot saved under the build's test-output/.
source "$(dirname "$0")/lib.sh" "$1"
command -v chromedriver >/dev/null || fail "chromedriver missing (Debian packages chromium, chromium-driver)"
start_sim sim --interval 200ms --hal-root "$TMP/hal" --kubelet-socket "$TMP/kubelet.sock"
curl -sf -XPOST "$CONTROL/control/allocate" -d '{"id":"notebook-42","devices":[{"minor":2}]}' >/dev/null
start_exporter sim --collector.interval 200ms --hal sysfs --hal.root "$TMP/hal" --hal.interval 200ms \
  --kubelet.pod-resources-socket "$TMP/kubelet.sock" --kubelet.interval 1s
wait_for 10 has_metric 'xpu_device_info{minor="7"' || fail "no devices"
wait_for 10 has_metric 'xpu_device_pod_info{minor="2"' || fail "no pod attribution"
python3 "$(dirname "$0")/browser_test.py" "${URL%/metrics}" "$CONTROL" 8 \
  "$BUILD/test-output/landing-page.png" || fail "browser test"
