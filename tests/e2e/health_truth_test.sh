#!/usr/bin/env bash
# Health is never better than what was seen (issue 32), end to end: the
# sysfs, pci and kmsg sources each made blind in turn (the kernel log
# unreadable, the PCI root gone, the sysfs tree gone under a card fault),
# with the stand-in API server: the Node condition XpuDevicesHealthy never
# says True while a source cannot see, goes Unknown naming the blind source,
# and the blind source's health series are withdrawn (no 1 on the page);
# recovered, it returns to the truth. The trees are reached through symlinks
# the test swaps (xdm-sim rewrites its own trees every tick).
source "$(dirname "$0")/lib.sh" "$1"
cd "$TMP"
start_apiserver t0ken
api POST node '{"metadata":{"name":"node-a","uid":"u-node-a"}}'
start_sim sim --interval 200ms --hal-root "$TMP/hal"
ln -s "$TMP/hal" "$TMP/sysfs"
ln -s "$TMP/hal/sys" "$TMP/pci"
export API
# patches [FROM]: the statuses patched, in order, from the FROM-th on (0-based).
patches() { curl -sfk "$API/control/patches" | python3 -c "import json,sys; print(' '.join(p['status']['conditions'][0]['status'] + '/' + p['status']['conditions'][0]['reason'] for p in json.load(sys.stdin)[${1:-0}:]))"; }
npatches() { curl -sfk "$API/control/patches" | python3 -c "import json,sys; print(len(json.load(sys.stdin)))"; }
last_is() { patches | awk '{print $NF}' | grep -qx "$1"; }  # last_is STATUS/REASON
export -f patches npatches last_is
never_true_since() {  # never_true_since N WHY: no True among the patches from the N-th on
  ! patches "$1" | grep -q 'True/' || fail "$2: a True while a source could not see: $(patches "$1")"
}
health_of() { scrape | grep -c "^xpu_device_health{.*source=\"$1\"}" || true; }

# 1. The kernel log cannot be read (not there yet): Unknown from the start,
# never True, and no kmsg health on the page.
start_exporter sim --collector.interval 200ms --hal sysfs,pci,kmsg --hal.root "$TMP/sysfs" \
  --hal.pci.sysfs-root "$TMP/pci" --hal.kmsg.path "$TMP/kmsg.records" --hal.interval 200ms \
  --kubernetes.api-server "$API" --kubernetes.ca-file "$TMP/ca.crt" \
  --kubernetes.token-file "$TMP/token" --kubernetes.node-name node-a \
  --kubernetes.node-interval 300ms --kubernetes.node-condition --kubernetes.node-condition-hold 5s
wait_for 20 last_is Unknown/KmsgBlind || fail "kmsg blind: not Unknown/KmsgBlind: $(patches)"
wait_for 10 has_metric 'xpu_exporter_source_up{source="kmsg"} 0' || fail "kmsg up"
has_metric 'xpu_exporter_source_up{source="sysfs"} 1' || fail "sysfs not up"
[ "$(health_of kmsg)" = 0 ] || fail "a blind kernel log has health series: $(scrape | grep 'source="kmsg"' | head -3)"
[ "$(health_of sysfs)" -gt 0 ] || fail "no sysfs health while sysfs sees"
[ "$(health_of pci)" -gt 0 ] || fail "no pci health while pci sees"
never_true_since 0 "kmsg unreadable"
curl -sfk "$API/control/patches" | grep -q 'kmsg cannot see' || fail "the message does not name the blind source"

# Recovered: the log is there; True once it has held (the hold, 5 s here).
: >"$TMP/kmsg.records"
wait_for 10 has_metric 'xpu_exporter_source_up{source="kmsg"} 1' || fail "kmsg not back"
wait_for 10 bash -c '[ "$(grep -c "source=\"kmsg\"} 1" <(curl -sf '"$URL"'/metrics | grep ^xpu_device_health))" -gt 0 ]' ||
  fail "kmsg health not back"
never_true_since 0 "kmsg unreadable"
wait_for 25 last_is True/NoCardFaults || fail "not True once every source sees: $(patches)"

# 2. The PCI root gone: Unknown at once (worse than True), its health
# withdrawn; back: True after the hold.
N=$(npatches)
ln -sfn "$TMP/nowhere" "$TMP/pci"
wait_for 10 last_is Unknown/PciBlind || fail "pci blind: $(patches "$N")"
wait_for 5 bash -c "[ \$(curl -sf $URL/metrics | grep -c '^xpu_device_health{.*source=\"pci\"}') = 0 ]" ||
  fail "pci health stays while pci is blind"
has_metric 'xpu_exporter_source_up{source="pci"} 0' || fail "pci up while blind"
# A few intervals later the pci view is stale: its families go too.
wait_for 10 bash -c "! curl -sf $URL/metrics | grep -q '^xpu_pcie_link_width_lanes'" ||
  fail "the stale pci view stays on the page"
never_true_since "$N" "pci root removed"
ln -sfn "$TMP/hal/sys" "$TMP/pci"
wait_for 10 has_metric 'xpu_exporter_source_up{source="pci"} 1' || fail "pci not back"
wait_for 25 last_is True/NoCardFaults || fail "not True after pci came back: $(patches "$N")"
[ "$(patches "$N")" = "Unknown/PciBlind True/NoCardFaults" ] ||
  fail "pci: want Unknown, then True once back: $(patches "$N")"

# 3. A card fault, then the sysfs tree gone under it (a driver crash takes
# it): False at once; then Unknown (SysfsBlind), never True; the sysfs
# health withdrawn at once. Back: the fault is seen again: False.
curl -sf -XPOST "$CONTROL/control/fault" -d '{"minor":2,"code":"0x80E18400"}' >/dev/null
wait_for 10 last_is False/ResetCard || fail "no False for a reset_card fault: $(patches)"
N=$(npatches)
ln -sfn "$TMP/nowhere" "$TMP/sysfs"
wait_for 5 bash -c "[ \$(curl -sf $URL/metrics | grep -c '^xpu_device_health{.*source=\"sysfs\"}') = 0 ]" ||
  fail "sysfs health stays while sysfs is blind"
has_metric 'xpu_exporter_source_up{source="sysfs"} 0' || fail "sysfs up while blind"
wait_for 25 last_is Unknown/SysfsBlind || fail "sysfs blind: $(patches "$N")"
never_true_since "$N" "sysfs tree removed under a fault"
ln -sfn "$TMP/hal" "$TMP/sysfs"
wait_for 10 last_is False/ResetCard || fail "the fault not seen again: $(patches "$N")"
never_true_since "$N" "sysfs tree back"
check_families
echo "patches: $(patches)"
