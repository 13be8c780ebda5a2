// Data plane: a request for sandbox <id> (port P) is forwarded to
// <netns ip>:P over a fresh upstream connection ("Connection: close"):
//   - the request head is copied minus hop-by-hop headers; the body is pulled
//     from the client one chunk at a time and written upstream (re-chunked
//     when the client sent it chunked), so uploads are never buffered whole;
//   - the upstream response head is parsed and rewritten (hop-by-hop headers
//     dropped); the body bytes, already framed by the agent (chunked or
//     Content-Length), are forwarded as they arrive: every Connect envelope
//     is flushed to the client at once, and reading upstream pauses while
//     more than HttpConn::kLowWatermark bytes wait for the client.
// Access: port 49983 needs the sandbox's X-Access-Token, except GET /health
// and /files with a valid URL signature (spec §2.3, §4.2). Unknown sandbox:
// 502 JSON for /health (the SDK reads it as "not running"), else 404 JSON.
#include <openssl/evp.h>
#include <strings.h>

#include <cstring>

#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "common/log.h"
#include "envd/proto_json.h"
#include "server/server.h"

namespace airlock::server {
namespace {

constexpr size_t kUpstreamChunk = 64 * 1024;

bool SecureEqual(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char d = 0;
  for (size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
}

std::string Signature(const std::string& s) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(s.data(), s.size(), md, &n, EVP_sha256(), nullptr);
  std::string b64 = envd::Base64Encode(std::string_view(reinterpret_cast<const char*>(md), n));
  while (!b64.empty() && b64.back() == '=') b64.pop_back();
  return "v1_" + b64;
}

// Spec §4.2: "<path>:<read|write>:<user>:<token>[:<expiration>]".
bool ValidFileSignature(const HttpConn& c, const std::string& token) {
  auto sig = c.Query("signature");
  if (!sig) return false;
  std::string s = c.Query("path").value_or("") + ":" + (c.method() == http::verb::get ? "read" : "write") + ":" +
                  c.Query("username").value_or("") + ":" + token;
  if (auto e = c.Query("signature_expiration"); e && !e->empty()) {
    char* end = nullptr;
    long long v = std::strtoll(e->c_str(), &end, 10);
    if (*end != '\0' || v < static_cast<long long>(::time(nullptr))) return false;
    s += ":" + *e;
  }
  return SecureEqual(*sig, Signature(s));
}

bool HopByHop(std::string_view name) {
  static const char* kNames[] = {"connection", "keep-alive",        "transfer-encoding", "content-length", "te",
                                 "trailer",    "upgrade",           "proxy-connection",  "proxy-authorization",
                                 "host",       "proxy-authenticate"};
  for (const char* n : kNames) {
    if (name.size() == std::strlen(n) && strncasecmp(name.data(), n, name.size()) == 0) return true;
  }
  return false;
}

class ProxyCall : public std::enable_shared_from_this<ProxyCall> {
 public:
  ProxyCall(std::shared_ptr<HttpConn> c, std::string host, uint16_t port)
      : c_(std::move(c)), up_(c_->executor()), timer_(c_->executor()), host_(std::move(host)), port_(port) {}

  void Start() {
    boost::system::error_code ec;
    auto addr = asio::ip::make_address(host_, ec);
    if (ec) return Fail(502, "sandbox address '" + host_ + "' is invalid");
    c_->SetOnClose([self = shared_from_this()] { self->CloseUpstream(); });
    timer_.expires_after(std::chrono::seconds(10));
    timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (!ec && !self->connected_) self->CloseUpstream();
    });
    up_.open(addr.is_v4() ? tcp::v4() : tcp::v6(), ec);
    if (ec) return Fail(502, "socket: " + ec.message());
    SetCloexec(up_.native_handle());
    up_.async_connect(tcp::endpoint(addr, port_), [self = shared_from_this()](boost::system::error_code ec) {
      self->timer_.cancel();
      if (ec) return self->Fail(502, "sandbox port " + std::to_string(self->port_) + " unreachable: " + ec.message());
      self->connected_ = true;
      self->up_.set_option(tcp::no_delay(true), ec);
      self->SendHead();
    });
  }

 private:
  void Fail(int status, const std::string& msg) {
    CloseUpstream();
    if (!c_->response_started()) c_->RespondError(status, msg);
    else c_->Abort();
  }

  void CloseUpstream() {
    boost::system::error_code ec;
    up_.close(ec);
  }

