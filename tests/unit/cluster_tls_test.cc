// cluster_tls.h + gateway/tls_front.h: who a node's TLS listener lets in and
// where it sends them. A real TlsFront over the certificates of
// MakeClusterCerts, two loopback backends that answer "api" and "peer" at
// once, and clients that present one member's certificate each: a front
// reaches the API, a node only the peers' backend (the artefact server),
// a `both` member the side its ALPN asks for; another CA's node, a client
// with no certificate and (with FromFronts) any node are refused.
#include "cluster/cluster_tls.h"

#include <gtest/gtest.h>
#include <openssl/ssl.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "cluster/artefacts.h"
#include "cluster/cluster_certs.h"
#include "gateway/tls_front.h"
#include "gateway/upstream_tls.h"
#include "tests/unit/scoped_dir.h"

namespace airlock::cluster {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

ClusterMember Member(std::string name, bool front, bool node) {
  ClusterMember m;
  m.name = std::move(name);
  m.front = front;
  m.node = node;
  m.ips = {"127.0.0.1"};
  return m;
}

// Answers `tag` to every connection, then closes it.
class TagServer {
 public:
  TagServer(asio::io_context& io, std::string tag)
      : acceptor_(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)), tag_(std::move(tag)) {
    Accept();
  }
  uint16_t port() const { return acceptor_.local_endpoint().port(); }

 private:
  void Accept() {
    acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket s) {
      if (ec) return;
      auto sock = std::make_shared<tcp::socket>(std::move(s));
      asio::async_write(*sock, asio::buffer(tag_), [sock](boost::system::error_code, size_t) {
        boost::system::error_code ignored;
        sock->shutdown(tcp::socket::shutdown_both, ignored);
        sock->close(ignored);
      });
      Accept();
    });
  }
  tcp::acceptor acceptor_;
  std::string tag_;
};

class ClusterTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_.path = test_util::MakeTempDir("airlock-cluster-tls");
    ASSERT_FALSE(root_.path.empty());
    CertsOptions o;
    o.dir = root_.path + "/certs";
    o.members = {Member("n1", false, true), Member("n2", false, true), Member("f1", true, false),
                 Member("b1", true, true)};
    ASSERT_TRUE(MakeClusterCerts(o).ok());
    CertsOptions other;
    other.dir = root_.path + "/other";
    other.members = {Member("n2", false, true)};
    ASSERT_TRUE(MakeClusterCerts(other).ok());
    api_ = std::make_unique<TagServer>(io_, "api");
    peer_ = std::make_unique<TagServer>(io_, "peer");
    auto n1 = ClusterTls::Load(Files("certs", "n1"), false, true);
    ASSERT_TRUE(n1.ok()) << n1.status().ToString();
    node_ = *n1;
  }
  void TearDown() override {
    // The io thread first: TlsFront::Stop is not for another thread.
    io_.stop();
    if (thread_.joinable()) thread_.join();
    if (front_) front_->Stop();
  }

  ClusterTlsFiles Files(const std::string& dir, const std::string& name) const {
    const std::string d = root_.path + "/" + dir + "/";
    return {d + "ca.pem", d + name + ".pem", d + name + ".key"};
  }

  // n1's listener, with the peers' route (to `peer_port`, default the
  // "peer" backend) or without.
  void StartNode(bool peers, uint16_t peer_port = 0) {
    front_ = std::make_unique<gateway::TlsFront>(io_, "127.0.0.1", api_->port());
    auto auth = peers ? node_->FromFrontsAndPeers(peer_port ? peer_port : peer_->port()) : node_->FromFronts();
    const auto f = Files("certs", "n1");
    ASSERT_TRUE(front_->Start("127.0.0.1:0", f.cert, f.key, auth).ok());
    thread_ = std::thread([this] { io_.run(); });
  }

  // What the listener's backend says to a client with `member`'s certificate
  // of CA `dir` ("" = no certificate), asking for `alpn`; "" when refused.
  std::string Ask(const std::string& dir, const std::string& member, const std::string& alpn = "") {
    asio::ssl::context ctx(asio::ssl::context::tls_client);
    const auto f = Files(dir, member.empty() ? "n1" : member);
    ctx.load_verify_file(Files("certs", "n1").ca);
    if (!member.empty()) {
      ctx.use_certificate_chain_file(f.cert);
      ctx.use_private_key_file(f.key, asio::ssl::context::pem);
    }
    ctx.set_verify_mode(asio::ssl::verify_peer);
    asio::io_context io;
    asio::ssl::stream<tcp::socket> s(io, ctx);
    if (!alpn.empty()) {
      std::string wire(1, static_cast<char>(alpn.size()));
      wire += alpn;
      SSL_set_alpn_protos(s.native_handle(), reinterpret_cast<const unsigned char*>(wire.data()), wire.size());
    }
    std::string got;
    char buf[64];
    std::function<void()> read = [&] {
      s.async_read_some(asio::buffer(buf), [&](boost::system::error_code ec, size_t n) {
        got.append(buf, n);
        if (!ec) read();
      });
    };
    s.lowest_layer().async_connect(
        tcp::endpoint(asio::ip::make_address("127.0.0.1"), front_->port()), [&](boost::system::error_code ec) {
          if (ec) return;
          s.async_handshake(asio::ssl::stream_base::client, [&](boost::system::error_code ec) {
            if (!ec) read();
          });
        });
    io.run_for(std::chrono::seconds(5));
    return got;
  }

  test_util::ScopedDir root_;
  asio::io_context io_;
  std::unique_ptr<TagServer> api_, peer_;
  std::shared_ptr<const ClusterTls> node_;
  std::unique_ptr<ArtefactServer> artefacts_;
  std::unique_ptr<gateway::TlsFront> front_;
  std::thread thread_;
};

