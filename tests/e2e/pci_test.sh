#!/usr/bin/env bash
# The pci backend end to end: xdm-sim keeps a PCI tree in the kernel's layout
# (DIR/sys) for its devices, xpu-exporter reads it beside the vendor tree and
# joins it to XDM's devices by bus_id. Through /control/pci: an idle link
# speed, a Gen4 and an x8 slot raise nothing; a link narrower than both ends, fatal AER errors, an unbound driver and a device leaving the bus each
# raise their fault and make the device unhealthy from the pci source's side; the
# driver's return and the device's return count as resets.
source "$(dirname "$0")/lib.sh" "$1"
start_sim sim --interval 100ms --hal-root "$TMP/hal"
# The slots' maxima are changed below as the test goes (a real slot's are
# not): they are slow facts, read every --hal.gauge-interval, here a second
# instead of ten; what raises a fault is read every 200 ms.
start_exporter sim --collector.interval 100ms --hal sysfs,pci --hal.root "$TMP/hal" \
  --hal.pci.sysfs-root "$TMP/hal/sys" --hal.interval 200ms --hal.gauge-interval 1s
wait_for 10 has_metric 'xpu_hal_pci_up 1' || fail "pci backend not up"
# Joined: bus_id from the tree, minor and uuid from XDM (ListGpuInfo busId).
wait_for 10 has_metric 'xpu_pcie_link_width_lanes{bus_id="0000:40:00.0",minor="3",uuid="[^"]*",bound="current"} 16' ||
  fail "link width of minor 3 not joined: $(grep pcie_link_width "$TMP/page" | head -3)"
has_metric 'xpu_pcie_link_speed_transfers_per_second{bus_id="0000:40:00.0",minor="3",uuid="[^"]*",bound="max"} 3.2e+10' ||
  fail "max link speed"
has_metric 'xpu_pci_driver_bound{bus_id="0000:40:00.0",minor="3",uuid="[^"]*",driver="xpu"} 1' || fail "driver"
has_metric 'xpu_pcie_aer_errors_total{bus_id="0000:40:00.0",minor="3",uuid="[^"]*",severity="fatal",type="DLP"} 0' ||
  fail "AER counters"
has_metric 'xpu_device_health{minor="3",uuid="[^"]*",bus_id="[^"]*",source="pci"} 1' || fail "healthy at start"

pci() { curl -sf -XPOST "$CONTROL/control/pci" -d "$1" >/dev/null || fail "control/pci $1"; }
fault_on() {  # fault_on CODE LEVEL: the fault is active on minor 3
  wait_for 10 has_metric "xpu_device_fault_active{minor=\"3\",uuid=\"[^\"]*\",bus_id=\"[^\"]*\",code=\"$1\",level=\"$2\",source=\"pci\"} 1"
}

# Not faults (each one was, judged against the card's own maximum from one
# sample): a link at 2.5 GT/s while the card idles, a Gen5 card in a Gen4
# slot, an x16 card in an x8 slot. The slot's maxima and the capability
# (the lower of both ends) are exported.
no_fault_for_2s() {  # no_fault_for_2s MINOR...: none of them has a fault for 2 s (10 samples)
  local end=$(($(date +%s%N) + 2000000000)) page m
  while [ "$(date +%s%N)" -lt $end ]; do
    page=$(scrape)
    for m in "$@"; do
      ! grep -q "^xpu_device_fault_active{minor=\"$m\"" <<<"$page" || return 1
      grep -q "^xpu_device_health{minor=\"$m\",uuid=\"[^\"]*\",bus_id=\"[^\"]*\",source=\"pci\"} 1" <<<"$page" || return 1
    done
    sleep 0.1
  done
}
pci '{"minor":2,"idle":true}'
pci '{"minor":4,"port_max_link_speed":"16.0 GT/s PCIe","link_speed":"16.0 GT/s PCIe"}'
pci '{"minor":7,"port_max_link_width":8,"link_width":8}'
wait_for 10 has_metric 'xpu_pcie_link_speed_transfers_per_second{bus_id="0000:30:00.0",minor="2",uuid="[^"]*",bound="current"} 2.5e+09' ||
  fail "idle speed not seen"
