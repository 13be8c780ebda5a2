# airlock fronts on Nomad (docs/multinode.md): the stateless E2B API of the
# cluster (placement, routing, console, MCP), as many as you like behind one
# load balancer; a service job. They keep nothing: a front that dies is
# replaced and routes on its first request.
#
# The registry's URL is the Nomad variable nomad/jobs/airlock-front (key
# database_url). Put TLS in front of them in the load balancer, with a
# wildcard certificate for *.<domain> (the <port>-<id>.<domain> hosts).
job "airlock-front" {
  type        = "service"
  datacenters = ["*"]

  group "front" {
    count = 2

    network {
      port "http" {
        to = 3000
      }
    }

    task "airlock" {
      driver = "raw_exec"

      config {
        command = "/usr/local/bin/airlock"
        args = [
          "serve", "--role", "front",
          "--database", "${DATABASE_URL}",
          "--listen", "0.0.0.0:${NOMAD_PORT_http}",
          "--domain", "${AIRLOCK_DOMAIN}",
        ]
      }

      template {
        destination = "secrets/airlock.env"
        env         = true
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/airlock-front" }}DATABASE_URL={{ .database_url }}
          AIRLOCK_DOMAIN={{ .domain }}{{ end }}
        EOT
      }

      service {
        name     = "airlock-front"
        port     = "http"
        provider = "nomad"
        check {
          type     = "http"
          path     = "/health"
          interval = "5s"
          timeout  = "2s"
        }
      }

      resources {
        cpu    = 500
        memory = 256
      }
    }
  }
}
