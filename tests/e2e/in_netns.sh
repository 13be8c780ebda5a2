#!/usr/bin/env bash
# Runs a command inside a fresh network namespace of its own (the multi-node
# suite's client side, cluster.mjs), then removes every namespace the run
# made (named <prefix>-*). Not root: runs the command as it is (the suite
# then skips with its reason).
set -uo pipefail
if [ "$(id -u)" != 0 ]; then exec "$@"; fi
prefix="almn$$"
client="$prefix-c"
cleanup() {
  for ns in $(ip netns list | awk '{print $1}' | grep "^$prefix-" || true); do ip netns delete "$ns" 2>/dev/null || true; done
}
trap cleanup EXIT
ip netns add "$client"
ip -n "$client" link set lo up
# nsenter, not `ip netns exec`: that one remounts /sys, which hides the
# cgroup hierarchy the daemons' sandboxes need.
AIRLOCK_MN_PREFIX="$prefix" AIRLOCK_MN_CLIENT_NS="$client" nsenter --net="/run/netns/$client" "$@"
