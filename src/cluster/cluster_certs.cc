#include "cluster/cluster_certs.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <set>
#include <string_view>

#include "common/fd.h"
#include "common/file_util.h"
#include "secrets/sealed.h"

namespace airlock::cluster {
namespace {

template <auto Free>
struct Deleter {
  template <typename T>
  void operator()(T* p) const {
    Free(p);
  }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, Deleter<X509_free>>;
using BioPtr = std::unique_ptr<BIO, Deleter<BIO_free_all>>;
using BnPtr = std::unique_ptr<BIGNUM, Deleter<BN_free>>;
using Asn1IntPtr = std::unique_ptr<ASN1_INTEGER, Deleter<ASN1_INTEGER_free>>;
using ExtPtr = std::unique_ptr<X509_EXTENSION, Deleter<X509_EXTENSION_free>>;
using NamesPtr = std::unique_ptr<GENERAL_NAMES, Deleter<GENERAL_NAMES_free>>;
using NamePtr = std::unique_ptr<GENERAL_NAME, Deleter<GENERAL_NAME_free>>;

constexpr char kCaCommonName[] = "airlock cluster CA";
constexpr int kCaDays = 3650;
constexpr int kMaxDays = 3650;
constexpr long kBackdateSeconds = 5 * 60;  // clock skew between members

// "what: <OpenSSL's reasons>", draining the thread's error queue.
Status SslError(const std::string& what) {
  std::string msg = what;
  const char* sep = ": ";
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    msg += sep;
    msg += buf;
    sep = "; ";
  }
  return Internal(msg);
}

bool IsValidIp(const std::string& ip, unsigned char* out, int* len) {
  if (inet_pton(AF_INET, ip.c_str(), out) == 1) {
    *len = 4;
    return true;
  }
  if (inet_pton(AF_INET6, ip.c_str(), out) == 1) {
    *len = 16;
    return true;
  }
  return false;
}

Status Validate(const CertsOptions& o) {
  if (o.dir.empty()) return InvalidArgument("no output directory");
  if (o.days < 1 || o.days > kMaxDays)
    return InvalidArgument("days must be 1.." + std::to_string(kMaxDays) + ", not " + std::to_string(o.days));
  std::set<std::string> seen;
  for (const auto& m : o.members) {
    if (!IsValidMemberName(m.name))
      return InvalidArgument("member name '" + m.name + "' is not [a-z0-9][a-z0-9.-]{0,62}");
    if (m.name == "ca") return InvalidArgument("member name 'ca' is the CA's file name");
    if (m.name == "secrets") return InvalidArgument("member name 'secrets' is the cluster key's file name");
    if (!seen.insert(m.name).second)
      return InvalidArgument("member '" + m.name + "' given twice (one member can be a front and a node)");
    if (!m.front && !m.node) return InvalidArgument("member '" + m.name + "' is neither a front nor a node");
    for (const auto& ip : m.ips) {
      unsigned char buf[16];
      int len = 0;
      if (!IsValidIp(ip, buf, &len))
        return InvalidArgument("member '" + m.name + "': '" + ip + "' is not an IPv4 or IPv6 address");
    }
  }
  return OkStatus();
}

// ---- files

StatusOr<bool> Exists(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) return true;
  if (errno == ENOENT) return false;
  return ErrnoError("stat " + path);
}

Status EnsureDir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) == 0) {
    if (::chmod(dir.c_str(), 0700) != 0) return ErrnoError("chmod " + dir);  // past the umask
    return OkStatus();
  }
  if (errno != EEXIST) return ErrnoError("mkdir " + dir);
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) return ErrnoError("stat " + dir);
  if (!S_ISDIR(st.st_mode)) return InvalidArgument(dir + " is not a directory");
  // Keys are written here and a CA found here is signed with: nobody else
  // may have put it there or be able to swap it.
  if (st.st_uid != ::geteuid() || (st.st_mode & 022) != 0)
    return FailedPrecondition(dir + " must be a directory of this user's that nobody else can write (it holds "
                                    "the CA's key)");
  return OkStatus();
}

// Writes `data` to `path` through an O_EXCL temporary sibling created with
// `mode` (never wider, whatever the umask: fchmod only adds back bits the
// umask took), then renames it into place.
Status WriteReplacing(const std::string& path, std::string_view data, mode_t mode) {
  ASSIGN_OR_RETURN(TempSibling t, CreateTempSibling(path, mode));
  UniqueFd fd = std::move(t.fd);
  const std::string tmp = std::move(t.path);
  Status st = WriteAll(fd.get(), data, tmp);
  if (st.ok() && ::fchmod(fd.get(), mode) != 0) st = ErrnoError("fchmod " + tmp);
  if (st.ok() && ::fsync(fd.get()) != 0) st = ErrnoError("fsync " + tmp);
  fd.Reset();
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) st = ErrnoError("rename " + tmp + " to " + path);
  if (!st.ok()) ::unlink(tmp.c_str());
  return st;
}