  void SendHead() {
    const auto& h = c_->head();
    std::string head = c_->method_string() + " " + c_->target() + " HTTP/1.1\r\n";
    head += "Host: " + host_ + ":" + std::to_string(port_) + "\r\n";
    for (const auto& f : h) {
      std::string_view name(f.name_string().data(), f.name_string().size());
      if (HopByHop(name)) continue;
      head.append(name.data(), name.size());
      head += ": ";
      head.append(f.value().data(), f.value().size());
      head += "\r\n";
    }
    chunked_ = c_->chunked_request();
    if (chunked_) head += "Transfer-Encoding: chunked\r\n";
    else if (auto len = c_->content_length()) head += "Content-Length: " + std::to_string(*len) + "\r\n";
    head += "Connection: close\r\n\r\n";
    auto buf = std::make_shared<std::string>(std::move(head));
    asio::async_write(up_, asio::buffer(*buf), [self = shared_from_this(), buf](boost::system::error_code ec, size_t) {
      if (ec) return self->Fail(502, "write to sandbox: " + ec.message());
      self->ReadResponseHead();
      if (self->c_->body_done()) {
        self->c_->WatchForDisconnect();
      } else {
        self->PumpBody();
      }
    });
  }

  // client body → upstream, one chunk in flight.
  void PumpBody() {
    c_->ReadBodyChunk([self = shared_from_this()](Status st, std::string_view chunk, bool done) {
      if (!st.ok()) {
        LOG_DEBUG("proxy: client body: {}", st.message());
        if (st.code() == StatusCode::kDeadlineExceeded && !self->c_->response_started()) {
          self->CloseUpstream();
          return self->c_->RespondError(408, st.message());
        }
        self->CloseUpstream();
        return self->c_->Abort();
      }
      auto out = std::make_shared<std::string>();
      if (!chunk.empty()) {
        if (self->chunked_) {
          char hdr[24];
          int n = std::snprintf(hdr, sizeof hdr, "%zx\r\n", chunk.size());
          out->append(hdr, static_cast<size_t>(n));
          out->append(chunk);
          out->append("\r\n");
        } else {
          out->append(chunk);
        }
      }
      if (done && self->chunked_) out->append("0\r\n\r\n");
      if (out->empty()) {
        if (done) self->c_->WatchForDisconnect();
        else self->PumpBody();
        return;
      }
      asio::async_write(self->up_, asio::buffer(*out),
                        [self, out, done](boost::system::error_code ec, size_t) {
                          if (ec) return;  // the agent stopped reading; its response (or EOF) decides
                          if (done) self->c_->WatchForDisconnect();
                          else self->PumpBody();
                        });
    });
  }

  void ReadResponseHead() {
    parser_.emplace();
    parser_->header_limit(64 * 1024);
    http::async_read_header(up_, rbuf_, *parser_, [self = shared_from_this()](boost::system::error_code ec, size_t) {
      if (ec) return self->Fail(502, "sandbox closed the connection before answering: " + ec.message());
      self->ForwardHead();
    });
  }

  void ForwardHead() {
    const auto& res = parser_->get();
    int status = static_cast<int>(res.result_int());
    framed_ = parser_->chunked() || parser_->content_length().has_value() || status == 204 || status == 304 ||
              (status >= 100 && status < 200) || c_->method() == http::verb::head;
    keep_alive_ = c_->keep_alive() && framed_;
    std::string head = "HTTP/1.1 " + std::to_string(status) + " " + std::string(res.reason()) + "\r\n";
    for (const auto& f : res) {
      std::string_view name(f.name_string().data(), f.name_string().size());
      if (strncasecmp(name.data(), "connection", name.size()) == 0 && name.size() == 10) continue;
      if (strncasecmp(name.data(), "keep-alive", name.size()) == 0 && name.size() == 10) continue;
      head.append(name.data(), name.size());
      head += ": ";
      head.append(f.value().data(), f.value().size());
      head += "\r\n";
    }
    if (!keep_alive_ || !c_->body_done()) head += "Connection: close\r\n";
    head += "\r\n";
    c_->SendRaw(std::move(head));
    if (rbuf_.size() > 0) {
      auto d = rbuf_.data();
      c_->SendRaw(std::string(static_cast<const char*>(d.data()), d.size()));
      rbuf_.consume(rbuf_.size());
    }
    chunk_.resize(kUpstreamChunk);
    PumpResponse();
  }

