#!/usr/bin/env bash
# The Debian package (issues 35 and 50), its unit booted as it will run:
# built by CPack from this build, lintian clean (errors and warnings); a
# Debian 12 container (podman, made by mmdebstrap as ./x image's base is,
# with systemd and the package's Depends resolved from Debian's archive,
# made once per Depends line) boots systemd as PID 1; the package is installed
# with apt, its unit verified by systemd-analyze and started by systemd
# itself (DynamicUser=, StateDirectory=, the capability set, the syscall
# filter) against xdm-sim. Seen: /metrics served, the state directory made,
# owned by the dynamic user and written, the kernel log and the PCI files
# read (no filter or capability kills or blinds them), a clean `systemctl
# stop`; then removed (the running unit stopped, only the conffile left) and
# purged (nothing left). Where the host gives no /dev/kmsg, it says it
# skipped the kernel log.
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
# This host's podman cannot raise rlimits past its own: given explicitly.
LIMITS=(--ulimit nofile=4096:4096 --ulimit nproc=4096:4096)
# Debian 12 with systemd and the Depends, made once by mmdebstrap (./x
# base-image; the image named by the hash of the packages and of the
# Depends line with its versions): the install below needs no network, and
# other Depends make another image.
DEPENDS=$(dpkg-deb -f "$DEB" Depends)
read -r -a PACKAGES <<<"$(sed 's/([^)]*)//g; s/,/ /g' <<<"$DEPENDS")"
IMAGE=$(BUILD_DIR=$BUILD IMAGE_KEY=$DEPENDS "$ROOT/x" base-image systemd systemd-sysv dbus procps curl "${PACKAGES[@]}" \
  2>"$TMP/image.log") || fail "the systemd image: $(tail -5 "$TMP/image.log")"

# xdm-sim on this machine; its sockets reach the container through a
# mount, writable by others as a deployment grants the exporter's user.
start_sim sim --devices 4
chmod 0755 "$TMP"
chmod 0666 "$TMP/sim.sock" "$TMP/sim-ctl.sock"

# Booted: podman runs systemd mode for /lib/systemd/systemd (tmpfs /run,
# /tmp, its cgroup). SYS_ADMIN: the unit's mount namespace (ProtectSystem=,
# PrivateTmp=; without it systemd refuses the unit, 226/NAMESPACE).
# SYSLOG and /dev/kmsg: the unit's AmbientCapabilities=CAP_SYSLOG has
# something to hand on and a kernel log to read (dmesg_restrict).
KMSG=(--device /dev/kmsg)
if [ ! -r /dev/kmsg ]; then
  KMSG=()
  echo "SKIP (in part): the host gives no /dev/kmsg: the kernel log is not read in the container"
fi
NAME=xpu-package-$$
"${PODMAN[@]}" run -d --name "$NAME" "${LIMITS[@]}" --cap-add SYS_ADMIN,SYSLOG "${KMSG[@]}" \
  --stop-signal SIGRTMIN+3 -v "$TMP/pkg:/pkg:ro" -v "$TMP:/run/xdm" "$IMAGE" /lib/systemd/systemd \
  >/dev/null || fail "the container did not start"
remove_container() { "${PODMAN[@]}" rm -f -t 0 "$NAME" >/dev/null 2>&1 || true; }
trap 'remove_container; cleanup' EXIT
# systemctl answers once PID 1 has its bus; with --wait, once booted.
state=
for _ in $(seq 1 100); do
  state=$("${PODMAN[@]}" exec "$NAME" systemctl is-system-running --wait 2>/dev/null) || true
  [ -n "$state" ] && break
  sleep 0.1 # PID 1 making its bus: nothing outside to wait on
done
[ "$state" = running ] ||
  fail "systemd did not boot: '$state' $("${PODMAN[@]}" exec "$NAME" systemctl --failed --no-pager 2>&1)"

