#!/bin/sh
# /init of the airlock initramfs (busybox sh, PID 1).
#
# Loads the virtio modules listed in /etc/airlock/modules (load order, one
# file name per line), waits up to 5 s for the root disk /dev/vda
# (virtio-blk, ext4), mounts it read-write at /newroot and switches root into
# /sbin/airlock-agent, which becomes PID 1. On any failure it prints a line
# starting with "airlock-init: FATAL:" and powers the VM off, so the host
# sees the VM exit instead of a hang.
export PATH=/bin

log() { echo "airlock-init: $*"; }

fail() {
  echo "airlock-init: FATAL: $*"
  [ -f /proc/uptime ] && dmesg | tail -n 20
  sync
  poweroff -f
  # If power-off is not possible, let init exit: the kernel panics and, with
  # panic=-1, reboots, which -no-reboot / Firecracker turn into a VM exit.
  sleep 1
  exit 1
}

mount -t proc proc /proc || fail "mount /proc"
# First output of every boot: benchmarks time a bare boot to this marker.
log "start"
mount -t sysfs sysfs /sys || fail "mount /sys"
mount -t devtmpfs devtmpfs /dev || fail "mount /dev"

while read -r mod; do
  [ -n "$mod" ] || continue
  insmod "/lib/modules/$mod" || fail "insmod $mod"
done < /etc/airlock/modules

i=0
while [ ! -b /dev/vda ]; do
  i=$((i + 1))
  [ "$i" -le 50 ] || fail "no root disk /dev/vda after 5 s (is a virtio-blk device attached?)"
  sleep 0.1
done

mount -t ext4 -o rw,noatime /dev/vda /newroot || fail "mount /dev/vda (ext4) on /newroot"
[ -x /newroot/sbin/airlock-agent ] || fail "/sbin/airlock-agent missing or not executable in the root disk"

for d in proc sys dev; do
  mkdir -p "/newroot/$d"
  mount --move "/$d" "/newroot/$d" || fail "move /$d to the root disk"
done

read -r up _ < /newroot/proc/uptime
log "switching root to /sbin/airlock-agent (uptime ${up}s)"
exec switch_root /newroot /sbin/airlock-agent
fail "switch_root failed"
