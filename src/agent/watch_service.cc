#include "agent/watch_service.h"

#include <sys/random.h>
#include <sys/vfs.h>

#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstring>

#include "agent/agent.h"
#include "agent/as_user.h"
#include "agent/log.h"
#include "agent/paths.h"
#include "agent/rpc.h"
#include "common/hex.h"
#include "envd/envelope.h"

namespace airlock::agent {
namespace {

using Clock = std::chrono::steady_clock;
// Reading inotify pauses while this many bytes wait for the client.
constexpr size_t kStreamHighWater = 1 << 20;

// Network filesystems are refused unless allowNetworkMounts (as envd).
bool OnNetworkMount(const std::string& path) {
  struct statfs sf;
  if (statfs(path.c_str(), &sf) != 0) return false;
  switch (static_cast<unsigned long>(sf.f_type)) {
    case 0x6969:      // NFS
    case 0xFF534D42:  // CIFS
    case 0x517B:      // SMB
    case 0xFE534D42:  // SMB2
    case 0x65735546:  // FUSE
      return true;
    default:
      return false;
  }
}

std::string NewWatcherId() {
  unsigned char r[12];
  if (getrandom(r, sizeof r, 0) != static_cast<ssize_t>(sizeof r)) {
    static uint64_t counter = 0;
    uint64_t v = ++counter ^ static_cast<uint64_t>(Clock::now().time_since_epoch().count());
    std::memcpy(r, &v, sizeof v);
  }
  return "w" + HexEncode(r, sizeof r);
}

// Checks the request and creates the watcher as the requesting user.
StatusOr<std::shared_ptr<DirWatcher>> OpenWatcher(Agent& agent, const User& user, const envd::WatchDirRequest& req) {
  ASSIGN_OR_RETURN(std::string path, ResolvePath(req.path, user.home));
  if (!req.allow_network_mounts) {
    bool network = false;
    RETURN_IF_ERROR(RunAsUser(user, agent.can_switch_user(), [&]() -> Status {
      network = OnNetworkMount(path);
      return OkStatus();
    }));
    if (network) return InvalidArgument("cannot watch path on network filesystem: " + path);
  }
  DirWatcher::Options opts;
  opts.root = path;
  opts.recursive = req.recursive;
  opts.include_entry = req.include_entry;
  bool can_switch = agent.can_switch_user();
  return DirWatcher::Create(agent.io(), opts, &agent.watches().budget(), agent.LoadUsers(),
                            [user, can_switch](const std::function<Status()>& fn) {
                              return RunAsUser(user, can_switch, fn);
                            });
}

class WatchStream : public std::enable_shared_from_this<WatchStream> {
 public:
  WatchStream(Agent& agent, std::shared_ptr<http::Conn> s, std::shared_ptr<DirWatcher> w)
      : agent_(agent),
        session_(std::move(s)),
        watcher_(std::move(w)),
        keepalive_timer_(session_->executor()),
        deadline_timer_(session_->executor()),
        keepalive_(KeepaliveInterval(*session_)) {}

  void Begin() {
    BeginStream(*session_);
    Send(envd::WatchStartPayload());
    std::weak_ptr<WatchStream> weak = shared_from_this();
    session_->SetOnDrain([weak] {
      if (auto self = weak.lock(); self && !self->done_) self->watcher_->Resume();
    });
    session_->SetOnClose([weak] {
      if (auto self = weak.lock()) self->Stop();
    });
    session_->WatchForDisconnect();
    watcher_->SetOnReady([weak] {
      if (auto self = weak.lock()) self->OnReady();
    });
    if (auto t = ConnectTimeout(*session_)) {
      deadline_timer_.expires_after(*t);
      deadline_timer_.async_wait([weak, ms = t->count()](boost::system::error_code ec) {
        auto self = weak.lock();
        if (!self || ec || self->done_) return;
        self->Finish(Status(StatusCode::kDeadlineExceeded,
                            "watch deadline of " + std::to_string(ms) + " ms (Connect-Timeout-Ms) exceeded"));
      });
    }
    keep_ = shared_from_this();  // alive until the stream ends
    ArmKeepalive();
    watcher_->Resume();
  }

 private:
  void Send(const std::string& payload) {
    last_ = Clock::now();
    std::string frame;
    envd::AppendEnvelope(&frame, payload);
    session_->Write(frame);
  }

  void OnReady() {
    if (done_) return;
    for (const auto& e : watcher_->Take()) Send(envd::WatchEventPayload(e));
    if (!watcher_->error().ok() && watcher_->queued() == 0) return Finish(watcher_->error());
    if (session_->pending_bytes() > kStreamHighWater) watcher_->Pause();
  }