wait_for 10 has_metric 'xpu_pcie_link_speed_transfers_per_second{bus_id="0000:50:00.0",minor="4",uuid="[^"]*",bound="capable"} 1.6e+10' ||
  fail "Gen4 slot: capable speed not 16 GT/s"
has_metric 'xpu_pcie_link_speed_transfers_per_second{bus_id="0000:50:00.0",minor="4",uuid="[^"]*",bound="port_max"} 1.6e+10' ||
  fail "Gen4 slot: port_max not exported"
wait_for 10 has_metric 'xpu_pcie_link_width_lanes{bus_id="0000:80:00.0",minor="7",uuid="[^"]*",bound="capable"} 8' ||
  fail "x8 slot: capable width not 8"
no_fault_for_2s 2 4 7 || fail "idle link, Gen4 slot or x8 slot raised a fault: $(scrape | grep fault_active)"

# A link narrower than both ends, lasting: the fault.
pci '{"minor":3,"link_width":8,"link_speed":"16.0 GT/s PCIe"}'
fault_on 0xFC000001 restart_card || fail "downtrained link raised no fault"
has_metric 'xpu_pcie_link_width_lanes{bus_id="0000:40:00.0",minor="3",uuid="[^"]*",bound="current"} 8' ||
  fail "current width not 8"
has_metric 'xpu_device_health{minor="3",uuid="[^"]*",bus_id="[^"]*",source="pci"} 0' || fail "restart_card fault left health 1"
pci '{"minor":3,"link_width":16,"link_speed":"32.0 GT/s PCIe"}'
wait_for 10 has_metric 'xpu_device_health{minor="3",uuid="[^"]*",bus_id="[^"]*",source="pci"} 1' || fail "health did not return"

pci '{"minor":3,"aer":{"severity":"fatal","type":"DLP","add":2}}'
fault_on 0xFC000003 reset_card || fail "fatal AER raised no fault"
has_metric 'xpu_pcie_aer_errors_total{bus_id="0000:40:00.0",minor="3",uuid="[^"]*",severity="fatal",type="DLP"} 2' ||
  fail "AER count not 2"

pci '{"minor":5,"driver_bound":false}'
wait_for 10 has_metric 'xpu_pci_driver_bound{bus_id="0000:60:00.0",minor="5",uuid="[^"]*",driver=""} 0' ||
  fail "unbound driver not seen"
wait_for 10 has_metric 'xpu_device_fault_active{minor="5",uuid="[^"]*",bus_id="[^"]*",code="0xFC000005",level="reset_card",source="pci"} 1' ||
  fail "unbound driver raised no fault"
pci '{"minor":5,"driver_bound":true}'
wait_for 10 has_metric 'xpu_device_resets_observed_total{bus_id="0000:60:00.0",minor="5",uuid="[^"]*"} 1' ||
  fail "rebinding not counted as a reset"

pci '{"minor":6,"present":false}'
wait_for 10 has_metric 'xpu_pci_device_present{bus_id="0000:70:00.0",minor="6",uuid="[^"]*"} 0' ||
  fail "lost device not seen"
wait_for 10 has_metric 'xpu_device_fault_active{minor="6",uuid="[^"]*",bus_id="[^"]*",code="0xFC000004",level="isolate_card",source="pci"} 1' ||
  fail "lost device raised no fault"
pci '{"minor":6,"present":true}'
wait_for 10 has_metric 'xpu_device_resets_observed_total{bus_id="0000:70:00.0",minor="6",uuid="[^"]*"} 1' ||
  fail "return to the bus not counted as a reset"

curl -sf "$URL/metrics" >"$TMP/page"
promtool check metrics <"$TMP/page" || fail "promtool check metrics"
check_families
echo "pci backend: joined, link, AER, driver, loss and resets seen; promtool clean"
