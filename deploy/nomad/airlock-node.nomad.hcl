# airlock nodes on Nomad (docs/multinode.md): one per client host (a system
# job, as E2B's orchestrator), running sandboxes and registering in the
# cluster registry. raw_exec: the daemon needs the host itself (KVM, network
# namespaces, nftables, tap devices, cgroups), which is what it confines
# each sandbox's VMM from.
#
# Each host needs: the airlock binary at /usr/local/bin/airlock, the guest
# image in /var/lib/airlock (`airlock image build`, or `make image`), and the
# raw_exec driver enabled. The registry's URL and the fronts' domain are the
# Nomad variable nomad/jobs/airlock-node (keys database_url, domain).
#
# Fronts and nodes authenticate each other with mutual TLS (docs/multinode.md).
# The certificates are the Nomad variable nomad/jobs/airlock-node/node (the
# group's path, which this job's tasks may read without an extra ACL policy):
# key ca (the cluster CA), and per client <node name>_cert and <node name>_key,
# <node name> being the client's node.unique.name (the --node-name, which must
# equal the name in its certificate), with the IP fronts reach it at
# (attr.unique.network.ip-address). From `airlock cluster certs`:
#
#   airlock cluster certs --out certs --front front \
#     --node host-a,10.0.0.11 --node host-b,10.0.0.12
#   cd certs && nomad var put -force nomad/jobs/airlock-node/node ca=@ca.pem \
#     secrets_key="$(base64 -w0 < secrets.key)" \
#     host-a_cert=@host-a.pem host-a_key=@host-a.key \
#     host-b_cert=@host-b.pem host-b_key=@host-b.key
#
# secrets_key is the key every node seals and opens the cluster's secrets
# with (docs/multinode.md "Secrets on every node"; 32 bytes, in base64 here).
# (`var put` replaces all the items: list every node each time). Keep
# certs/ca.key out of Nomad: it is only needed to make more certificates.
# The task renders its three files into its secrets dir; a client with no
# entry gets an empty certificate and its node refuses to start.
job "airlock-node" {
  type      = "system"
  datacenters = ["*"]

  update {
    max_parallel = 1
    min_healthy_time = "30s"
  }

  group "node" {
    network {
      port "api" {
        static = 3000
      }
    }

    # Stop taking work before an upgrade stops the daemon (sandboxes it
    # still runs are adopted by the next one: --kill-on-exit is not set).
    task "airlock" {
      driver = "raw_exec"

      config {
        command = "/usr/local/bin/airlock"
        args = [
          "--state-dir", "/var/lib/airlock",
          "serve", "--role", "node",
          "--database", "${DATABASE_URL}",
          "--listen", "0.0.0.0:3000",
          "--advertise", "${attr.unique.network.ip-address}:3000",
          "--node-name", "${node.unique.name}",
          "--cluster-ca", "${NOMAD_SECRETS_DIR}/cluster-ca.pem",
          "--cluster-cert", "${NOMAD_SECRETS_DIR}/cluster.pem",
          "--cluster-key", "${NOMAD_SECRETS_DIR}/cluster.key",
          "--cluster-secrets-key", "${NOMAD_SECRETS_DIR}/cluster-secrets.key",
          "--mcp-api", "${FRONT_ADDRESS}",
          # The fronts relay "<port>-<id>.<domain>" hosts as they came: the
          # node routes them only for its own --domain (docs/server.md).
          "--domain", "${AIRLOCK_DOMAIN}",
        ]
      }

      template {
        destination = "secrets/airlock.env"
        env         = true
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/airlock-node" }}DATABASE_URL={{ .database_url }}
          AIRLOCK_DOMAIN={{ .domain }}{{ end }}
          {{ range $i, $s := nomadService "airlock-front" }}{{ if eq $i 0 }}FRONT_ADDRESS={{ $s.Address }}:{{ $s.Port }}{{ end }}{{ end }}
        EOT
      }

      # The cluster's mutual TLS (see the top): this client's certificate and
      # key by its node.unique.name. A changed variable restarts the task
      # (the sandboxes it runs are adopted by the restarted daemon).
      template {
        destination = "secrets/cluster-ca.pem"
        perms       = "0400"
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/airlock-node/node" }}{{ .ca }}{{ end }}
        EOT
      }

      template {
        destination = "secrets/cluster.pem"
        perms       = "0400"
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/airlock-node/node" }}{{ index . (printf "%s_cert" (env "node.unique.name")) }}{{ end }}
        EOT
      }

      template {
        destination = "secrets/cluster.key"
        perms       = "0400"
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/airlock-node/node" }}{{ index . (printf "%s_key" (env "node.unique.name")) }}{{ end }}
        EOT
      }

      # Exactly the key's 32 bytes (no newline after them).
      template {
        destination = "secrets/cluster-secrets.key"
        perms       = "0400"
        data        = "{{ with nomadVar \"nomad/jobs/airlock-node/node\" }}{{ .secrets_key | base64Decode }}{{ end }}"
      }

      kill_signal  = "SIGTERM"
      kill_timeout = "60s"

      service {
        name     = "airlock-node"
        port     = "api"
        provider = "nomad"
        # A TCP check: the node's port speaks TLS and completes a handshake
        # only with a front's client certificate, which Nomad's HTTP check
        # does not present, so an http /health check would always fail.
        check {
          type     = "tcp"
          interval = "10s"
          timeout  = "2s"
        }
      }

      resources {
        cpu    = 500
        memory = 512
      }
    }
  }
}