  // upstream body bytes (already framed) → client, flushed as they come.
  void PumpResponse() {
    if (c_->closed()) return CloseUpstream();
    if (c_->pending_bytes() >= HttpConn::kLowWatermark) {
      c_->SetOnDrain([self = shared_from_this()] {
        self->c_->SetOnDrain(nullptr);
        asio::post(self->c_->executor(), [self] { self->PumpResponse(); });
      });
      return;
    }
    up_.async_read_some(asio::buffer(chunk_), [self = shared_from_this()](boost::system::error_code ec, size_t n) {
      if (n > 0) self->c_->SendRaw(std::string(self->chunk_.data(), n));
      if (ec == asio::error::eof) {
        self->CloseUpstream();
        return self->c_->FinishRaw(self->keep_alive_);
      }
      if (ec) {
        self->CloseUpstream();
        return self->c_->Abort();  // a truncated body must not look complete
      }
      self->PumpResponse();
    });
  }

  std::shared_ptr<HttpConn> c_;
  tcp::socket up_;
  asio::steady_timer timer_;
  std::string host_;
  uint16_t port_;
  bool connected_ = false;
  bool chunked_ = false;
  bool framed_ = true;
  bool keep_alive_ = true;
  boost::beast::flat_buffer rbuf_;
  std::optional<http::response_parser<http::empty_body>> parser_;
  std::vector<char> chunk_;
};

}  // namespace

void Server::HandleData(std::shared_ptr<HttpConn> c, const std::string& id, uint16_t port) {
  const std::string& path = c->path();
  std::shared_ptr<Sandbox> sb;
  std::string token, ip;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = sandboxes_.find(id);
    if (it != sandboxes_.end()) {
      sb = it->second.sb;
      token = it->second.rec.access_token;
      ip = it->second.rec.netns_ip;
    }
  }
  if (!sb) {
    int status = path == "/health" ? 502 : 404;
    return c->RespondError(status, "sandbox " + id + " is not running");
  }
  // Pausing too: the registry says "paused" from the commit on, while the VMM
  // is still being stopped; Resume waits for the pause to finish.
  if (sb->state() == SandboxState::kPaused || sb->state() == SandboxState::kResuming ||
      sb->state() == SandboxState::kPausing) {
    bool auto_resume = false;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = sandboxes_.find(id);
      auto_resume = it != sandboxes_.end() && it->second.rec.auto_resume;
    }
    if (auto_resume) {
      // autoResume: bring it back, then serve this request as if it had been running.
      return asio::post(*workers_, [this, c, id, port] {
        auto r = manager_->Resume(id);
        if (r.ok() && r->resumed) {
          {
            std::lock_guard<std::mutex> l(mu_);
            auto it = sandboxes_.find(id);
            if (it != sandboxes_.end()) it->second.rec.ends_at_ms = NowUnixMs() + int64_t{config_.default_timeout_s} * 1000;
          }
          RecordState(id, "running");
          AddLog(id, "info", "resumed by data-plane traffic (autoResume)");
        }
        Status st = r.ok() ? OkStatus() : r.status();
        asio::post(c->executor(), [this, c, id, port, st] {
          if (!st.ok()) return c->RespondError(502, "sandbox " + id + " could not be resumed: " + st.message());
          HandleData(c, id, port);
        });
      });
    }
  }
  if (sb->state() != SandboxState::kRunning) {
    return c->RespondError(502, "sandbox " + id + " is " + std::string(SandboxStateName(sb->state())) +
                                    " (connect resumes a paused sandbox)");
  }
  if (port == kEnvdPort) {
    bool health = path == "/health" && (c->method() == http::verb::get || c->method() == http::verb::head);
    std::string got = c->Header("X-Access-Token");
    bool ok = health || (!got.empty() && SecureEqual(got, token)) || (path == "/files" && ValidFileSignature(*c, token));
    if (!ok) return c->RespondError(401, got.empty() ? "missing X-Access-Token" : "invalid X-Access-Token");
    if (path == "/process.Process/Start" || path == "/process.Process/Connect") {
      AddLog(id, "info", "exec: " + path.substr(1));
    }
    return std::make_shared<ProxyCall>(c, ip, port)->Start();
  }
  // Another guest port: make it reachable first (nft, blocking → worker).
  asio::post(*workers_, [c, sb, ip, port] {
    Status st = sb->ExposePort(port);
    asio::post(c->executor(), [c, st, ip, port] {
      if (!st.ok()) return c->RespondError(502, "expose port " + std::to_string(port) + ": " + st.message());
      std::make_shared<ProxyCall>(c, ip, port)->Start();
    });
  });
}

}  // namespace airlock::server
