// cluster_certs.h: the dev CA and member certificates, checked with
// OpenSSL's own chain verifier (purpose sslserver for a node, sslclient for a
// front), and IdentityOf on certificates made here by hand.
#include "cluster/cluster_certs.h"

#include <gtest/gtest.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

namespace airlock::cluster {
namespace {

namespace fs = std::filesystem;

struct X509Free {
  void operator()(X509* p) const { X509_free(p); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

X509Ptr LoadCert(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return nullptr;
  X509Ptr c(PEM_read_X509(f, nullptr, nullptr, nullptr));
  std::fclose(f);
  return c;
}

PkeyPtr LoadKey(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return nullptr;
  PkeyPtr k(PEM_read_PrivateKey(f, nullptr, nullptr, nullptr));
  std::fclose(f);
  return k;
}

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

ClusterMember Member(std::string name, bool front, bool node, std::vector<std::string> ips = {}) {
  ClusterMember m;
  m.name = std::move(name);
  m.front = front;
  m.node = node;
  m.ips = std::move(ips);
  return m;
}

// True when `cert` chains to the CA in `ca_path` for `purpose`.
bool Verifies(const std::string& ca_path, X509* cert, int purpose) {
  X509Ptr ca = LoadCert(ca_path);
  if (!ca || !cert) return false;
  std::unique_ptr<X509_STORE, decltype(&X509_STORE_free)> store(X509_STORE_new(), X509_STORE_free);
  X509_STORE_add_cert(store.get(), ca.get());
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> ctx(X509_STORE_CTX_new(), X509_STORE_CTX_free);
  X509_STORE_CTX_init(ctx.get(), store.get(), cert, nullptr);
  X509_STORE_CTX_set_purpose(ctx.get(), purpose);
  bool ok = X509_verify_cert(ctx.get()) == 1;
  if (!ok) ERR_clear_error();
  return ok;
}

class ClusterCertsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/airlock-cluster-certs-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    dir_ = root_ + "/certs";  // made by MakeClusterCerts
  }
  void TearDown() override { fs::remove_all(root_); }

  static CertsOptions ThreeMembers(const std::string& dir) {
    CertsOptions o;
    o.dir = dir;
    o.members.push_back(Member("n1", false, true, {"10.0.0.7", "fd00::7"}));
    o.members.push_back(Member("f1", true, false));
    o.members.push_back(Member("b1", true, true));
    return o;
  }

