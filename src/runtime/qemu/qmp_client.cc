#include "runtime/qemu/qmp_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

namespace airlock::qemu {
namespace {

int RemainingMs(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

}  // namespace

StatusOr<std::unique_ptr<QmpClient>> QmpClient::Connect(const std::string& path,
                                                        std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof(a.sun_path)) return InvalidArgument("QMP socket path too long: " + path);
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return ErrnoError("socket");
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    int e = errno;
    Status st = ErrnoError("connect " + path, e);
    return e == ENOENT || e == ECONNREFUSED ? Unavailable(st.message()) : st;
  }
  std::unique_ptr<QmpClient> c(new QmpClient(std::move(fd)));
  ASSIGN_OR_RETURN(c->greeting_, c->ReadMessage(deadline));
  if (!c->greeting_.contains("QMP")) return Internal("QMP greeting missing: " + c->greeting_.dump());
  auto left = std::chrono::milliseconds(RemainingMs(deadline));
  ASSIGN_OR_RETURN(auto r, c->Execute("qmp_capabilities", nullptr, left));
  (void)r;
  return c;
}

Status QmpClient::Send(const nlohmann::json& msg, std::chrono::steady_clock::time_point deadline) {
  std::string s = msg.dump() + "\n";
  size_t off = 0;
  while (off < s.size()) {
    pollfd p{fd_.get(), POLLOUT, 0};
    int r = ::poll(&p, 1, RemainingMs(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoError("poll QMP");
    if (r == 0) return DeadlineExceeded("QMP send timed out");
    ssize_t n = ::send(fd_.get(), s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Unavailable(ErrnoError("send QMP").message());
    }
    off += static_cast<size_t>(n);
  }
  return OkStatus();
}

StatusOr<nlohmann::json> QmpClient::ReadMessage(std::chrono::steady_clock::time_point deadline) {
  while (true) {
    auto nl = buf_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) continue;
      auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object()) return Internal("QMP sent a malformed message");
      return j;
    }
    if (buf_.size() > kMaxLine) return Internal("QMP message longer than " + std::to_string(kMaxLine) + " bytes");
    pollfd p{fd_.get(), POLLIN, 0};
    int r = ::poll(&p, 1, RemainingMs(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoError("poll QMP");
    if (r == 0) return DeadlineExceeded("QMP reply timed out");
    char tmp[8192];
    ssize_t n = ::read(fd_.get(), tmp, sizeof(tmp));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Unavailable(ErrnoError("read QMP").message());
    }
    if (n == 0) return Unavailable("QMP connection closed by QEMU");
    buf_.append(tmp, static_cast<size_t>(n));
  }
}

StatusOr<nlohmann::json> QmpClient::Execute(const std::string& command, const nlohmann::json& arguments,
                                            std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  return ExecuteLocked(command, arguments, timeout);
}

StatusOr<nlohmann::json> QmpClient::ExecuteLocked(const std::string& command, const nlohmann::json& arguments,
                                                  std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  uint64_t id = next_id_++;
  nlohmann::json msg = {{"execute", command}, {"id", id}};
  if (!arguments.is_null()) msg["arguments"] = arguments;
  RETURN_IF_ERROR(Send(msg, deadline).WithContext("qmp " + command));
  while (true) {
    auto m = ReadMessage(deadline);
    if (!m.ok()) return m.status().WithContext("qmp " + command);
    if (m->contains("event")) {
      events_.push_back(std::move(*m));
      if (events_.size() > kMaxEvents) events_.pop_front();
      continue;
    }
    if (!m->contains("id") || (*m)["id"] != id) continue;  // a stale reply to a timed-out command
    if (m->contains("return")) return (*m)["return"];
    if (m->contains("error")) {
      const auto& e = (*m)["error"];
      auto str = [&](const char* k, const char* dflt) {
        return e.is_object() && e.contains(k) && e[k].is_string() ? e[k].get<std::string>() : std::string(dflt);
      };
      std::string cls = str("class", "GenericError");
      std::string desc = str("desc", "unknown error");
      StatusCode code = cls == "CommandNotFound" ? StatusCode::kUnimplemented
                        : cls == "DeviceNotFound" ? StatusCode::kNotFound
                                                  : StatusCode::kFailedPrecondition;
      return Status(code, "qmp " + command + ": " + cls + ": " + desc);
    }
    return Internal("qmp " + command + ": reply has neither return nor error");
  }
}

std::deque<nlohmann::json> QmpClient::events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_;
}

pid_t QmpClient::PeerPid() const {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd_.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return -1;
  return cred.pid;
}

}  // namespace airlock::qemu
