#!/bin/sh
# The docker template's Docker daemon (docs/docker.md), installed at
# /usr/local/lib/airlock/docker/dockerd and run by the agent as the service
# "docker" (root, restarted when it dies) from the template's boot, so the
# template snapshot, and every sandbox restored from it, has dockerd and its
# containerd answering on /var/run/docker.sock (group docker, which `user`
# is in).
#
# The guest has its own kernel (Debian's, whose modules the template
# carries in /usr/lib/modules): the modules Docker needs are loaded here;
# the kernel loads the rest (netfilter matches, nf_tables) on demand.
# Log: /var/log/dockerd.log.
set -u
for m in overlay bridge br_netfilter veth nf_tables nft_compat nf_nat nf_conntrack xt_addrtype xt_conntrack \
  xt_MASQUERADE; do
  modprobe "$m" || echo "airlock docker: modprobe $m failed" >&2
done
exec /usr/sbin/dockerd --group docker >>/var/log/dockerd.log 2>&1