StatusOr<std::string> ReadSmallFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoError("open " + path);
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("read " + path);
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > (1 << 20)) return InvalidArgument(path + " is larger than 1 MiB");
  }
  return out;
}

// ---- PEM

StatusOr<std::string> BioContents(BIO* bio) {
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  if (n < 0) return SslError("BIO_get_mem_data");
  return std::string(data, static_cast<size_t>(n));
}

StatusOr<std::string> CertPem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) return SslError("PEM_write_bio_X509");
  return BioContents(bio.get());
}

StatusOr<std::string> KeyPem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1)
    return SslError("PEM_write_bio_PrivateKey");
  return BioContents(bio.get());
}

// ---- certificates

StatusOr<PkeyPtr> NewKey() {
  PkeyPtr key(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
  if (!key) return SslError("generate an EC P-256 key");
  return key;
}

// A random positive 128-bit serial (RFC 5280: at most 20 octets, positive).
Status SetRandomSerial(X509* cert) {
  unsigned char r[16];
  if (RAND_bytes(r, sizeof r) != 1) return SslError("RAND_bytes");
  r[0] &= 0x7f;
  r[0] |= 0x40;  // never zero, always 16 octets
  BnPtr bn(BN_bin2bn(r, sizeof r, nullptr));
  if (!bn) return SslError("BN_bin2bn");
  Asn1IntPtr serial(BN_to_ASN1_INTEGER(bn.get(), nullptr));
  if (!serial || X509_set_serialNumber(cert, serial.get()) != 1) return SslError("set the serial number");
  return OkStatus();
}

// A certificate of `key` for CN=`cn`, valid from now-5min for `days` days,
// issued by `issuer` (nullptr: self-issued). Extensions are added by the caller.
StatusOr<X509Ptr> NewCert(EVP_PKEY* key, const std::string& cn, X509* issuer, int days) {
  X509Ptr cert(X509_new());
  if (!cert || X509_set_version(cert.get(), X509_VERSION_3) != 1) return SslError("X509_new");
  RETURN_IF_ERROR(SetRandomSerial(cert.get()));
  if (!X509_gmtime_adj(X509_getm_notBefore(cert.get()), -kBackdateSeconds) ||
      !X509_time_adj_ex(X509_getm_notAfter(cert.get()), days, 0, nullptr))
    return SslError("set the validity");
  X509_NAME* subject = X509_get_subject_name(cert.get());
  if (X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(cn.c_str()), -1,
                                 -1, 0) != 1)
    return SslError("set the subject");
  if (X509_set_issuer_name(cert.get(), issuer ? X509_get_subject_name(issuer) : subject) != 1)
    return SslError("set the issuer");
  if (X509_set_pubkey(cert.get(), key) != 1) return SslError("set the public key");
  return cert;
}

// Adds one extension written in OpenSSL's config syntax (a fixed string of ours).
Status AddExt(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  ExtPtr ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1)
    return SslError(std::string("add extension ") + OBJ_nid2sn(nid) + "=" + value);
  return OkStatus();
}

Status AddName(GENERAL_NAMES* names, int type, const std::string& value) {
  NamePtr gn(GENERAL_NAME_new());
  ASN1_IA5STRING* s = ASN1_IA5STRING_new();
  if (!gn || !s || ASN1_STRING_set(s, value.data(), static_cast<int>(value.size())) != 1) {
    ASN1_IA5STRING_free(s);
    return SslError("subjectAltName " + value);
  }
  GENERAL_NAME_set0_value(gn.get(), type, s);
  if (sk_GENERAL_NAME_push(names, gn.get()) == 0) return SslError("subjectAltName " + value);
  gn.release();
  return OkStatus();
}

Status AddIp(GENERAL_NAMES* names, const std::string& ip) {
  unsigned char buf[16];
  int len = 0;
  if (!IsValidIp(ip, buf, &len)) return InvalidArgument("'" + ip + "' is not an IPv4 or IPv6 address");
  NamePtr gn(GENERAL_NAME_new());
  ASN1_OCTET_STRING* s = ASN1_OCTET_STRING_new();
  if (!gn || !s || ASN1_OCTET_STRING_set(s, buf, len) != 1) {
    ASN1_OCTET_STRING_free(s);
    return SslError("subjectAltName IP:" + ip);
  }
  GENERAL_NAME_set0_value(gn.get(), GEN_IPADD, s);
  if (sk_GENERAL_NAME_push(names, gn.get()) == 0) return SslError("subjectAltName IP:" + ip);
  gn.release();
  return OkStatus();
}

