// The live data-plane exchanges of each sandbox (a proxied request, a
// WebSocket tunnel), so that a sandbox that is killed, dies, pauses or is
// rolled back keeps no stream open: E2B drops the connections of such a
// sandbox, and the SDK then probes /health.
//
// Threads: every method is thread-safe; the streams' Drop() runs on the
// io_context given (the daemon's io thread). An exchange that ended is
// pruned on the next Track of its sandbox, or on Drop.
#pragma once

#include <boost/asio/io_context.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace airlock::gateway {

// A relayed data-plane exchange of one sandbox. Drop() ends it at once (the
// client's connection is closed, or answered 502 when nothing was sent
// yet). Called on the daemon's io thread.
class DataPlaneStream {
 public:
  virtual ~DataPlaneStream() = default;
  virtual void Drop() = 0;
};

class StreamTable {
 public:
  explicit StreamTable(boost::asio::io_context& io) : io_(io) {}
  // Remembers a live exchange of sandbox `id`.
  void Track(const std::string& id, std::weak_ptr<DataPlaneStream> s);
  // Ends every live exchange of sandbox `id` (posted to the io thread).
  void Drop(const std::string& id);
  // The sandboxes with at least one live exchange now.
  std::set<std::string> Live();

 private:
  boost::asio::io_context& io_;
  std::mutex mu_;
  std::map<std::string, std::vector<std::weak_ptr<DataPlaneStream>>> streams_;  // guarded by mu_
};

}  // namespace airlock::gateway
