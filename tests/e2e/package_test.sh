#!/usr/bin/env bash
# The Debian package (issue 35), in a clean Debian 12 container (podman, a
# debootstrap base as ./x image makes): built by CPack from this build,
# lintian clean (errors and warnings), installed with apt (Depends: resolved
# from Debian's archive), its unit verified by systemd-analyze, the exporter
# started as the unit would start it (the container has no systemd as PID 1:
# the ExecStart line with /etc/default's arguments, as an unprivileged user
# holding only the unit's capability) against xdm-sim, scraped; then removed
# (only the conffile left) and purged (nothing left).
#   package_test.sh BUILD_DIR
source "$(dirname "$0")/lib.sh" "$1"
ROOT=$(cd "$E2E_DIR/../.." && pwd)
command -v podman >/dev/null || { echo "SKIP: no podman"; exit 77; }
PODMAN=(podman --runtime runc --cgroup-manager cgroupfs)

mkdir -p "$TMP/pkg"
(cd "$BUILD" && cpack -B "$TMP/pkg" >"$TMP/cpack.log" 2>&1) || fail "cpack: $(tail -5 "$TMP/cpack.log")"
ARCH=$(dpkg --print-architecture)
DEB=$(ls "$TMP"/pkg/xpu-exporter_*_"$ARCH".deb) || fail "no .deb for $ARCH"
lintian --fail-on error,warning "$DEB" 2>/dev/null || fail "lintian: $(lintian "$DEB" 2>&1)"
dpkg-deb -c "$DEB" | grep -q ' ./usr/share/man/man1/xpu-exporter.1.gz$' || fail "no man page in the package"

# The rest installs the package's Depends from Debian's archive (and makes
# the base image from it the first time): a machine that cannot reach it
# cannot run this part, which is not the package's failure.
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
command -v curl >/dev/null || fail "no curl (./x deps installs it)"
curl -fsS -o /dev/null --max-time 20 "$MIRROR/dists/bookworm/Release" ||
  { echo "SKIP: Debian's archive ($MIRROR) cannot be reached: the package is built and lintian clean, not installed"; exit 77; }
BASE=$(BUILD_DIR=$BUILD "$ROOT/x" base-image) || fail "no Debian 12 base image"

# xdm-sim on this machine; its socket reaches the container through a
# mount, writable by others as a deployment grants the exporter's user.
start_sim sim --devices 4
chmod 0755 "$TMP"
chmod 0666 "$TMP/sim.sock"
PORT=$(free_port)
PROBE=$(free_port)

cat >"$TMP/in-container.sh" <<'SH'
set -eu
step() { echo "[in container] $*"; }
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# A Debian system's systemd and procps (kill) for the unit's check; curl to scrape.
apt-get install -y -qq --no-install-recommends /pkg/xpu-exporter_*.deb systemd procps curl >/dev/null
step "installed: $(dpkg-query -W -f='${Package} ${Version} ${Status}' xpu-exporter)"
dpkg -L xpu-exporter | sort >/tmp/files
UNIT=/lib/systemd/system/xpu-exporter.service
systemd-analyze verify --man=no "$UNIT"
step "systemd-analyze verify: clean"

# The unit's ExecStart with its EnvironmentFile, as systemd would run it:
# $XPU_EXPORTER_ARGS split on white space; a dynamic user (here nobody)
# holding CAP_SYSLOG alone; the state directory made for it.
grep -q '^DynamicUser=yes' "$UNIT"
grep -q '^AmbientCapabilities=CAP_SYSLOG$' "$UNIT"
grep -q '^StateDirectory=xpu-exporter$' "$UNIT"
EXEC=$(sed -n 's/^ExecStart=//p' "$UNIT")
# What an operator sets: XDM's socket, the port, no kubelet on this host.
sed -i "s|^XPU_EXPORTER_ARGS=\"\\(.*\\)\"|XPU_EXPORTER_ARGS=\"\\1 --xdm.endpoint=unix:///run/xdm/sim.sock --controller.endpoint=unix:///run/xdm/sim-ctl.sock --web.listen-address=127.0.0.1:$PORT --kubelet.pod-resources-socket= --hal=none\"|; s|127.0.0.1:9446|127.0.0.1:$PROBE|" /etc/default/xpu-exporter
. /etc/default/xpu-exporter
mkdir -p /var/lib/xpu-exporter && chown nobody:nogroup /var/lib/xpu-exporter
CMD=$(eval "echo $EXEC")
step "ExecStart: $CMD"
setpriv --reuid=nobody --regid=nogroup --clear-groups --inh-caps=-all,+syslog \
  --ambient-caps=-all,+syslog --bounding-set=-all,+syslog $CMD 2>/tmp/exporter.log &
PID=$!
for i in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$PORT/metrics" >/tmp/page 2>/dev/null && grep -q '^xpu_device_info{' /tmp/page && break
  sleep 0.1
done
grep -q '^xpu_device_info{' /tmp/page || { cat /tmp/exporter.log; echo "no devices on the page"; exit 1; }
step "scraped: $(grep -c '^xpu_device_info{' /tmp/page) devices, $(grep -vc '^#' /tmp/page) samples"
curl -sf "http://127.0.0.1:$PROBE/-/healthy" >/dev/null
step "probe listener answers"
grep -q '^CapEff:.*0000000400000000$' "/proc/$PID/status" || { grep Cap "/proc/$PID/status"; echo "capabilities"; exit 1; }
[ "$(stat -c %U "/proc/$PID")" = nobody ]
kill "$PID"; wait "$PID" || true

# Remove: every file of the package gone but the conffile; purge: that too.
apt-get remove -y -qq xpu-exporter >/dev/null
while read -r f; do
  [ -d "$f" ] && continue
  if [ -e "$f" ] && [ "$f" != /etc/default/xpu-exporter ]; then echo "left after remove: $f"; exit 1; fi
done </tmp/files
[ -f /etc/default/xpu-exporter ] || { echo "the configuration went with remove"; exit 1; }
step "removed: only /etc/default/xpu-exporter left"
apt-get purge -y -qq xpu-exporter >/dev/null
while read -r f; do
  [ -d "$f" ] && continue
  if [ -e "$f" ]; then echo "left after purge: $f"; exit 1; fi
done </tmp/files
[ ! -e /var/lib/xpu-exporter ] || { echo "state directory left after purge"; exit 1; }
if dpkg -s xpu-exporter >/dev/null 2>&1; then echo "dpkg still knows the package"; exit 1; fi
step "purged: nothing left"
SH

# CAP_SYSLOG in the container, as systemd holds it to give the unit.
"${PODMAN[@]}" run --rm --network host --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 \
  --cap-add SYSLOG -e PORT="$PORT" -e PROBE="$PROBE" -v "$TMP/pkg:/pkg:ro" -v "$TMP:/run/xdm" \
  -v "$TMP/in-container.sh:/in-container.sh:ro" "$BASE" bash /in-container.sh ||
  fail "the package in a Debian 12 container (above)"
echo "PASS: e2e_package ($(basename "$DEB"))"