// The subjectAltName built as values, so no member-given text goes through
// OpenSSL's config parser.
Status AddSubjectAltName(X509* cert, const ClusterMember& m) {
  NamesPtr names(GENERAL_NAMES_new());
  if (!names) return SslError("GENERAL_NAMES_new");
  RETURN_IF_ERROR(AddName(names.get(), GEN_DNS, m.name));
  if (m.front) RETURN_IF_ERROR(AddName(names.get(), GEN_URI, std::string(kRoleUriPrefix) + "front:" + m.name));
  if (m.node) RETURN_IF_ERROR(AddName(names.get(), GEN_URI, std::string(kRoleUriPrefix) + "node:" + m.name));
  for (const auto& ip : m.ips) RETURN_IF_ERROR(AddIp(names.get(), ip));
  if (X509_add1_ext_i2d(cert, NID_subject_alt_name, names.get(), 0, X509V3_ADD_DEFAULT) != 1)
    return SslError("add subjectAltName");
  return OkStatus();
}

struct Ca {
  X509Ptr cert;
  PkeyPtr key;
};

StatusOr<Ca> MakeCa() {
  Ca ca;
  ASSIGN_OR_RETURN(ca.key, NewKey());
  ASSIGN_OR_RETURN(ca.cert, NewCert(ca.key.get(), kCaCommonName, nullptr, kCaDays));
  X509* c = ca.cert.get();
  RETURN_IF_ERROR(AddExt(c, c, NID_basic_constraints, "critical,CA:TRUE,pathlen:0"));
  RETURN_IF_ERROR(AddExt(c, c, NID_key_usage, "critical,keyCertSign,cRLSign"));
  RETURN_IF_ERROR(AddExt(c, c, NID_subject_key_identifier, "hash"));
  if (X509_sign(c, ca.key.get(), EVP_sha256()) == 0) return SslError("sign the CA certificate");
  return ca;
}

StatusOr<Ca> LoadCa(const std::string& pem_path, const std::string& key_path) {
  ASSIGN_OR_RETURN(std::string pem, ReadSmallFile(pem_path));
  ASSIGN_OR_RETURN(std::string key, ReadSmallFile(key_path));
  Ca ca;
  BioPtr pb(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (pb) ca.cert.reset(PEM_read_bio_X509(pb.get(), nullptr, nullptr, nullptr));
  if (!ca.cert) {
    ERR_clear_error();
    return FailedPrecondition(pem_path + " holds no PEM certificate");
  }
  BioPtr kb(BIO_new_mem_buf(key.data(), static_cast<int>(key.size())));
  if (kb) ca.key.reset(PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr));
  if (!ca.key) {
    ERR_clear_error();
    return FailedPrecondition(key_path + " holds no (unencrypted) PEM private key");
  }
  if (X509_check_private_key(ca.cert.get(), ca.key.get()) != 1) {
    ERR_clear_error();
    return FailedPrecondition(key_path + " is not the key of " + pem_path);
  }
  if (X509_check_ca(ca.cert.get()) == 0) return FailedPrecondition(pem_path + " is not a CA certificate");
  return ca;
}

StatusOr<X509Ptr> MakeMemberCert(const Ca& ca, EVP_PKEY* key, const ClusterMember& m, int days) {
  ASSIGN_OR_RETURN(X509Ptr cert, NewCert(key, m.name, ca.cert.get(), days));
  X509* c = cert.get();
  X509* issuer = ca.cert.get();
  RETURN_IF_ERROR(AddExt(c, issuer, NID_basic_constraints, "critical,CA:FALSE"));
  RETURN_IF_ERROR(AddExt(c, issuer, NID_key_usage, "critical,digitalSignature"));
  RETURN_IF_ERROR(AddExt(c, issuer, NID_ext_key_usage, m.node ? "serverAuth,clientAuth" : "clientAuth"));
  RETURN_IF_ERROR(AddSubjectAltName(c, m));
  RETURN_IF_ERROR(AddExt(c, issuer, NID_subject_key_identifier, "hash"));
  RETURN_IF_ERROR(AddExt(c, issuer, NID_authority_key_identifier, "keyid:always"));
  if (X509_sign(c, ca.key.get(), EVP_sha256()) == 0) return SslError("sign the certificate of " + m.name);
  return cert;
}

}  // namespace

bool IsValidMemberName(const std::string& name) {
  if (name.empty() || name.size() > 63) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (!alnum && (i == 0 || (c != '.' && c != '-'))) return false;
  }
  return true;
}

