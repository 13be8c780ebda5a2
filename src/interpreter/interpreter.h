// Interpreter: the port-49999 server (shared/spec/e2b-code-interpreter.md
// §B.1–B.4). Owns the contexts (by id, plus one default per language), the
// ZeroMQ hub thread, the child reaper and the HTTP listener; everything but
// the hub runs on the io thread.
//
//   POST /execute               → 200 NDJSON (execution.h); 400/404/500 text/plain
//   POST /contexts              → 200 {"id","language","cwd"} once the kernel answers
//   GET  /contexts              → 200 [every context, defaults included]
//   POST /contexts/{id}/restart → 200 null once the new kernel answers; 404
//   DELETE /contexts/{id}       → 200 null once the kernel is gone; 404
//   POST /airlock/warm-up       → 204 once the default python kernel ran
//                                 Context::WarmUp (the warm pool's, at park);
//                                 503 before it is ready
//   GET  /health                → 503 until the default python kernel has
//                                 answered kernel_info, then 200 "OK"
// The python default context is created at Start(); other languages' on
// first use. Unknown languages → 500 naming the supported ones.
// Access (common/interpreter_access.h): once the agent has written the
// sandbox's token to Options::access_token_file, /execute (and any other
// route but /health and the /contexts routes) needs it in X-Access-Token:
// 401 {"code":401,"message":"missing|invalid X-Access-Token"}; a token file
// that cannot be read → 503.
// A token other than the last one seen (inotify on its directory: the agent
// renames a new file over it) re-inits every context (Context::Reinit): a
// new sandbox made from the template snapshot, a warm-pool claim or a fork
// child gets its own env vars and PRNG seeds before its first execution.
// Before the ready line (the template snapshot's cue) the default python
// kernel runs one warm-up execution (Context::WarmUp).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <array>
#include <map>
#include <memory>
#include <string>

#include "http/conn.h"
#include "http/listener.h"
#include "interpreter/context.h"
#include "interpreter/kernel_process.h"
#include "interpreter/kernel_spec.h"
#include "interpreter/options.h"
#include "interpreter/zmq_hub.h"

namespace airlock::interpreter {

class Interpreter {
 public:
  Interpreter(boost::asio::io_context& io, Options options, KernelTable table, KernelUser user);
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Listens, starts the hub and the default python context.
  Status Start();
  uint16_t port() const { return listener_.port(); }
  // Kills every kernel and stops the hub (the io loop may then return).
  void Shutdown();

 private:
  void Handle(std::shared_ptr<http::Conn> c);
  void HandleExecute(std::shared_ptr<http::Conn> c, std::string body);
  void HandleCreateContext(std::shared_ptr<http::Conn> c, std::string body);
  void HandleListContexts(std::shared_ptr<http::Conn> c);
  void HandleRestart(std::shared_ptr<http::Conn> c, const std::string& id);
  void HandleDelete(std::shared_ptr<http::Conn> c, const std::string& id);

  // The default context of a (normalised) language, created and started on
  // first use; nullptr when kernels.json has no such language.
  std::shared_ptr<Context> DefaultContext(const std::string& language);
  std::shared_ptr<Context> NewContext(const std::string& language, const std::string& cwd);
  void StartDefaultPython();
  // The first time the default python kernel is ready: the line on --console.
  void AnnounceReady();
  void FetchEnvs(const std::string& token, std::function<void(EnvVars)> done);
  // inotify on the token's directory (on its parent until the agent makes
  // it); OnTokenWritten on each write or rename of the token file.
  Status WatchAccessToken();
  void ReadTokenEvents();
  void OnTokenWritten();

  boost::asio::io_context& io_;
  // Expires with the server: callbacks posted from other threads check it.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  Options options_;
  KernelTable table_;
  KernelUser user_;
  ChildReaper reaper_;
  std::unique_ptr<ZmqHub> hub_;
  ContextServices services_;
  uint64_t next_kernel_ = 1;
  std::map<uint64_t, std::weak_ptr<Context>> kernels_;
  std::map<std::string, std::shared_ptr<Context>> contexts_;
  std::map<std::string, std::string> defaults_;  // language → context id
  bool python_ready_ = false;
  boost::asio::steady_timer retry_timer_;
  std::chrono::milliseconds retry_delay_{std::chrono::seconds(1)};
  http::Listener listener_;
  boost::asio::posix::stream_descriptor token_watch_;
  int token_dir_wd_ = -1, token_parent_wd_ = -1;
  std::string token_dir_, token_dir_name_, token_name_;
  std::string token_seen_;  // the last token the contexts were re-inited for
  alignas(8) std::array<char, 4096> token_events_{};
};

}  // namespace airlock::interpreter
