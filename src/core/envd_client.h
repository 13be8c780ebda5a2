// Host-side client of a sandbox's agent (the envd-compatible API of
// shared/spec/e2b-wire.md §3–4), over plain HTTP/1.1 to the agent's
// host-reachable endpoint.
//
// Everything the agent sends is untrusted: response sizes are bounded, stream
// messages are size-checked by the envelope decoder, and directory downloads
// refuse guest-supplied names that would escape the destination.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/agent_port.h"
#include "common/status.h"
#include "envd/messages.h"

namespace airlock {

struct AgentEndpoint {
  std::string host;  // IPv4 literal
  uint16_t port = kAgentPort;
};

struct ExecRequest {
  std::string cmd;                       // e.g. "/bin/bash"
  std::vector<std::string> args;         // e.g. {"-l", "-c", "echo hi"}
  std::map<std::string, std::string> envs;
  std::optional<std::string> cwd;
  std::string user;                      // empty: the sandbox's default user
  bool stdin = false;                    // open a stdin pipe (SendStdin/CloseStdin)
  std::optional<std::chrono::milliseconds> timeout;  // process lifetime (Connect-Timeout-Ms)
};

struct ExecCallbacks {
  std::function<void(uint32_t pid)> on_start;
  std::function<void(std::string_view bytes)> on_stdout;
  std::function<void(std::string_view bytes)> on_stderr;
};

// The end event of a process (spec §3.2).
struct ExecResult {
  uint32_t pid = 0;
  int exit_code = 0;    // -1 when killed by a signal
  bool exited = false;  // true for a normal exit
  std::string status;   // "exit status 3", "signal: killed"
  std::string error;
  // Shell convention: the exit code, or 128+N when killed by signal N.
  int ShellCode() const;
};

// The sockets a client has open, so another thread can cancel them.
class ConnectionRegistry {
 public:
  bool Add(int fd);  // false once cancelled
  void Remove(int fd);
  void CancelAll();

 private:
  std::mutex mu_;
  std::set<int> fds_;
  bool cancelled_ = false;
};

class EnvdClient {
 public:
  explicit EnvdClient(AgentEndpoint endpoint, std::string access_token = "");
  // The endpoint is an airlock daemon's data plane, not the agent: every
  // request carries E2b-Sandbox-Id: <sandbox_id> and E2b-Sandbox-Port: kAgentPort.
  static EnvdClient ViaDaemon(AgentEndpoint daemon, const std::string& sandbox_id, std::string access_token);

  // GET /health answered 204 within `timeout` (one attempt).
  Status Health(std::chrono::milliseconds timeout) const;
  // Polls Health until it answers or `deadline` passes; `keep_going` is asked
  // between attempts (e.g. "is the VMM still alive?") and stops early with its
  // Status when not OK.
  Status WaitReady(std::chrono::steady_clock::time_point deadline,
                   const std::function<Status()>& keep_going) const;

  // process.Process/Start, streamed until the end event. Returns the end
  // event; a stream that ends without one is an Unavailable error.
  StatusOr<ExecResult> Exec(const ExecRequest& request, const ExecCallbacks& callbacks) const;
  // Starts a process and returns its pid as soon as the start event arrives,
  // dropping the stream; the process keeps running in the guest.
  StatusOr<uint32_t> StartBackground(const ExecRequest& request) const;
  // process.Process/Connect: re-attach to a running process
  // (an ended one is NotFound, as envd); output from now on, then its end event.
  StatusOr<ExecResult> Attach(uint32_t pid, const ExecCallbacks& callbacks) const;
  Status SendStdin(uint32_t pid, std::string_view bytes) const;
  Status CloseStdin(uint32_t pid) const;
  Status SendSignal(uint32_t pid, std::string_view signal_name /* "SIGNAL_SIGKILL" */) const;

  // Unary Connect call: POST /<service>/<method> with a JSON body.
  StatusOr<nlohmann::json> Call(std::string_view method_path, const nlohmann::json& request,
                                const std::string& user = "") const;

