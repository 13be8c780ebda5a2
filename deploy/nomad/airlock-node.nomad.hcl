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

      kill_signal  = "SIGTERM"
      kill_timeout = "60s"

      service {
        name     = "airlock-node"
        port     = "api"
        provider = "nomad"
        check {
          type     = "http"
          path     = "/health"
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