  std::string root_, dir_;
};

TEST_F(ClusterCertsTest, MakesACaAndMembersThatChainToIt) {
  auto paths = MakeClusterCerts(ThreeMembers(dir_));
  ASSERT_TRUE(paths.ok()) << paths.status().ToString();
  EXPECT_EQ(paths->size(), 9u);
  EXPECT_EQ(paths->front(), dir_ + "/ca.pem");
  EXPECT_EQ((*paths)[2], dir_ + "/secrets.key");
  EXPECT_EQ(ModeOf(dir_), 0700u);
  EXPECT_EQ(ModeOf(dir_ + "/ca.key"), 0600u);
  EXPECT_EQ(ModeOf(dir_ + "/ca.pem"), 0644u);
  // The cluster key every node is given (serve --cluster-secrets-key).
  EXPECT_EQ(ModeOf(dir_ + "/secrets.key"), 0600u);
  EXPECT_EQ(ReadFile(dir_ + "/secrets.key").size(), 32u);

  X509Ptr ca = LoadCert(dir_ + "/ca.pem");
  ASSERT_TRUE(ca);
  EXPECT_EQ(X509_check_ca(ca.get()), 1);
  PkeyPtr ca_key = LoadKey(dir_ + "/ca.key");
  ASSERT_TRUE(ca_key);
  EXPECT_EQ(X509_check_private_key(ca.get(), ca_key.get()), 1);

  struct Want {
    std::string name;
    bool front, node;
  };
  for (const Want& w : {Want{"n1", false, true}, Want{"f1", true, false}, Want{"b1", true, true}}) {
    SCOPED_TRACE(w.name);
    const std::string pem = dir_ + "/" + w.name + ".pem", key = dir_ + "/" + w.name + ".key";
    EXPECT_EQ(ModeOf(key), 0600u);
    EXPECT_EQ(ModeOf(pem), 0644u);
    X509Ptr cert = LoadCert(pem);
    ASSERT_TRUE(cert);
    PkeyPtr pk = LoadKey(key);
    ASSERT_TRUE(pk);
    EXPECT_EQ(X509_check_private_key(cert.get(), pk.get()), 1);
    EXPECT_EQ(X509_check_ca(cert.get()), 0);
    EXPECT_EQ(X509_check_host(cert.get(), w.name.c_str(), 0, 0, nullptr), 1);
    // A node serves (and calls other nodes); every member is a TLS client.
    EXPECT_EQ(Verifies(dir_ + "/ca.pem", cert.get(), X509_PURPOSE_SSL_SERVER), w.node);
    EXPECT_TRUE(Verifies(dir_ + "/ca.pem", cert.get(), X509_PURPOSE_SSL_CLIENT));
    auto id = IdentityOf(cert.get());
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    EXPECT_EQ(id->name, w.name);
    EXPECT_EQ(id->front, w.front);
    EXPECT_EQ(id->node, w.node);
  }
  X509Ptr n1 = LoadCert(dir_ + "/n1.pem");
  EXPECT_EQ(X509_check_ip_asc(n1.get(), "10.0.0.7", 0), 1);
  EXPECT_EQ(X509_check_ip_asc(n1.get(), "fd00::7", 0), 1);
  EXPECT_EQ(X509_check_ip_asc(n1.get(), "10.0.0.8", 0), 0);
  // No temporary file is left behind.
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_NE(e.path().filename().string()[0], '.') << e.path();
    ++files;
  }
  EXPECT_EQ(files, 9);
}

TEST_F(ClusterCertsTest, ASecondCallReusesTheCa) {
  CertsOptions o;
  o.dir = dir_;
  o.members.push_back(Member("n1", false, true));
  ASSERT_TRUE(MakeClusterCerts(o).ok());
  const std::string ca_before = ReadFile(dir_ + "/ca.pem"), key_before = ReadFile(dir_ + "/ca.key");
  const std::string cluster_key_before = ReadFile(dir_ + "/secrets.key");
  o.members = {Member("n2", false, true, {"192.168.1.2"})};
  auto paths = MakeClusterCerts(o);
  ASSERT_TRUE(paths.ok()) << paths.status().ToString();
  EXPECT_EQ(*paths, (std::vector<std::string>{dir_ + "/n2.pem", dir_ + "/n2.key"}));
  EXPECT_EQ(ReadFile(dir_ + "/ca.pem"), ca_before);
  EXPECT_EQ(ReadFile(dir_ + "/ca.key"), key_before);
  EXPECT_EQ(ReadFile(dir_ + "/secrets.key"), cluster_key_before);  // kept: every node must share it
  for (const char* name : {"n1", "n2"}) {
    X509Ptr cert = LoadCert(dir_ + "/" + name + ".pem");
    EXPECT_TRUE(Verifies(dir_ + "/ca.pem", cert.get(), X509_PURPOSE_SSL_SERVER)) << name;
  }
  // Making n1 again replaces its files (a new key), still under the same CA.
  const std::string n1_key = ReadFile(dir_ + "/n1.key");
  o.members = {Member("n1", false, true)};
  ASSERT_TRUE(MakeClusterCerts(o).ok());
  EXPECT_NE(ReadFile(dir_ + "/n1.key"), n1_key);
  EXPECT_EQ(ModeOf(dir_ + "/n1.key"), 0600u);
  X509Ptr n1 = LoadCert(dir_ + "/n1.pem");
  EXPECT_TRUE(Verifies(dir_ + "/ca.pem", n1.get(), X509_PURPOSE_SSL_SERVER));
}

TEST_F(ClusterCertsTest, AnotherCasCertificateDoesNotVerify) {
  CertsOptions a;
  a.dir = dir_;
  a.members.push_back(Member("n1", false, true));
  ASSERT_TRUE(MakeClusterCerts(a).ok());
  CertsOptions b = a;
  b.dir = root_ + "/other";
  ASSERT_TRUE(MakeClusterCerts(b).ok());
  X509Ptr foreign = LoadCert(b.dir + "/n1.pem");
  EXPECT_FALSE(Verifies(dir_ + "/ca.pem", foreign.get(), X509_PURPOSE_SSL_SERVER));
  EXPECT_FALSE(Verifies(dir_ + "/ca.pem", foreign.get(), X509_PURPOSE_SSL_CLIENT));
  EXPECT_TRUE(Verifies(b.dir + "/ca.pem", foreign.get(), X509_PURPOSE_SSL_SERVER));
}

// A self-signed certificate whose subjectAltName is `san` (OpenSSL config
// syntax), or none when `san` is empty.
X509Ptr CertWithSan(const std::string& san) {
  PkeyPtr key(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
  X509Ptr cert(X509_new());
  X509_set_version(cert.get(), X509_VERSION_3);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), 0);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 3600);
  X509_NAME_add_entry_by_txt(X509_get_subject_name(cert.get()), "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("x"), -1, -1, 0);
  X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get()));
  X509_set_pubkey(cert.get(), key.get());
  if (!san.empty()) {
    X509V3_CTX ctx;
    X509V3_set_ctx(&ctx, cert.get(), cert.get(), nullptr, nullptr, 0);
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, NID_subject_alt_name, san.c_str());
    EXPECT_NE(ext, nullptr) << san;
    if (ext) X509_add_ext(cert.get(), ext, -1);
    X509_EXTENSION_free(ext);
  }
  X509_sign(cert.get(), key.get(), EVP_sha256());
  return cert;
}