  // POST /files?path=GUEST (application/octet-stream, streamed from disk).
  Status UploadFile(const std::string& local_path, const std::string& guest_path,
                    const std::string& user = "") const;
  // GET /files?path=GUEST[&username=USER] into local_path (at most
  // max_bytes). A 403 (the user may not read it) is permission_denied.
  Status DownloadFile(const std::string& guest_path, const std::string& local_path,
                      uint64_t max_bytes = kDefaultMaxDownload, const std::string& user = "") const;
  // Copies a guest file or directory tree to local_path. Symlinks are skipped.
  Status Download(const std::string& guest_path, const std::string& local_path,
                  uint64_t max_bytes = kDefaultMaxDownload) const;
  // GET /airlock/root-changes into local_path: a gVisor guest's tar of what
  // its root holds that its template does not (agent/root_changes.h), never
  // parsed here. A cut or oversized answer is an error and leaves no file;
  // so is one that takes longer than kRootChangesLimit (a guest trickling
  // bytes would otherwise hold the pause, and a reaper thread, for ever).
  static constexpr std::chrono::milliseconds kRootChangesLimit{std::chrono::minutes(10)};
  Status ExportRootChanges(const std::string& local_path, uint64_t max_bytes) const;
  // PUT it back to a fresh guest; its answer ({"entries", "deleted", "bytes",
  // "skipped", "firstError"}).
  StatusOr<nlohmann::json> ImportRootChanges(const std::string& local_path) const;
  StatusOr<envd::EntryInfo> Stat(const std::string& guest_path, const std::string& user = "") const;
  // process.Process/List: how many processes started through the API run.
  StatusOr<size_t> CountProcesses() const;
  StatusOr<std::vector<envd::EntryInfo>> ListDir(const std::string& guest_path, uint32_t depth,
                                             const std::string& user = "") const;
  Status MakeDir(const std::string& guest_path, const std::string& user = "") const;

  // Wakes every call blocked on this agent (they fail with an error) and
  // makes later calls fail at once. Used when the sandbox is destroyed.
  void CancelAll() const;

  static constexpr uint64_t kDefaultMaxDownload = 8ull << 30;  // 8 GiB in total

  // Every call fails with DeadlineExceeded once the agent has moved no byte
  // of its exchange for this long (a process stream: at least three of the
  // agent's 30 s keepalives); the socket is shut down then, so no daemon
  // thread waits on a stalled guest (core/socket_watchdog.h).
  static constexpr std::chrono::milliseconds kDefaultIdleTimeout{std::chrono::seconds(60)};
  void set_idle_timeout(std::chrono::milliseconds idle) { idle_timeout_ = idle; }

 private:
  // GET `target` into local_path (via a temporary beside it, renamed when
  // whole; at most max_bytes).
  // `total`: the whole exchange's limit, beside the idle one.
  Status GetToFile(const std::string& target, const std::string& local_path, uint64_t max_bytes,
                   const std::string& what, std::optional<std::chrono::milliseconds> total) const;
  // POST or PUT `target` with local_path as the body; the 200's body in `reply`.
  Status SendFile(const std::string& method, const std::string& target, const std::string& local_path,
                  const std::string& what, std::string* reply, std::optional<std::chrono::milliseconds> total) const;
  StatusOr<ExecResult> StreamProcess(std::string_view method_path, const std::string& body,
                                     const std::string& user, std::optional<std::chrono::milliseconds> timeout,
                                     const ExecCallbacks& callbacks, bool stop_after_start) const;
  AgentEndpoint endpoint_;
  std::string access_token_;
  std::string route_sandbox_;  // ViaDaemon: the sandbox's id; else empty
  std::shared_ptr<ConnectionRegistry> registry_;
  std::chrono::milliseconds idle_timeout_ = kDefaultIdleTimeout;
};

}  // namespace airlock