cat >"$TMP/in-container.sh" <<'SH'
set -eu
step() { echo "[in container] $*"; }
die() { echo "[in container] FAIL: $*"; journalctl -u xpu-exporter --no-pager -o cat | tail -20; exit 1; }
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq --no-install-recommends /pkg/xpu-exporter_*.deb >/tmp/apt.log 2>&1 || { cat /tmp/apt.log; exit 1; }
step "installed: $(dpkg-query -W -f='${Package} ${Version} ${Status}' xpu-exporter)"
dpkg -L xpu-exporter | sort >/tmp/files
UNIT=/lib/systemd/system/xpu-exporter.service
systemd-analyze verify --man=no "$UNIT" || die "systemd-analyze verify"
step "systemd-analyze verify: clean; $(systemctl is-enabled xpu-exporter)"
# What an operator sets: XDM's socket, no kubelet on this host; the kernel
# log and the PCI files named, so that a filter that blinds them fails here.
HAL=pci
[ -r /dev/kmsg ] && HAL=pci,kmsg
sed -i "s|^XPU_EXPORTER_ARGS=\"\\(.*\\)\"|XPU_EXPORTER_ARGS=\"\\1 --xdm.endpoint=unix:///run/xdm/sim.sock --controller.endpoint=unix:///run/xdm/sim-ctl.sock --web.listen-address=127.0.0.1:9445 --kubelet.pod-resources-socket= --hal=$HAL\"|" /etc/default/xpu-exporter
systemctl restart xpu-exporter
up() { grep -q "^xpu_exporter_source_up{source=\"$1\"} 1" /tmp/page; }
ready() {
  curl -sf http://127.0.0.1:9445/metrics >/tmp/page 2>/dev/null && grep -q '^xpu_device_info{' /tmp/page &&
    up pci && { [ "$HAL" = pci ] || up kmsg; }
}
for _ in $(seq 1 100); do ready && break; sleep 0.1; done
grep -q '^xpu_device_info{' /tmp/page || die "no devices on the page"
up pci || die "the PCI files are not read: $(grep -E 'source_up' /tmp/page)"
[ "$HAL" = pci ] || up kmsg || die "the kernel log is not read: $(grep -E 'source_up|kmsg_up' /tmp/page)"
step "served by systemd: $(grep -c '^xpu_device_info{' /tmp/page) devices; read: $HAL"
curl -sf http://127.0.0.1:9446/-/healthy >/dev/null || die "the probe listener"
PID=$(systemctl show -p MainPID --value xpu-exporter)
U=$(stat -c %u "/proc/$PID")
[ "$U" -ge 61184 ] && [ "$U" -le 65519 ] || die "not a dynamic user: uid $U"
grep -q '^CapEff:.*0000000400000000$' "/proc/$PID/status" || die "capabilities: $(grep CapEff "/proc/$PID/status")"
grep -q '^Seccomp:.*2$' "/proc/$PID/status" || die "no syscall filter"
[ "$(readlink /var/lib/xpu-exporter)" = private/xpu-exporter ] || die "the state directory is not the dynamic user's"
[ "$(stat -c %u /var/lib/private/xpu-exporter)" = "$U" ] || die "the state directory's owner"
if [ "$HAL" = pci,kmsg ]; then
  for _ in $(seq 1 50); do [ -s /var/lib/private/xpu-exporter/kmsg-states.json ] && break; sleep 0.1; done
  [ -s /var/lib/private/xpu-exporter/kmsg-states.json ] ||
    die "the state file is not written: $(ls -la /var/lib/private/xpu-exporter)"
fi
step "uid $U (dynamic), CapEff CAP_SYSLOG, syscall filter on; state directory: $(ls /var/lib/private/xpu-exporter | tr '\n' ' ')"
systemctl stop xpu-exporter
[ "$(systemctl show -p Result --value xpu-exporter)" = success ] ||
  die "stop: $(systemctl show -p Result -p ExecMainStatus xpu-exporter)"
step "stopped cleanly"
systemctl start xpu-exporter
# Remove: the running unit stopped, every file gone but the conffile.
apt-get remove -y -qq xpu-exporter >/dev/null 2>&1
[ "$(systemctl is-active xpu-exporter 2>/dev/null || true)" != active ] || die "running after remove"
while read -r f; do
  [ -d "$f" ] && continue
  if [ -e "$f" ] && [ "$f" != /etc/default/xpu-exporter ]; then die "left after remove: $f"; fi
done </tmp/files
[ -f /etc/default/xpu-exporter ] || die "the configuration went with remove"
step "removed: the unit stopped, only /etc/default/xpu-exporter left"
apt-get purge -y -qq xpu-exporter >/dev/null 2>&1
while read -r f; do [ -d "$f" ] || [ ! -e "$f" ] || die "left after purge: $f"; done </tmp/files
for f in /var/lib/private/xpu-exporter /var/lib/xpu-exporter \
  /etc/systemd/system/multi-user.target.wants/xpu-exporter.service; do
  [ ! -e "$f" ] && [ ! -L "$f" ] || die "left after purge: $f"
done
if dpkg -s xpu-exporter >/dev/null 2>&1; then die "dpkg still knows the package"; fi
step "purged: nothing left"
SH
"${PODMAN[@]}" exec -i "$NAME" bash -s <"$TMP/in-container.sh" || fail "the package under systemd (above)"
"${PODMAN[@]}" stop -t 10 "$NAME" >/dev/null || fail "the container did not stop"
echo "PASS: e2e_package ($(basename "$DEB"), booted under systemd)"