StatusOr<std::vector<std::string>> MakeClusterCerts(const CertsOptions& o) {
  RETURN_IF_ERROR(Validate(o));
  RETURN_IF_ERROR(EnsureDir(o.dir));
  const std::string ca_pem = o.dir + "/ca.pem", ca_key = o.dir + "/ca.key";
  ASSIGN_OR_RETURN(bool has_pem, Exists(ca_pem));
  ASSIGN_OR_RETURN(bool has_key, Exists(ca_key));
  if (has_pem != has_key)
    return FailedPrecondition(has_pem ? ca_pem + " exists without " + ca_key + " (cannot sign with it)"
                                      : ca_key + " exists without " + ca_pem);
  std::vector<std::string> written;
  Ca ca;
  if (has_pem) {
    struct stat st;
    for (const std::string& f : {ca_pem, ca_key}) {
      if (::lstat(f.c_str(), &st) != 0) return ErrnoError("stat " + f);
      if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 022) != 0)
        return FailedPrecondition(f + " must be a plain file of this user's that nobody else can write");
    }
    if (::lstat(ca_key.c_str(), &st) == 0 && (st.st_mode & 077) != 0)
      return FailedPrecondition(ca_key + " is readable by others (chmod 600 it, and make a new CA if it leaked)");
    ASSIGN_OR_RETURN(ca, LoadCa(ca_pem, ca_key));
  } else {
    ASSIGN_OR_RETURN(ca, MakeCa());
    ASSIGN_OR_RETURN(std::string key_pem, KeyPem(ca.key.get()));
    ASSIGN_OR_RETURN(std::string cert_pem, CertPem(ca.cert.get()));
    // The key first: a crash between the two leaves ca.key alone, which the
    // next run refuses rather than signing with a CA nobody trusts.
    RETURN_IF_ERROR(WriteReplacing(ca_key, key_pem, 0600));
    RETURN_IF_ERROR(WriteReplacing(ca_pem, cert_pem, 0644));
    written.push_back(ca_pem);
    written.push_back(ca_key);
  }
  // The cluster key (every node's --cluster-secrets-key): made once, like
  // the CA; one found here must pass the key file rules.
  const std::string secrets_key = o.dir + "/" + kClusterSecretsKeyFile;
  ASSIGN_OR_RETURN(bool made_key, secrets::CreateKeyFile(secrets_key));
  if (made_key) {
    written.push_back(secrets_key);
  } else {
    auto key = secrets::LoadKeyFile(secrets_key);
    if (!key.ok()) return FailedPrecondition(key.status().message());
    secrets::Wipe(*key);
  }
  for (const auto& m : o.members) {
    ASSIGN_OR_RETURN(PkeyPtr key, NewKey());
    ASSIGN_OR_RETURN(X509Ptr cert, MakeMemberCert(ca, key.get(), m, o.days));
    ASSIGN_OR_RETURN(std::string key_pem, KeyPem(key.get()));
    ASSIGN_OR_RETURN(std::string cert_pem, CertPem(cert.get()));
    const std::string pem_path = o.dir + "/" + m.name + ".pem", key_path = o.dir + "/" + m.name + ".key";
    RETURN_IF_ERROR(WriteReplacing(key_path, key_pem, 0600));
    RETURN_IF_ERROR(WriteReplacing(pem_path, cert_pem, 0644));
    written.push_back(pem_path);
    written.push_back(key_path);
  }
  RETURN_IF_ERROR(FsyncDir(o.dir));
  return written;
}

StatusOr<ClusterIdentity> IdentityOf(X509* cert) {
  if (!cert) return PermissionDenied("no peer certificate");
  int crit = 0;
  NamesPtr names(static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, &crit, nullptr)));
  if (!names) {
    ERR_clear_error();
    return PermissionDenied(crit == -2 ? "certificate has more than one subjectAltName"
                                       : "certificate has no subjectAltName (no cluster role)");
  }
  ClusterIdentity id;
  const std::string_view prefix = kRoleUriPrefix;
  for (int i = 0; i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* gn = sk_GENERAL_NAME_value(names.get(), i);
    if (gn->type != GEN_URI) continue;
    const ASN1_IA5STRING* s = gn->d.uniformResourceIdentifier;
    std::string uri(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)), ASN1_STRING_length(s));
    if (uri.compare(0, prefix.size(), prefix) != 0) continue;
    std::string_view rest = std::string_view(uri).substr(prefix.size());
    std::string name;
    if (rest.starts_with("front:")) {
      id.front = true;
      name = rest.substr(6);
    } else if (rest.starts_with("node:")) {
      id.node = true;
      name = rest.substr(5);
    } else {
      return PermissionDenied("unknown cluster role in URI '" + uri + "'");
    }
    if (!IsValidMemberName(name)) return PermissionDenied("bad member name in URI '" + uri + "'");
    if (!id.name.empty() && id.name != name)
      return PermissionDenied("certificate names two members: '" + id.name + "' and '" + name + "'");
    id.name = name;
  }
  if (id.name.empty()) return PermissionDenied("certificate has no airlock-cluster role URI");
  return id;
}

}  // namespace airlock::cluster
