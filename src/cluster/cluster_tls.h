// Mutual TLS between a cluster's fronts and nodes (docs/multinode.md "Trust
// between fronts and nodes"; issue 38 item 4). The operator gives every
// member the cluster CA and a certificate of its own (serve --cluster-ca,
// --cluster-cert, --cluster-key; `airlock cluster certs` makes a dev set,
// cluster_certs.h). A certificate names its member and roles in its
// subjectAltName role URIs (airlock-cluster:front:<name>,
// airlock-cluster:node:<name>).
//
//   front ──TLS 1.2+, the front's certificate──▶ node (--listen)
//     the front trusts only the cluster CA, and the peer must be the node
//     the registry names at that address (its role URI); the node trusts
//     only the cluster CA, and the client must be a front.
//
// What it protects: API keys, the reservation and every byte relayed
// between fronts and nodes on the network between them; a process that can
// reach a node's port but holds no front's certificate gets nothing (its
// handshake fails); a node address someone wrote into the registry is
// used only when that node's certificate answers there.
//
// Load's errors: InvalidArgument for unreadable or mismatched files (the
// key is not the certificate's); PermissionDenied when the certificate does
// not chain to the CA for the uses its roles need (a node's serves and
// connects, a front's connects), or does not name the roles this process
// plays.
#pragma once

#include <memory>
#include <string>

#include "cluster/cluster_certs.h"
#include "common/status.h"
#include "gateway/tls_front.h"
#include "gateway/upstream_tls.h"

namespace airlock::cluster {

struct ClusterTlsFiles {
  std::string ca, cert, key;
  bool any() const { return !ca.empty() || !cert.empty() || !key.empty(); }
};

class ClusterTls {
 public:
  static StatusOr<std::shared_ptr<const ClusterTls>> Load(const ClusterTlsFiles& files, bool front, bool node);
  const ClusterIdentity& identity() const { return identity_; }
  const ClusterTlsFiles& files() const { return files_; }
  // A front's connection to node `name` (relays, creates, fan-outs).
  std::shared_ptr<const gateway::UpstreamTls> ToNode(const std::string& name) const;
  // A node's listener: clients must be fronts.
  std::shared_ptr<const gateway::TlsClientAuth> FromFronts() const;

 private:
  ClusterTlsFiles files_;
  ClusterIdentity identity_;
  std::shared_ptr<boost::asio::ssl::context> client_;  // set when front
};

}  // namespace airlock::cluster
