#!/usr/bin/env bash
# The container image as a DaemonSet runs it: `./x image` builds it with
# podman (from this build; see below); it runs read-only, with xdm-sim's
# sockets mounted as the host's would be, and is scraped over the host
# network. Checks: /-/ready and
# /metrics answer with the simulator's devices and pods, the process runs as
# the image's non-root user, and the image stays small. Skipped (ctest SKIP,
# exit 77) where podman is missing; the README's test command installs it.
source "$(dirname "$0")/lib.sh" "$1"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
command -v podman >/dev/null || { echo "SKIP: podman is not installed (./x deps installs it)"; exit 77; }
PODMAN=(podman --runtime runc --cgroup-manager cgroupfs)
NAME=xpu-image-test-$$
trap 'for c in "$NAME" "$NAME-nvml"; do "${PODMAN[@]}" rm -f "$c" >/dev/null 2>&1 || true; done; cleanup' EXIT

# The image of the build under test (./x image's from-host target: the same
# runtime tree and final stage, without compiling the exporter a second time
# in the Containerfile's build stage); XPU_IMAGE_FROM_SOURCE=1 builds it the
# way `./x image` does by default, build stage and all.
if [ -n "${XPU_IMAGE_FROM_SOURCE:-}" ]; then
  IMAGE=$("$ROOT/x" image 2>"$TMP/image.log" | tail -1) || fail "./x image: $(tail -20 "$TMP/image.log")"
else
  IMAGE=$(IMAGE=localhost/xpu-exporter:e2e XPU_IMAGE_BUILD="$BUILD" "$ROOT/x" image 2>"$TMP/image.log" |
    tail -1) || fail "./x image: $(tail -20 "$TMP/image.log")"
fi
echo "image $IMAGE: $("${PODMAN[@]}" image inspect -f '{{.Size}}' "$IMAGE") bytes"
[ "$("${PODMAN[@]}" image inspect -f '{{.Config.User}}' "$IMAGE")" = "65532:65532" ] || fail "image user is not 65532"

# The daemon's sockets in a directory the non-root user may use, as the
# DaemonSet mounts the host's.
mkdir -p "$TMP/run"
start_sim run/sim --interval 100ms --kubelet-socket "$TMP/run/kubelet.sock"
chmod 0777 "$TMP/run"
chmod 0666 "$TMP/run/"*.sock
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"${PODMAN[@]}" run -d --name "$NAME" --network host --read-only \
  --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 \
  -v "$TMP/run:/run/xdm" "$IMAGE" --web.listen-address "127.0.0.1:$PORT" \
  --xdm.endpoint unix:///run/xdm/sim.sock --controller.endpoint unix:///run/xdm/sim-ctl.sock \
  --hal none --kubelet.pod-resources-socket /run/xdm/kubelet.sock \
  --kubernetes.node-name image-node >/dev/null || fail "podman run"
URL="http://127.0.0.1:$PORT"
wait_for 30 curl -sf "$URL/-/ready" ||
  fail "not ready: $(curl -s "$URL/-/ready"; "${PODMAN[@]}" logs "$NAME" 2>&1 | tail -20)"
wait_for 10 has_metric 'xpu_device_info{' || fail "no devices in /metrics"
has_metric 'xpu_exporter_build_info{.*node="image-node"' || fail "node name not on build_info"
curl -sf -XPOST "$CONTROL/control/allocate" -d '{"id":"image-pod-1","devices":[{"minor":0}]}' >/dev/null || fail "allocate"
wait_for 20 has_metric 'xpu_device_pod_info{' || fail "no pod attribution from the mounted kubelet socket"

# NVIDIA's library as the NVIDIA container runtime mounts it (its library
# folder, found by the default name): the stand-in, which needs what the real
# one needs from glibc (libpthread.so.0, libdl.so.2, librt.so.1), loads in
# the image and its card is read (docs/kubernetes.md, "NVML").
FAKE=$BUILD/tests/hal/libfake_nvml.so
if [ -f "$FAKE" ]; then
  for lib in libpthread.so.0 libdl.so.2 librt.so.1; do
    readelf -d "$FAKE" | grep -q "NEEDED.*\[$lib\]" || fail "the stand-in does not need $lib as NVIDIA's library does"
  done
  mkdir -p "$TMP/nvml"
  echo '{"devices": [{"name": "NVIDIA H800", "uuid": "GPU-image-0", "bus_id": "0000:3b:00.0",
    "temperature": 40, "ecc_mode": 1, "remap": {"corrected": 2, "uncorrected": 0,
    "pending": false, "failure": false}}]}' >"$TMP/nvml/fixture.json"
  chmod -R a+rX "$TMP/nvml"
  NVML_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "${PODMAN[@]}" run -d --name "$NAME-nvml" --network host --read-only \
    --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 \
    -v "$FAKE:/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1:ro" -v "$TMP/nvml:/nvml:ro" \
    -e XPU_FAKE_NVML_FIXTURE=/nvml/fixture.json \
    -v "$TMP/run:/run/xdm" "$IMAGE" --web.listen-address "127.0.0.1:$NVML_PORT" \
    --xdm.endpoint unix:///run/xdm/sim.sock --controller.endpoint unix:///run/xdm/sim-ctl.sock \
    --hal nvml --kubelet.pod-resources-socket= --kubernetes.api-server= >/dev/null || fail "podman run (nvml)"
  nvml_page() { curl -sf "http://127.0.0.1:$NVML_PORT/metrics"; }
  nvml_has() { local page; page=$(nvml_page) || return 1; grep -q "$1" <<<"$page"; }
  wait_for 30 nvml_has '^xpu_nvml_up 1' ||
    fail "NVML not read in the image: $("${PODMAN[@]}" logs "$NAME-nvml" 2>&1 | grep -i nvml | tail -5)"
  nvml_has '^xpu_nvml_remapped_rows{.*bus_id="0000:3b:00.0".*error="corrected".*} 2' ||
    fail "the stand-in's card is not on the page: $(nvml_page | grep nvml_ | head)"
  "${PODMAN[@]}" rm -f "$NAME-nvml" >/dev/null
  echo "image test: NVML loaded in the image from the runtime's library folder"
fi

PID=$("${PODMAN[@]}" inspect -f '{{.State.Pid}}' "$NAME")
UIDS=$(awk '/^Uid:/ {print $2, $3, $4, $5}' "/proc/$PID/status")
[ "$UIDS" = "65532 65532 65532 65532" ] || fail "exporter runs with uids $UIDS, not 65532"
"${PODMAN[@]}" exec "$NAME" /bin/sh -c true 2>/dev/null && fail "the image has a shell"
echo "image test passed: non-root (uid 65532), read-only root, scraped over the host network"
