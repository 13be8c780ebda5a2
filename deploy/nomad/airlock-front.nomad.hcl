# airlock fronts on Nomad (docs/multinode.md): the stateless E2B API of the
# cluster (placement, routing, console, MCP), as many as you like behind one
# load balancer; a service job. They keep nothing: a front that dies is
# replaced and routes on its first request.
#
# The registry's URL is the Nomad variable nomad/jobs/airlock-front (key
# database_url). Put TLS in front of them in the load balancer, with a
# wildcard certificate for *.<domain> (the <port>-<id>.<domain> hosts).
#
# Fronts reach nodes over mutual TLS (docs/multinode.md) with the `front`
# member's certificate from `airlock cluster certs` (made with the nodes':
# airlock-node.nomad.hcl), the Nomad variable nomad/jobs/airlock-front/front
# (the group's path, readable by this job's tasks without an extra ACL
# policy), keys ca, cert and key:
#
#   cd certs && nomad var put -force nomad/jobs/airlock-front/front \
#     ca=@ca.pem cert=@front.pem key=@front.key
#
# Keep certs/ca.key out of Nomad. The task renders the three into its secrets
# dir; the fronts' own port (the public API) stays plain HTTP.
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
          "--cluster-ca", "${NOMAD_SECRETS_DIR}/cluster-ca.pem",
          "--cluster-cert", "${NOMAD_SECRETS_DIR}/cluster.pem",
          "--cluster-key", "${NOMAD_SECRETS_DIR}/cluster.key",
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

      # The cluster's mutual TLS (see the top).
      template {
        destination = "secrets/cluster-ca.pem"
        perms       = "0400"
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/airlock-front/front" }}{{ .ca }}{{ end }}
        EOT
      }

      template {
        destination = "secrets/cluster.pem"
        perms       = "0400"
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/airlock-front/front" }}{{ .cert }}{{ end }}
        EOT
      }

      template {
        destination = "secrets/cluster.key"
        perms       = "0400"
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/airlock-front/front" }}{{ .key }}{{ end }}
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
