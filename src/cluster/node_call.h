// One request from a front to a node whose answer the front must learn
// whatever its client does: a create, whose slot is given back only when the
// node refused it (docs/multinode.md "Placement"). Unlike the relay of
// gateway::ForwardRequest, the exchange is not tied to the client's
// connection: a client that hangs up does not cut it.
//
// Shapes: `request` is the whole HTTP/1.1 request (head and body, with
// "Connection: close"); the answer is read whole, its body at most
// `max_body` bytes. `done` is called once, on `ex`'s thread.
// Outcomes (NodeReply::outcome):
//   kAnswered      the node answered (any status);
//   kNotDelivered  the node never got the request (the connect failed or
//                  timed out): nothing was started there;
//   kNoAnswer      sent (or partly sent), then no whole answer (cut, timed
//                  out, too large): the node may have acted on it.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace airlock::gateway {
struct UpstreamTls;
}

namespace airlock::cluster {

struct NodeReply {
  enum class Outcome { kAnswered, kNotDelivered, kNoAnswer };
  Outcome outcome = Outcome::kNoAnswer;
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // end-to-end ones (no framing, no Content-Type)
  std::string content_type;
  std::string body;
  std::string error;  // why, when not answered
};

// `tls`: the front's mutual TLS to this node (cluster_tls.h); null: plain
// HTTP (serve --insecure-cluster). A handshake or identity failure is
// kNotDelivered.
void CallNode(boost::asio::any_io_executor ex, const std::string& host, uint16_t port, std::string request,
              std::chrono::milliseconds timeout, size_t max_body, std::function<void(NodeReply)> done,
              std::shared_ptr<const gateway::UpstreamTls> tls = nullptr);

}  // namespace airlock::cluster