TEST(ClusterCertsIdentityTest, ReadsTheRoleUris) {
  auto id = IdentityOf(CertWithSan("DNS:x,URI:https://example.com/,URI:airlock-cluster:node:n7").get());
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->name, "n7");
  EXPECT_TRUE(id->node);
  EXPECT_FALSE(id->front);
}

TEST(ClusterCertsIdentityTest, RefusesCertificatesWithoutOneClusterName) {
  for (const std::string& san :
       {std::string(), std::string("DNS:n1"), std::string("DNS:n1,URI:https://n1/"),
        std::string("URI:airlock-cluster:node:n1,URI:airlock-cluster:front:f1"),
        std::string("URI:airlock-cluster:node:n1,URI:airlock-cluster:node:n2"),
        std::string("URI:airlock-cluster:admin:n1"), std::string("URI:airlock-cluster:node:N1"),
        std::string("URI:airlock-cluster:node:")}) {
    auto id = IdentityOf(CertWithSan(san).get());
    EXPECT_EQ(id.status().code(), StatusCode::kPermissionDenied) << "'" << san << "'";
  }
  EXPECT_EQ(IdentityOf(nullptr).status().code(), StatusCode::kPermissionDenied);
}

TEST_F(ClusterCertsTest, RefusesBadNamesIpsAndDays) {
  for (const std::string& name : {std::string(), std::string("A"), std::string("../x"), std::string("a b"),
                                  std::string(64, 'a'), std::string("-a"), std::string("ca"), std::string("a/b")}) {
    CertsOptions o;
    o.dir = dir_;
    o.members.push_back(Member(name, false, true));
    EXPECT_EQ(MakeClusterCerts(o).status().code(), StatusCode::kInvalidArgument) << "'" << name << "'";
  }
  for (std::string ip : {"10.0.0", "10.0.0.256", "host.example", "fd00::g", "", "10.0.0.1/24"}) {
    CertsOptions o;
    o.dir = dir_;
    o.members.push_back(Member("n1", false, true, {ip}));
    EXPECT_EQ(MakeClusterCerts(o).status().code(), StatusCode::kInvalidArgument) << "'" << ip << "'";
  }
  CertsOptions o;
  o.dir = dir_;
  o.members.push_back(Member("n1", false, true));
  for (int days : {0, -1, 3651}) {
    o.days = days;
    EXPECT_EQ(MakeClusterCerts(o).status().code(), StatusCode::kInvalidArgument) << days;
  }
  o.days = 365;
  o.members = {Member("n1", false, false)};  // no role
  EXPECT_EQ(MakeClusterCerts(o).status().code(), StatusCode::kInvalidArgument);
  o.members = {Member("n1", false, true), Member("n1", true, false)};
  EXPECT_EQ(MakeClusterCerts(o).status().code(), StatusCode::kInvalidArgument);
  // Nothing was written for any of these.
  EXPECT_FALSE(fs::exists(dir_));
  // The longest valid name is 63 characters.
  o.members = {Member(std::string(63, 'a'), false, true)};
  EXPECT_TRUE(MakeClusterCerts(o).ok());
}

