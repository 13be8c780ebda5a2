#include "gateway/stream_table.h"

#include <boost/asio/post.hpp>

namespace airlock::gateway {

void StreamTable::Track(const std::string& id, std::weak_ptr<DataPlaneStream> s) {
  std::lock_guard<std::mutex> l(mu_);
  auto& v = streams_[id];
  std::erase_if(v, [](const auto& w) { return w.expired(); });
  v.push_back(std::move(s));
}

void StreamTable::Drop(const std::string& id) {
  std::vector<std::weak_ptr<DataPlaneStream>> v;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = streams_.find(id);
    if (it == streams_.end()) return;
    v = std::move(it->second);
    streams_.erase(it);
  }
  boost::asio::post(io_, [v = std::move(v)] {
    for (const auto& w : v) {
      if (auto s = w.lock()) s->Drop();
    }
  });
}

std::set<std::string> StreamTable::Live() {
  std::set<std::string> out;
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [id, v] : streams_) {
    for (const auto& w : v) {
      if (!w.expired()) {
        out.insert(id);
        break;
      }
    }
  }
  return out;
}

}  // namespace airlock::gateway
