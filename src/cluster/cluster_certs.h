// A development CA and per-member certificates for the cluster's mutual TLS
// (`airlock cluster certs`; docs/multinode.md): fronts and nodes present a
// certificate signed by the cluster CA, and the peer reads who it is from the
// certificate's role URIs (IdentityOf), not from its hostname.
//
// What MakeClusterCerts writes into `dir` (PEM; keys PKCS#8 "PRIVATE KEY"):
//   ca.pem (0644), ca.key (0600): EC P-256, CN "airlock cluster CA", 10 years,
//     basicConstraints critical CA:TRUE pathlen:0, keyUsage critical
//     keyCertSign,cRLSign, subjectKeyIdentifier. Made once, then reused, so
//     members can be added later.
//   secrets.key (0600): the cluster key, 32 random bytes, that sealing
//     secrets in the registry uses (secrets/sealed.h; every node is given it
//     with `serve --cluster-secrets-key`, fronts never need it). Made once
//     with O_EXCL (a temporary sibling linked into place), then kept; one
//     that breaks the key file rules (size, mode, owner) is
//     FailedPrecondition naming the path and the rule.
//   <name>.pem (0644), <name>.key (0600) per member: EC P-256, signed by the CA
//     with SHA-256, CN=<name>, a random 128-bit serial, valid from now-5min
//     for `days` days; basicConstraints critical CA:FALSE, keyUsage critical
//     digitalSignature, extendedKeyUsage serverAuth (node) + clientAuth (both
//     roles), subjectAltName DNS:<name>, URI:airlock-cluster:front:<name>
//     and/or URI:airlock-cluster:node:<name>, IP:<each ip>;
//     subject/authorityKeyIdentifier.
// Every file is written to an O_EXCL temporary sibling created with its final
// mode (a key is never readable by others, not even briefly), fsynced, then
// renamed into place: a reader sees the old file or the whole new one.
//
// Errors: InvalidArgument for a bad name (not [a-z0-9][a-z0-9.-]{0,62}, "ca",
// "secrets", or given twice), a member with no role, an IP that is not an IPv4/IPv6
// literal, days outside 1..3650; FailedPrecondition for ca.pem without
// ca.key (or the reverse), a CA key that does not match ca.pem, a ca.pem
// that is not a CA, or a secrets.key that breaks the key file rules;
// ErrnoError (path named) for the file system; Internal with OpenSSL's
// reason for the crypto.
#pragma once

#include <openssl/x509.h>

#include <string>
#include <vector>

#include "common/status.h"

namespace airlock::cluster {

// The role URIs a cluster certificate carries in its subjectAltName:
// "airlock-cluster:front:<name>", "airlock-cluster:node:<name>" (a `both`
// member carries both).
inline constexpr char kRoleUriPrefix[] = "airlock-cluster:";
enum class ClusterRole { kFront, kNode };

struct ClusterMember {
  std::string name;                  // [a-z0-9][a-z0-9.-]{0,62}: the node-name rule
  bool front = false, node = false;  // at least one
  std::vector<std::string> ips;      // extra IP SANs (IPv4/IPv6 literals)
};

struct CertsOptions {
  std::string dir;  // created 0700 if missing (its parent must exist)
  std::vector<ClusterMember> members;
  int days = 365;  // member certificates' lifetime, 1..3650
};

// True for a valid member name: [a-z0-9][a-z0-9.-]{0,62}.
bool IsValidMemberName(const std::string& name);

// The cluster key's file name in the output directory.
inline constexpr char kClusterSecretsKeyFile[] = "secrets.key";

// Makes (or reuses) the CA and the cluster key in o.dir and one certificate
// and key per member, as the file comment says. Returns the paths written,
// in order (ca.pem, ca.key when made now; secrets.key when made now; then
// <name>.pem, <name>.key per member).
StatusOr<std::vector<std::string>> MakeClusterCerts(const CertsOptions& o);

// The cluster identity in a peer certificate: the name and roles of its role
// URIs. Every role URI must name the same valid member and a known role;
// none, two names, an unknown role or a bad name is PermissionDenied with the
// reason. Does NOT verify the chain: call it on a certificate the TLS
// handshake has verified against the cluster CA.
struct ClusterIdentity {
  std::string name;
  bool front = false, node = false;
};
StatusOr<ClusterIdentity> IdentityOf(X509* cert);

}  // namespace airlock::cluster
