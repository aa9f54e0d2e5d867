#!/bin/sh
# runtime-tree.sh ROOTFS: makes ROOTFS, which holds the installed exporter
# (ROOTFS/usr/bin/xpu-exporter), a tree that runs on its own: every library
# the binary loads (the dynamic loader included, as ldd lists them), the
# non-root user 65532, and an empty /tmp. Run by the Containerfile's build
# stage and by `./x image` for an image of the plain build (XPU_IMAGE_BUILD),
# on Debian bookworm both: the libraries are the ones the binary was linked
# against.
set -eu
root=${1:?usage: runtime-tree.sh ROOTFS}
bin=$root/usr/bin/xpu-exporter
[ -x "$bin" ] || { echo "runtime-tree.sh: no $bin" >&2; exit 1; }
for lib in $(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'); do
  case "$lib" in "$root"/*) continue ;; esac
  cp --parents -L "$lib" "$root"
done
# glibc's compatibility libraries beside its libc (empty since glibc 2.34,
# but still named by libraries built against older ones): NVIDIA's
# libnvidia-ml.so.1, which the nvml backend opens at run time where the
# NVIDIA container runtime mounts it (docs/kubernetes.md), needs
# libpthread.so.0, libdl.so.2 and librt.so.1, and dlopen fails without them.
libdir=$(dirname "$(ldd "$bin" | awk '$1 == "libc.so.6" {print $3}')")
for compat in libdl.so.2 libpthread.so.0 librt.so.1; do
  if [ -e "$libdir/$compat" ]; then cp --parents -L "$libdir/$compat" "$root"; fi
done
mkdir -p "$root/etc" "$root/tmp"
chmod 1777 "$root/tmp"
echo 'xpu:x:65532:65532:xpu-exporter:/nonexistent:/usr/sbin/nologin' >"$root/etc/passwd"
echo 'xpu:x:65532:' >"$root/etc/group"
"$bin" --version
