// Idempotency-Key on the calls that make or end something (create, connect
// and resume, pause, fork, snapshot, checkpoint, kill): a client that lost
// the answer (a timeout, a dropped connection) retries with the same key
// and gets the first call's answer, not a second sandbox.
//
// The header: 1..255 visible ASCII characters (else 400). Keys are per team
// (another team's key of the same name is another key) and kept 24 h
// (kWindow) in the registry (Registry::ClaimIdempotencyKey), so a retry
// after a daemon restart still gets the first answer. Per key:
//   - first call: runs; its answer (status, content type, body) is kept when
//     it is a 2xx or 4xx answered with Respond() (a 5xx, 408, 425, 429 or a
//     streamed answer frees the key: the retry runs the call again);
//   - same method, path and body within the window: the kept answer, with
//     "Idempotent-Replayed: true";
//   - another method, path or body: 422 (the key was used for something else);
//   - while the first call still runs: 409 with Retry-After: 1;
//   - a call whose daemon died before it answered: its key is freed when the
//     next daemon starts (ReleaseUnansweredIdempotencyKeys).
// The answer is kept also when the client left before it came (the case a
// retry is for). Threads: io thread; SQLite on the lookups pool.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "control/caller.h"
#include "gateway/idempotency_key.h"
#include "server/http_conn.h"
#include "server/routes.h"

namespace boost::asio {
class thread_pool;
}

namespace airlock {
class Registry;
}

namespace airlock::server {

class Idempotency {
 public:
  static constexpr std::chrono::hours kWindow{24};
  // A call unanswered this long is taken for lost (its key is freed).
  static constexpr std::chrono::minutes kStale{15};
  static constexpr size_t kMaxKey = gateway::kMaxIdempotencyKey;

  Idempotency(Registry& registry, boost::asio::thread_pool& lookups, size_t max_body)
      : registry_(registry), lookups_(lookups), max_body_(max_body) {}

  // Does route `id` take an Idempotency-Key?
  static bool Applies(RouteId id);
  // `c` carries an Idempotency-Key: answers it from the key's first call,
  // or runs `call` (which reads the body as usual) and keeps its answer.
  void Run(std::shared_ptr<HttpConn> c, const control::Caller& caller, std::function<void()> call);

 private:
  Registry& registry_;
  boost::asio::thread_pool& lookups_;
  size_t max_body_;
};

}  // namespace airlock::server