  void ArmKeepalive() {
    if (done_) return;
    keepalive_timer_.expires_at(last_ + keepalive_);
    keepalive_timer_.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
      auto self = weak.lock();
      if (!self || ec || self->done_) return;
      if (Clock::now() - self->last_ >= self->keepalive_) self->Send(envd::WatchKeepalivePayload());
      self->ArmKeepalive();
    });
  }

  void Finish(const Status& st) {
    if (done_) return;
    session_->Write(envd::EncodeEndStream(st));
    session_->EndResponse();
    Stop();
  }

  void Stop() {
    if (done_) return;
    done_ = true;
    keepalive_timer_.cancel();
    deadline_timer_.cancel();
    watcher_->SetOnReady(nullptr);
    watcher_->Close();
    agent_.watches().Release();
    session_->SetOnDrain(nullptr);
    keep_.reset();
  }

  Agent& agent_;
  std::shared_ptr<http::Conn> session_;
  std::shared_ptr<DirWatcher> watcher_;
  boost::asio::steady_timer keepalive_timer_;
  boost::asio::steady_timer deadline_timer_;
  std::chrono::milliseconds keepalive_;
  Clock::time_point last_ = Clock::now();
  bool done_ = false;
  std::shared_ptr<WatchStream> keep_;
};

void WatchDir(Agent& agent, std::shared_ptr<http::Conn> s) {
  ReadStreamRequest(s, [&agent, s](const envd::Json& j) {
    auto req = envd::WatchDirRequestFromJson(j);
    if (!req.ok()) return RespondStreamStatus(*s, req.status());
    auto user = agent.UserFromAuthHeader(*s);
    if (!user.ok()) return RespondStreamStatus(*s, user.status());
    if (Status st = agent.watches().Reserve(); !st.ok()) return RespondStreamStatus(*s, st);
    auto w = OpenWatcher(agent, *user, *req);
    if (!w.ok()) {
      agent.watches().Release();
      return RespondStreamStatus(*s, w.status());
    }
    LogDebug("watching %s%s", (*w)->root().c_str(), req->recursive ? " (recursive)" : "");
    std::make_shared<WatchStream>(agent, s, std::move(*w))->Begin();
  });
}

}  // namespace

Status WatchRegistry::Reserve() {
  if (active_ >= kMaxWatchers) {
    return ResourceExhausted("too many directory watchers: " + std::to_string(active_) +
                             " are live, at most " + std::to_string(kMaxWatchers) +
                             " per sandbox; stop one (or RemoveWatcher) first");
  }
  ++active_;
  return OkStatus();
}

bool HandleWatchRpc(Agent& agent, std::shared_ptr<http::Conn> s, const std::string& method) {
  if (method == "WatchDir") {
    WatchDir(agent, s);
    return true;
  }
  if (method == "CreateWatcher") {
    auto user = agent.UserFromAuthHeader(*s);
    ServeUnary(s, [&agent, user](const envd::Json& j) -> StatusOr<envd::OJson> {
      if (!user.ok()) return user.status();
      ASSIGN_OR_RETURN(auto req, envd::WatchDirRequestFromJson(j));
      RETURN_IF_ERROR(agent.watches().Reserve());
      auto w = OpenWatcher(agent, *user, req);
      if (!w.ok()) {
        agent.watches().Release();
        return w.status();
      }
      std::string id = NewWatcherId();
      (*w)->Resume();
      agent.watches().polled()[id] = std::move(*w);
      envd::OJson out = envd::OJson::object();
      out["watcherId"] = id;
      return out;
    });
    return true;
  }
  if (method == "GetWatcherEvents") {
    ServeUnary(s, [&agent](const envd::Json& j) -> StatusOr<envd::OJson> {
      ASSIGN_OR_RETURN(std::string id, envd::WatcherIdRequestFromJson(j));
      auto it = agent.watches().polled().find(id);
      if (it == agent.watches().polled().end()) return NotFound("watcher with id " + id + " not found");
      auto events = it->second->Take(WatchRegistry::kMaxEventsPerPoll);
      if (events.empty() && !it->second->error().ok()) return it->second->error();
      envd::OJson list = envd::OJson::array();
      for (const auto& e : events) list.push_back(envd::ToJson(e));
      envd::OJson out = envd::OJson::object();
      out["events"] = std::move(list);
      return out;
    });
    return true;
  }
  if (method == "RemoveWatcher") {
    ServeUnary(s, [&agent](const envd::Json& j) -> StatusOr<envd::OJson> {
      ASSIGN_OR_RETURN(std::string id, envd::WatcherIdRequestFromJson(j));
      auto it = agent.watches().polled().find(id);
      if (it == agent.watches().polled().end()) return NotFound("watcher with id " + id + " not found");
      it->second->Close();
      agent.watches().polled().erase(it);
      agent.watches().Release();
      return envd::OJson::object();
    });
    return true;
  }
  return false;
}

}  // namespace airlock::agent