// The directory holds the CA's key and a CA found there is signed with: one
// that others can write, or a CA key others can read, is refused.
TEST_F(ClusterCertsTest, RefusesADirectoryOrCaKeyOthersCanReach) {
  CertsOptions o;
  o.dir = dir_;
  o.members.push_back(Member("n1", false, true));
  ASSERT_TRUE(MakeClusterCerts(o).ok());
  ASSERT_EQ(::chmod(dir_.c_str(), 0777), 0);
  auto st = MakeClusterCerts(o).status();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  ASSERT_EQ(::chmod(dir_.c_str(), 0700), 0);
  ASSERT_EQ(::chmod((dir_ + "/ca.key").c_str(), 0644), 0);
  st = MakeClusterCerts(o).status();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("readable by others"), std::string::npos) << st.ToString();
  ASSERT_EQ(::chmod((dir_ + "/ca.key").c_str(), 0600), 0);
  EXPECT_TRUE(MakeClusterCerts(o).ok());
}

// The cluster key is made once and kept; one found here must pass the key
// file rules (an existing file is never replaced, not even a bad one), and
// no member may take its file name.
TEST_F(ClusterCertsTest, TheClusterKeyIsMadeOnceAndCheckedWhenKept) {
  CertsOptions o;
  o.dir = dir_;
  o.members.push_back(Member("n1", false, true));
  ASSERT_TRUE(MakeClusterCerts(o).ok());
  const std::string key = dir_ + "/secrets.key";
  const std::string before = ReadFile(key);
  ASSERT_EQ(::chmod(key.c_str(), 0644), 0);
  auto st = MakeClusterCerts(o).status();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find(key), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("readable by group or others"), std::string::npos) << st.ToString();
  ASSERT_EQ(::chmod(key.c_str(), 0600), 0);
  ASSERT_EQ(::truncate(key.c_str(), 16), 0);
  st = MakeClusterCerts(o).status();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("exactly 32 bytes"), std::string::npos) << st.ToString();
  EXPECT_EQ(ReadFile(key).size(), 16u);  // not replaced
  // Removed: a new one is made (and said so).
  ASSERT_EQ(::unlink(key.c_str()), 0);
  auto paths = MakeClusterCerts(o);
  ASSERT_TRUE(paths.ok()) << paths.status().ToString();
  EXPECT_EQ(*paths, (std::vector<std::string>{key, dir_ + "/n1.pem", dir_ + "/n1.key"}));
  EXPECT_EQ(ReadFile(key).size(), 32u);
  EXPECT_NE(ReadFile(key), before);
  EXPECT_EQ(ModeOf(key), 0600u);
  o.members = {Member("secrets", false, true)};
  EXPECT_EQ(MakeClusterCerts(o).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ClusterCertsTest, RefusesACaWithoutItsKey) {
  CertsOptions o;
  o.dir = dir_;
  o.members.push_back(Member("n1", false, true));
  ASSERT_TRUE(MakeClusterCerts(o).ok());
  ASSERT_EQ(std::rename((dir_ + "/ca.key").c_str(), (root_ + "/ca.key").c_str()), 0);
  EXPECT_EQ(MakeClusterCerts(o).status().code(), StatusCode::kFailedPrecondition);

  // A key that is not ca.pem's.
  CertsOptions b = o;
  b.dir = root_ + "/other";
  ASSERT_TRUE(MakeClusterCerts(b).ok());
  fs::copy_file(b.dir + "/ca.key", dir_ + "/ca.key");
  auto st = MakeClusterCerts(o).status();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();

  // ca.key without ca.pem.
  fs::remove(dir_ + "/ca.pem");
  EXPECT_EQ(MakeClusterCerts(o).status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace airlock::cluster
