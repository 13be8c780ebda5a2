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
//   node ──TLS 1.2+, the node's certificate, ALPN kArtefactAlpn──▶ node
//     (--listen; artefacts.h FetchArtefact) the same both ways, but the
//     client must be a node, and it reaches only the listener's artefact
//     server (FromFrontsAndPeers), never the API.
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

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "cluster/cluster_certs.h"
#include "common/status.h"
#include "gateway/tls_front.h"
#include "gateway/upstream_tls.h"

namespace airlock::cluster {

// The ALPN protocol a node names to reach a peer's artefact server through
// its TLS listener (a `both` member's certificate would reach the API).
inline constexpr char kArtefactAlpn[] = "airlock-artefacts/1";

struct ClusterTlsFiles {
  std::string ca, cert, key;
  bool any() const { return !ca.empty() || !cert.empty() || !key.empty(); }
};

class ClusterTls {
 public:
  static StatusOr<std::shared_ptr<const ClusterTls>> Load(const ClusterTlsFiles& files, bool front, bool node);
  const ClusterIdentity& identity() const { return identity_; }
  const ClusterTlsFiles& files() const { return files_; }
  // A front's connection to node `name` (relays, creates, fan-outs):
  // PeerClientContext() and PeerIsNode(name).
  std::shared_ptr<const gateway::UpstreamTls> ToNode(const std::string& name) const;
  // This member's client side, a front's or a node's (a node fetching an
  // artefact from its peers, artefacts.h FetchRequest::tls): its own
  // certificate as the client's, the cluster CA the only trust, the peer's
  // chain verified, ALPN http/1.1 (FetchArtefact names kArtefactAlpn on
  // its connection).
  std::shared_ptr<boost::asio::ssl::context> PeerClientContext() const { return client_; }
  // After the handshake: PermissionDenied unless the peer's certificate
  // (verified against the cluster CA) names node `name`.
  static std::function<Status(ssl_st*)> PeerIsNode(const std::string& name);
  // A node's listener: clients must be fronts.
  std::shared_ptr<const gateway::TlsClientAuth> FromFronts() const;
  // A node's listener that also serves its artefacts: fronts reach the API;
  // other nodes of the cluster (a node's certificate, or any member's that
  // asked for kArtefactAlpn and names a node) reach only 127.0.0.1:
  // artefact_port. Plain HTTP, another CA's certificates and clients
  // without one are refused as by FromFronts.
  std::shared_ptr<const gateway::TlsClientAuth> FromFrontsAndPeers(uint16_t artefact_port) const;

 private:
  ClusterTlsFiles files_;
  ClusterIdentity identity_;
  std::shared_ptr<boost::asio::ssl::context> client_;  // this member's client side (fronts and nodes)
};

}  // namespace airlock::cluster
