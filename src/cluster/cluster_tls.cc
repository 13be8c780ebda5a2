// Mutual TLS between fronts and nodes (cluster_tls.h).
#include "cluster/cluster_tls.h"

#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <boost/asio/ssl.hpp>
#include <cstdio>

namespace airlock::cluster {

namespace {

namespace ssl = boost::asio::ssl;

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct StoreFree {
  void operator()(X509_STORE* s) const { X509_STORE_free(s); }
};
struct StoreCtxFree {
  void operator()(X509_STORE_CTX* s) const { X509_STORE_CTX_free(s); }
};

StatusOr<std::unique_ptr<X509, X509Free>> ReadCert(const std::string& path, const char* flag) {
  std::unique_ptr<FILE, FileCloser> f(std::fopen(path.c_str(), "re"));
  if (!f) return InvalidArgument(std::string(flag) + " " + path + ": cannot be read");
  std::unique_ptr<X509, X509Free> x(PEM_read_X509(f.get(), nullptr, nullptr, nullptr));
  if (!x) return InvalidArgument(std::string(flag) + " " + path + ": not a PEM certificate");
  return x;
}

// `cert` chains to the CA in `ca_file` for `purpose` (X509_PURPOSE_SSL_*).
Status VerifyFor(X509* cert, const std::string& ca_file, int purpose, const char* use) {
  std::unique_ptr<X509_STORE, StoreFree> store(X509_STORE_new());
  if (!store || X509_STORE_load_file(store.get(), ca_file.c_str()) != 1)
    return InvalidArgument("--cluster-ca " + ca_file + ": not a PEM certificate");
  std::unique_ptr<X509_STORE_CTX, StoreCtxFree> ctx(X509_STORE_CTX_new());
  if (!ctx || X509_STORE_CTX_init(ctx.get(), store.get(), cert, nullptr) != 1) return Internal("X509_STORE_CTX_init");
  X509_STORE_CTX_set_purpose(ctx.get(), purpose);
  if (X509_verify_cert(ctx.get()) != 1) {
    return PermissionDenied(std::string("--cluster-cert does not chain to --cluster-ca for ") + use + ": " +
                            X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get())));
  }
  return OkStatus();
}

std::string Describe(const ClusterIdentity& id) {
  std::string roles = id.front && id.node ? "front and node" : id.front ? "front" : "node";
  return roles + " " + id.name;
}

// The peer of a handshake, as a cluster member: its chain verified against
// the cluster CA (verify_peer fails the handshake otherwise; checked here
// once more, for both sides), then its role URIs.
StatusOr<ClusterIdentity> PeerOf(ssl_st* s) {
  X509* peer = SSL_get0_peer_certificate(s);
  if (!peer) return PermissionDenied("no certificate");
  if (SSL_get_verify_result(s) != X509_V_OK) return PermissionDenied("its certificate chain was not verified");
  return IdentityOf(peer);
}

}  // namespace

StatusOr<std::shared_ptr<const ClusterTls>> ClusterTls::Load(const ClusterTlsFiles& files, bool front, bool node) {
  if (files.ca.empty() || files.cert.empty() || files.key.empty())
    return InvalidArgument("cluster TLS needs --cluster-ca, --cluster-cert and --cluster-key");
  auto t = std::shared_ptr<ClusterTls>(new ClusterTls());
  t->files_ = files;
  ASSIGN_OR_RETURN(auto cert, ReadCert(files.cert, "--cluster-cert"));
  ASSIGN_OR_RETURN(auto ca, ReadCert(files.ca, "--cluster-ca"));
  (void)ca;
  ASSIGN_OR_RETURN(t->identity_, IdentityOf(cert.get()));
  if (front && !t->identity_.front)
    return PermissionDenied("--cluster-cert " + files.cert + " is " + Describe(t->identity_) + "'s, not a front's");
  if (node && !t->identity_.node)
    return PermissionDenied("--cluster-cert " + files.cert + " is " + Describe(t->identity_) + "'s, not a node's");
  if (front || node) RETURN_IF_ERROR(VerifyFor(cert.get(), files.ca, X509_PURPOSE_SSL_CLIENT, "connecting"));
  if (node) RETURN_IF_ERROR(VerifyFor(cert.get(), files.ca, X509_PURPOSE_SSL_SERVER, "serving"));

  // The client side (a front's to nodes, a node's to its peers): only the
  // cluster CA is trusted.
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_2_VERSION);
  boost::system::error_code ec;
  ctx->load_verify_file(files.ca, ec);
  if (ec) return InvalidArgument("--cluster-ca " + files.ca + ": " + ec.message());
  ctx->use_certificate_chain_file(files.cert, ec);
  if (ec) return InvalidArgument("--cluster-cert " + files.cert + ": " + ec.message());
  ctx->use_private_key_file(files.key, ssl::context::pem, ec);
  if (ec) return InvalidArgument("--cluster-key " + files.key + ": " + ec.message());
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1)
    return InvalidArgument("--cluster-key " + files.key + " is not the key of --cluster-cert " + files.cert);
  ctx->set_verify_mode(ssl::verify_peer);
  static const unsigned char kAlpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  SSL_CTX_set_alpn_protos(ctx->native_handle(), kAlpn, sizeof kAlpn);
  t->client_ = std::move(ctx);
  return std::shared_ptr<const ClusterTls>(std::move(t));
}

std::function<Status(ssl_st*)> ClusterTls::PeerIsNode(const std::string& name) {
  return [name](ssl_st* s) -> Status {
    ASSIGN_OR_RETURN(ClusterIdentity peer, PeerOf(s));
    if (!peer.node || peer.name != name)
      return PermissionDenied("the certificate there is " + Describe(peer) + "'s, not node " + name + "'s");
    return OkStatus();
  };
}

std::shared_ptr<const gateway::UpstreamTls> ClusterTls::ToNode(const std::string& name) const {
  auto u = std::make_shared<gateway::UpstreamTls>();
  u->ctx = client_;
  u->what = "cluster TLS to node " + name;
  u->check = PeerIsNode(name);
  return u;
}

std::shared_ptr<const gateway::TlsClientAuth> ClusterTls::FromFronts() const {
  auto a = std::make_shared<gateway::TlsClientAuth>();
  a->ca_file = files_.ca;
  a->check = [](ssl_st* s) -> Status {
    ASSIGN_OR_RETURN(ClusterIdentity peer, PeerOf(s));
    if (!peer.front) return PermissionDenied("its certificate is " + Describe(peer) + "'s, not a front's");
    return OkStatus();
  };
  return a;
}

std::shared_ptr<const gateway::TlsClientAuth> ClusterTls::FromFrontsAndPeers(uint16_t artefact_port) const {
  auto a = std::make_shared<gateway::TlsClientAuth>(*FromFronts());
  a->peer_check = [](ssl_st* s) -> Status {
    ASSIGN_OR_RETURN(ClusterIdentity peer, PeerOf(s));
    if (!peer.node) return PermissionDenied("its certificate is " + Describe(peer) + "'s, not a node's");
    return OkStatus();
  };
  a->peer_backend_port = artefact_port;
  a->peer_alpn = kArtefactAlpn;
  return a;
}

}  // namespace airlock::cluster