TEST_F(ClusterTlsTest, AFrontReachesTheApiAndANodeOnlyThePeers) {
  StartNode(true);
  EXPECT_EQ(Ask("certs", "f1"), "api");
  EXPECT_EQ(Ask("certs", "n2"), "peer");
  EXPECT_EQ(Ask("certs", "n2", kArtefactAlpn), "peer");
  EXPECT_EQ(Ask("certs", "n2", "http/1.1"), "peer");
}

TEST_F(ClusterTlsTest, ABothMemberReachesTheSideItsAlpnNames) {
  StartNode(true);
  EXPECT_EQ(Ask("certs", "b1"), "api");
  EXPECT_EQ(Ask("certs", "b1", kArtefactAlpn), "peer");
  // A front that asks for the artefacts is no node: refused.
  EXPECT_EQ(Ask("certs", "f1", kArtefactAlpn), "");
}

TEST_F(ClusterTlsTest, AnotherCasNodeAndNoCertificateAreRefused) {
  StartNode(true);
  EXPECT_EQ(Ask("other", "n2"), "");
  EXPECT_EQ(Ask("other", "n2", kArtefactAlpn), "");
  EXPECT_EQ(Ask("certs", ""), "");
  EXPECT_EQ(Ask("certs", "f1"), "api");  // the listener still serves
}

TEST_F(ClusterTlsTest, WithoutThePeersRouteANodeIsRefused) {
  StartNode(false);
  EXPECT_EQ(Ask("certs", "f1"), "api");
  EXPECT_EQ(Ask("certs", "n2"), "");
  EXPECT_EQ(Ask("certs", "n2", kArtefactAlpn), "");
}

