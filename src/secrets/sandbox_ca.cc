#include "secrets/sandbox_ca.h"

#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "secrets/broker.h"

namespace airlock::secrets {
namespace {

Status SslError(const std::string& what) {
  unsigned long e = ERR_get_error();
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return Internal(what + ": " + (e ? buf : "unknown OpenSSL error"));
}

EVP_PKEY* NewKey() {
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_EC, nullptr);
  EVP_PKEY* key = nullptr;
  if (ctx && EVP_PKEY_keygen_init(ctx) == 1 && EVP_PKEY_CTX_set_ec_paramgen_curve_nid(ctx, NID_X9_62_prime256v1) == 1) {
    EVP_PKEY_keygen(ctx, &key);
  }
  EVP_PKEY_CTX_free(ctx);
  return key;
}

bool RandomSerial(X509* x) {
  BIGNUM* bn = BN_new();
  bool ok = bn && BN_rand(bn, 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) == 1 &&
            BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) != nullptr;
  BN_free(bn);
  return ok;
}

bool AddExt(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (!ext) return false;
  bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

std::string Pem(X509* x) {
  BIO* b = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(b, x);
  char* p = nullptr;
  long n = BIO_get_mem_data(b, &p);
  std::string out(p, static_cast<size_t>(n));
  BIO_free(b);
  return out;
}

std::string KeyPem(EVP_PKEY* k) {
  BIO* b = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(b, k, nullptr, nullptr, 0, nullptr, nullptr);
  char* p = nullptr;
  long n = BIO_get_mem_data(b, &p);
  std::string out(p, static_cast<size_t>(n));
  BIO_free(b);
  return out;
}

std::string LowerHost(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

SandboxCa::~SandboxCa() {
  X509_free(cert_);
  EVP_PKEY_free(key_);
}

StatusOr<std::shared_ptr<SandboxCa>> SandboxCa::Generate(const std::string& sandbox_id,
                                                         const std::vector<std::string>& hosts,
                                                         std::chrono::seconds validity) {
  if (hosts.empty()) return InvalidArgument("a sandbox CA needs at least one host");
  std::shared_ptr<SandboxCa> ca(new SandboxCa());
  ca->validity_ = validity;
  for (const auto& h : hosts) ca->hosts_.push_back(LowerHost(h));
  ca->key_ = NewKey();
  if (!ca->key_) return SslError("generate CA key");
  X509* x = X509_new();
  ca->cert_ = x;
  X509_set_version(x, 2);
  if (!RandomSerial(x)) return SslError("CA serial");
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), static_cast<long>(validity.count()));
  X509_set_pubkey(x, ca->key_);
  X509_NAME* name = X509_get_subject_name(x);
  std::string cn = "airlock sandbox " + sandbox_id;
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("airlock"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(x, name);
  std::string permitted;
  for (const auto& h : ca->hosts_) {
    std::string dns = h.rfind("*.", 0) == 0 ? h.substr(2) : h;
    permitted += (permitted.empty() ? "" : ",") + std::string("permitted;DNS:") + dns;
  }
  if (!AddExt(x, x, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") ||
      !AddExt(x, x, NID_key_usage, "critical,keyCertSign,cRLSign") ||
      !AddExt(x, x, NID_subject_key_identifier, "hash") ||
      !AddExt(x, x, NID_name_constraints, "critical," + permitted)) {
    return SslError("CA extensions");
  }
  if (X509_sign(x, ca->key_, EVP_sha256()) == 0) return SslError("sign CA");
  ca->cert_pem_ = Pem(x);
  return ca;
}

StatusOr<CertAndKey> SandboxCa::LeafFor(const std::string& host_in) {
  std::string host = host_in;
  if (size_t colon = host.rfind(':'); colon != std::string::npos && host.find(':') == colon) host.resize(colon);
  host = LowerHost(host);
  bool allowed = false;
  for (const auto& p : hosts_) allowed = allowed || Broker::HostMatches(p, host);
  if (!allowed) return PermissionDenied("no brokered secret of this sandbox may go to " + host);
  std::lock_guard<std::mutex> l(mu_);
  if (auto it = leaves_.find(host); it != leaves_.end()) return it->second;
  EVP_PKEY* key = NewKey();
  if (!key) return SslError("generate leaf key");
  X509* x = X509_new();
  auto cleanup = [&] {
    X509_free(x);
    EVP_PKEY_free(key);
  };
  X509_set_version(x, 2);
  bool ok = RandomSerial(x);
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), static_cast<long>(validity_.count()));
  X509_set_pubkey(x, key);
  X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(host.c_str()), -1, -1, 0);
  X509_set_issuer_name(x, X509_get_subject_name(cert_));
  ok = ok && AddExt(x, cert_, NID_subject_alt_name, "DNS:" + host) &&
       AddExt(x, cert_, NID_basic_constraints, "critical,CA:FALSE") &&
       AddExt(x, cert_, NID_key_usage, "critical,digitalSignature") &&
       AddExt(x, cert_, NID_ext_key_usage, "serverAuth") &&
       AddExt(x, cert_, NID_authority_key_identifier, "keyid:always") && X509_sign(x, key_, EVP_sha256()) != 0;
  if (!ok) {
    Status st = SslError("mint leaf for " + host);
    cleanup();
    return st;
  }
  CertAndKey out{Pem(x), KeyPem(key)};
  cleanup();
  if (leaves_.size() >= kMaxCachedLeaves && !leaf_order_.empty()) {
    leaves_.erase(leaf_order_.front());
    leaf_order_.pop_front();
  }
  leaves_[host] = out;
  leaf_order_.push_back(host);
  return out;
}

size_t SandboxCa::cached_leaves() const {
  std::lock_guard<std::mutex> l(mu_);
  return leaves_.size();
}

}  // namespace airlock::secrets