TEST_F(ClusterTlsTest, ToNodeChecksThePeerIsThatNode) {
  // A node's client side (FetchArtefact's): its own certificate, the
  // cluster CA, and the name of the node it meant to reach.
  auto n2 = ClusterTls::Load(Files("certs", "n2"), false, true);
  ASSERT_TRUE(n2.ok()) << n2.status().ToString();
  auto to_n1 = (*n2)->ToNode("n1");
  ASSERT_TRUE(to_n1->ctx);
  StartNode(true);
  asio::io_context io;
  asio::ssl::stream<tcp::socket> s(io, *to_n1->ctx);
  s.lowest_layer().connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), front_->port()));
  s.handshake(asio::ssl::stream_base::client);
  EXPECT_TRUE(to_n1->check(s.native_handle()).ok());
  Status wrong = (*n2)->ToNode("n3")->check(s.native_handle());
  EXPECT_EQ(wrong.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(wrong.message().find("not node n3's"), std::string::npos) << wrong.message();
}

TEST_F(ClusterTlsTest, ANodeFetchesAnArtefactThroughItsPeersListener) {
  // n1 holds the file; its listener sends its peers to its artefact server.
  const std::string file = root_.path + "/rootfs.ext4";
  // Its first MiB is data; the rest zeros, written: they stay off the wire.
  std::string content(3 * 1024 * 1024 + 5, '\0');
  for (size_t i = 0; i < 1024 * 1024; i += 4093) content[i] = static_cast<char>(i % 251 + 1);
  std::ofstream(file, std::ios::binary).write(content.data(), static_cast<std::streamsize>(content.size()));
  auto d = DigestOf(file);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  artefacts_ = std::make_unique<ArtefactServer>(
      io_, [file](const std::string&) -> StatusOr<std::string> { return file; },
      [](const std::string& token, const std::string&) -> Status {
        return token == "g" ? OkStatus() : PermissionDenied("not granted");
      });
  ASSERT_TRUE(artefacts_->Start("127.0.0.1:0").ok());
  StartNode(true, artefacts_->port());
  std::filesystem::create_directories(root_.path + "/tmp");
  auto fetch = [&](const std::string& member, const std::string& expect, const std::string& dest) {
    auto m = ClusterTls::Load(Files("certs", member), false, false);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    FetchRequest r;
    r.host = "127.0.0.1";
    r.port = front_->port();
    r.holder_node = "n1";
    r.digest = d->sha256;
    r.size = d->size;
    r.allocated = d->allocated;
    r.grant = "g";
    r.dest = root_.path + "/" + dest;
    r.tmp_dir = root_.path + "/tmp";
    r.tls = (*m)->PeerClientContext();
    r.peer_check = ClusterTls::PeerIsNode(expect);
    r.retries = 0;
    return FetchArtefact(r);
  };
  auto read = [&](const std::string& dest) {
    std::stringstream ss;
    ss << std::ifstream(root_.path + "/" + dest, std::ios::binary).rdbuf();
    return ss.str();
  };
  auto got = fetch("n2", "n1", "copy-n2");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_GT(got->bytes_received, 1000 * 1024);
  EXPECT_LT(got->bytes_received, 1100 * 1024);
  EXPECT_EQ(read("copy-n2"), content);
  // A member with both roles asks for the artefacts by ALPN: not the API.
  got = fetch("b1", "n1", "copy-b1");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(read("copy-b1"), content);
  // The listener is not the node the fetch meant: nothing is asked of it.
  got = fetch("n2", "n9", "copy-n9");
  EXPECT_EQ(got.status().code(), StatusCode::kPermissionDenied) << got.status().ToString();
  EXPECT_NE(got.status().message().find("not node n9's"), std::string::npos) << got.status().message();
  // A front is no peer: the listener closes on it.
  got = fetch("f1", "n1", "copy-f1");
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable) << got.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(root_.path + "/copy-f1"));
}

TEST_F(ClusterTlsTest, APeerRouteNeedsItsPort) {
  gateway::TlsFront front(io_, "127.0.0.1", api_->port());
  auto auth = std::make_shared<gateway::TlsClientAuth>(*node_->FromFrontsAndPeers(1));
  auth->peer_backend_port = 0;
  const auto f = Files("certs", "n1");
  EXPECT_EQ(front.Start("127.0.0.1:0", f.cert, f.key, auth).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace airlock::cluster
