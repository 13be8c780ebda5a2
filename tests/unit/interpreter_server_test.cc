// Host-level tests of the real airlock-interpreter binary against Debian's
// ipykernel (/usr/bin/python3 -m ipykernel_launcher), over HTTP on a free
// loopback port: results, streaming, errors, interrupt on disconnect,
// env_vars, contexts, restart, delete, big output, the output cap, ASCII-only
// lines, and the sandbox env vars fetched from a fake envd. Labelled
// "integration" (they start Python kernels); skipped when ipykernel is absent.
// As root the kernels run as `nobody` (the user switch and the chown of the
// connection file are exercised too).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/wait_for.h"

namespace airlock::interpreter {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr const char* kPython = "/usr/bin/python3";

bool HaveIpykernel() {
  return std::system((std::string(kPython) + " -c 'import ipykernel' >/dev/null 2>&1").c_str()) == 0;
}

// ---- a tiny blocking HTTP/1.1 client (Connection: close) ----

int Connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, std::string_view d) {
  while (!d.empty()) {
    ssize_t n = send(fd, d.data(), d.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    d.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

std::string Request(const std::string& method, const std::string& target, const std::string& body,
                    const std::string& extra_headers = "") {
  std::string r = method + " " + target + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n" +
                  extra_headers;
  if (method != "GET") r += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  return r + "\r\n" + body;
}

struct Reply {
  int status = 0;
  std::string head;
  std::string body;  // de-chunked
  std::vector<json> lines;
  bool ascii_only = true;
  bool empty_line = false;
};

// Decodes a chunked body; returns false when incomplete.
bool Dechunk(const std::string& raw, std::string& out) {
  out.clear();
  size_t p = 0;
  while (true) {
    size_t e = raw.find("\r\n", p);
    if (e == std::string::npos) return false;
    size_t len = std::strtoul(raw.substr(p, e - p).c_str(), nullptr, 16);
    if (len == 0) return true;
    if (raw.size() < e + 2 + len + 2) return false;
    out.append(raw, e + 2, len);
    p = e + 2 + len + 2;
  }
}

Reply Parse(const std::string& raw) {
  Reply r;
  size_t he = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.1 ", 0) != 0 || he == std::string::npos) return r;
  r.status = std::atoi(raw.c_str() + 9);
  r.head = raw.substr(0, he);
  std::string rest = raw.substr(he + 4);
  std::string lower = r.head;
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.find("transfer-encoding: chunked") != std::string::npos) Dechunk(rest, r.body);
  else r.body = rest;
  if (lower.find("application/x-ndjson") != std::string::npos) {
    for (unsigned char c : r.body) {
      if (c >= 0x80) r.ascii_only = false;
    }
    std::stringstream ss(r.body);
    std::string line;
    while (std::getline(ss, line)) {
      if (line.empty()) {
        r.empty_line = true;
        continue;
      }
      json j = json::parse(line, nullptr, false);
      r.lines.push_back(j);
    }
  }
  return r;
}

Reply Call(int port, const std::string& method, const std::string& target, const std::string& body = "",
           const std::string& extra_headers = "", std::chrono::seconds timeout = 120s) {
  int fd = Connect(port);
  if (fd < 0) return {};
  SendAll(fd, Request(method, target, body, extra_headers));
  std::string raw;
  char buf[65536];
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 1000) <= 0) continue;
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    raw.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return Parse(raw);
}

Reply Execute(int port, const json& body, const std::string& extra_headers = "") {
  return Call(port, "POST", "/execute", body.dump(), extra_headers);
}

// Lines of one type.
std::vector<json> OfType(const Reply& r, const std::string& type) {
  std::vector<json> out;
  for (const auto& l : r.lines) {
    if (l.is_object() && l.value("type", "") == type) out.push_back(l);
  }
  return out;
}

std::string Stdout(const Reply& r) {
  std::string s;
  for (const auto& l : OfType(r, "stdout")) s += l.value("text", "");
  return s;
}

std::string MainText(const Reply& r) {
  for (const auto& l : OfType(r, "result")) {
    if (l.value("is_main_result", false)) return l.value("text", "");
  }
  return "<no main result>";
}

// Every NDJSON response: ASCII only, no empty line, end_of_execution last.
void ExpectWellFormed(const Reply& r) {
  EXPECT_EQ(r.status, 200) << r.head << r.body.substr(0, 500);
  EXPECT_TRUE(r.ascii_only);
  EXPECT_FALSE(r.empty_line);
  ASSERT_FALSE(r.lines.empty());
  EXPECT_EQ(r.lines.back().value("type", ""), "end_of_execution") << r.body.substr(0, 2000);
}

// ---- a fake envd: GET /envs → {"SBX_VAR": ...}, remembering the token ----

class FakeEnvd {
 public:
  FakeEnvd() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    listen(fd_, 16);
    thread_ = std::thread([this] { Run(); });
  }
  ~FakeEnvd() {
    stop_ = true;
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  int port() const { return port_; }
  std::string tokens() {
    std::lock_guard<std::mutex> l(mu_);
    return tokens_;
  }
  void set_body(std::string body) {
    std::lock_guard<std::mutex> l(mu_);
    body_ = std::move(body);
  }

 private:
  void Run() {
    while (!stop_) {
      int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      std::string req;
      char buf[4096];
      while (req.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = read(c, buf, sizeof buf);
        if (n <= 0) break;
        req.append(buf, static_cast<size_t>(n));
      }
      std::string lower = req;
      for (auto& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      size_t t = lower.find("x-access-token: ");
      std::string body;
      {
        std::lock_guard<std::mutex> l(mu_);
        if (t != std::string::npos) tokens_ += req.substr(t + 16, req.find("\r\n", t) - t - 16) + ";";
        body = body_;
      }
      std::string resp = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
      SendAll(c, resp);
      close(c);
    }
  }
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::string tokens_;
  std::string body_ = R"({"SBX_VAR":"from envd \u00e9"})";
};

// ---- the server under test ----

class Server {
 public:
  Server(const std::string& dir, const std::string& extra_flags, int envd_port) : dir_(dir) {
    std::string kernels = dir + "/kernels.json";
    std::ofstream(kernels) << json{{"python",
                                    {{"argv", {kPython, "-m", "ipykernel_launcher", "-f", "{connection_file}"}},
                                     {"env", {{"IPYTHONDIR", dir + "/ipython"}, {"PYDEVD_DISABLE_FILE_VALIDATION", "1"}}}}},
                                   // A kernel that can never start.
                                   {"broken", {{"argv", {"/bin/false", "{connection_file}"}}}}}
                                  .dump();
    mkdir((dir + "/cwd").c_str(), 0777);
    chmod((dir + "/cwd").c_str(), 0777);
    mkdir((dir + "/ipython").c_str(), 0777);
    chmod((dir + "/ipython").c_str(), 0777);
    log_ = dir + "/server.log";
    std::string cmd = std::string("exec ") + AIRLOCK_INTERPRETER_BINARY + " --listen 127.0.0.1:0 --kernels " + kernels +
                      " --cwd " + dir + "/cwd --runtime-dir " + dir + "/run --envd http://127.0.0.1:" +
                      std::to_string(envd_port) + (geteuid() == 0 ? " --user nobody " : " ") + extra_flags +
                      " 2>" + log_;
    pid_ = fork();
    if (pid_ == 0) {
      execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
      _exit(127);
    }
    WaitFor([&] { return (port_ = ReadPort()) > 0; }, 30s);
  }
  ~Server() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int st;
      if (!WaitFor([&] { return waitpid(pid_, &st, WNOHANG) == pid_; }, 10s)) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &st, 0);
      }
    }
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string Log() const {
    std::ifstream f(log_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  bool WaitHealthy() {
    return WaitFor([&] { return Call(port_, "GET", "/health", "", "", 5s).status == 200; }, 180s, 200ms);
  }

 private:
  int ReadPort() const {
    std::string l = Log();
    size_t p = l.find("ready port=");
    return p == std::string::npos ? 0 : std::atoi(l.c_str() + p + 11);
  }
  std::string dir_, log_;
  pid_t pid_ = -1;
  int port_ = 0;
};

std::string MakeTempDir() {
  char tmpl[] = "/tmp/interp-test-XXXXXX";
  std::string d = mkdtemp(tmpl);
  chmod(d.c_str(), 0755);
  return d;
}

std::string NewContextIn(int port) {
  Reply r = Call(port, "POST", "/contexts", R"({"language":"python"})");
  EXPECT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body, nullptr, false);
  return j.is_object() ? j.value("id", "") : "";
}

class InterpreterServer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!HaveIpykernel()) return;
    dir_ = new std::string(MakeTempDir());
    envd_ = new FakeEnvd();
    std::ofstream(*dir_ + "/console").flush();  // opened for append, never created
    server_ = new Server(*dir_, "--console " + *dir_ + "/console", envd_->port());
  }
  static void TearDownTestSuite() {
    delete server_;
    delete envd_;
    server_ = nullptr;
    envd_ = nullptr;
    if (dir_) std::system(("rm -rf " + *dir_).c_str());
    delete dir_;
  }
  void SetUp() override {
    if (!server_) GTEST_SKIP() << kPython << " has no ipykernel (Debian: python3-ipykernel)";
    ASSERT_GT(server_->port(), 0) << server_->Log();
    ASSERT_TRUE(server_->WaitHealthy()) << server_->Log();
  }
  int port() const { return server_->port(); }
  std::string NewContext() { return NewContextIn(port()); }
  static std::string* dir_;
  static FakeEnvd* envd_;
  static Server* server_;
};
std::string* InterpreterServer::dir_ = nullptr;
FakeEnvd* InterpreterServer::envd_ = nullptr;
Server* InterpreterServer::server_ = nullptr;

TEST_F(InterpreterServer, StateCarriesOverAndResultText) {
  std::string ctx = NewContext();
  ExpectWellFormed(Execute(port(), {{"code", "x = 41"}, {"context_id", ctx}}));
  Reply r = Execute(port(), {{"code", "x + 1"}, {"context_id", ctx}});
  ExpectWellFormed(r);
  EXPECT_EQ(MainText(r), "42");
  ASSERT_FALSE(OfType(r, "number_of_executions").empty());
  EXPECT_EQ(OfType(r, "number_of_executions")[0].value("execution_count", 0), 2);
  auto res = OfType(r, "result");
  ASSERT_EQ(res.size(), 1u);
  EXPECT_TRUE(res[0].contains("extra"));
  // A string result loses its quotes.
  EXPECT_EQ(MainText(Execute(port(), {{"code", "'abc'"}, {"context_id", ctx}})), "abc");
  // The server's own silent executions (env setup, re-seed) did not fail.
  EXPECT_EQ(server_->Log().find("execution failed in the kernel"), std::string::npos) << server_->Log();
}

TEST_F(InterpreterServer, StdoutIsStreamedBeforeTheResult) {
  int fd = Connect(port());
  ASSERT_GE(fd, 0);
  json body{{"code", "import time\nprint('early', flush=True)\ntime.sleep(1.5)\n'late'"}};
  ASSERT_TRUE(SendAll(fd, Request("POST", "/execute", body.dump())));
  std::string raw, dechunked;
  auto t0 = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point saw_stdout{}, saw_result{};
  char buf[4096];
  while (std::chrono::steady_clock::now() - t0 < 60s) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    raw.append(buf, static_cast<size_t>(n));
    size_t he = raw.find("\r\n\r\n");
    if (he == std::string::npos) continue;
    bool done = Dechunk(raw.substr(he + 4), dechunked);
    if (saw_stdout == decltype(saw_stdout){} && dechunked.find("\"early\\n\"") != std::string::npos)
      saw_stdout = std::chrono::steady_clock::now();
    if (saw_result == decltype(saw_result){} && dechunked.find("\"late\"") != std::string::npos)
      saw_result = std::chrono::steady_clock::now();
    if (done) break;
  }
  close(fd);
  ASSERT_NE(saw_stdout, decltype(saw_stdout){}) << dechunked;
  ASSERT_NE(saw_result, decltype(saw_result){}) << dechunked;
  EXPECT_GE(saw_result - saw_stdout, 1s) << "stdout was not sent before the cell ended";
  EXPECT_LT(dechunked.find("early"), dechunked.find("late"));
}

TEST_F(InterpreterServer, ExceptionGivesErrorLineAndContextLives) {
  std::string ctx = NewContext();
  ExpectWellFormed(Execute(port(), {{"code", "y = 7"}, {"context_id", ctx}}));
  Reply r = Execute(port(), {{"code", "1/0"}, {"context_id", ctx}});
  ExpectWellFormed(r);
  auto errs = OfType(r, "error");
  ASSERT_EQ(errs.size(), 1u) << r.body;
  EXPECT_EQ(errs[0].value("name", ""), "ZeroDivisionError");
  EXPECT_EQ(errs[0].value("value", ""), "division by zero");
  EXPECT_NE(errs[0].value("traceback", "").find("ZeroDivisionError"), std::string::npos);
  EXPECT_NE(errs[0].value("traceback", "").find('\n'), std::string::npos);
  EXPECT_EQ(MainText(Execute(port(), {{"code", "y * 6"}, {"context_id", ctx}})), "42");
}

TEST_F(InterpreterServer, ClientDisconnectInterruptsTheKernel) {
  std::string ctx = NewContext();
  ExpectWellFormed(Execute(port(), {{"code", "z = 5"}, {"context_id", ctx}}));
  int fd = Connect(port());
  ASSERT_GE(fd, 0);
  json body{{"code", "print('spinning', flush=True)\nwhile True: pass"}, {"context_id", ctx}};
  ASSERT_TRUE(SendAll(fd, Request("POST", "/execute", body.dump())));
  std::string raw;
  char buf[4096];
  // Wait until the loop runs (its first output), then hang up.
  auto t0 = std::chrono::steady_clock::now();
  while (raw.find("spinning") == std::string::npos && std::chrono::steady_clock::now() - t0 < 60s) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    raw.append(buf, static_cast<size_t>(n));
  }
  ASSERT_NE(raw.find("spinning"), std::string::npos) << raw;
  close(fd);
  auto t1 = std::chrono::steady_clock::now();
  Reply r = Execute(port(), {{"code", "z + 1"}, {"context_id", ctx}});
  ExpectWellFormed(r);
  EXPECT_EQ(MainText(r), "6") << r.body;
  EXPECT_LT(std::chrono::steady_clock::now() - t1, 30s);
}

TEST_F(InterpreterServer, EnvVarsApplyToOneExecution) {
  std::string ctx = NewContext();
  std::string tricky = "a'b\"c\\d\n$(touch " + *dir_ + "/pwned)`id` \xc3\xa9";
  Reply r = Execute(port(), {{"code", "import os\nprint(os.environ['AIRLOCK_T1'] == " + json(tricky).dump() + ")"},
                             {"context_id", ctx},
                             {"env_vars", {{"AIRLOCK_T1", tricky}, {"HOME", "/elsewhere"}}}});
  ExpectWellFormed(r);
  EXPECT_EQ(Stdout(r), "True\n") << r.body;
  r = Execute(port(), {{"code", "import os\nprint(os.environ.get('AIRLOCK_T1'), os.environ['HOME'] != '/elsewhere')"},
                       {"context_id", ctx}});
  ExpectWellFormed(r);
  EXPECT_EQ(Stdout(r), "None True\n") << r.body;
  EXPECT_EQ(server_->Log().find("execution failed in the kernel"), std::string::npos) << server_->Log();
  struct stat st;
  EXPECT_NE(stat((*dir_ + "/pwned").c_str(), &st), 0);
}

TEST_F(InterpreterServer, SandboxEnvVarsFromEnvdOnFirstExecute) {
  std::string ctx = NewContext();
  Reply r = Execute(port(), {{"code", "import os\nprint(os.environ.get('SBX_VAR'))"}, {"context_id", ctx}},
                    "X-Access-Token: tok-123\r\n");
  ExpectWellFormed(r);
  EXPECT_EQ(Stdout(r), "from envd \xc3\xa9\n") << r.body;
  EXPECT_NE(envd_->tokens().find("tok-123;"), std::string::npos) << envd_->tokens();
}

TEST_F(InterpreterServer, ContextsAreIsolatedAndListed) {
  std::string a = NewContext(), b = NewContext();
  ExpectWellFormed(Execute(port(), {{"code", "v = 'a'"}, {"context_id", a}}));
  Reply r = Execute(port(), {{"code", "v"}, {"context_id", b}});
  ExpectWellFormed(r);
  ASSERT_EQ(OfType(r, "error").size(), 1u);
  EXPECT_EQ(OfType(r, "error")[0].value("name", ""), "NameError");
  EXPECT_EQ(MainText(Execute(port(), {{"code", "v"}, {"context_id", a}})), "a");
  Reply list = Call(port(), "GET", "/contexts");
  EXPECT_EQ(list.status, 200);
  json l = json::parse(list.body, nullptr, false);
  ASSERT_TRUE(l.is_array()) << list.body;
  int found = 0;
  for (const auto& c : l) {
    if (c.value("id", "") == a || c.value("id", "") == b) ++found;
    EXPECT_TRUE(c.value("language", "") == "python" || c.value("language", "") == "broken") << c;
    EXPECT_TRUE(c.contains("cwd")) << c;
  }
  EXPECT_EQ(found, 2);
  EXPECT_GE(l.size(), 3u);  // the default python context too
}

TEST_F(InterpreterServer, RestartClearsStateDeleteForgets) {
  std::string ctx = NewContext();
  ExpectWellFormed(Execute(port(), {{"code", "w = 1"}, {"context_id", ctx}}));
  EXPECT_EQ(Call(port(), "POST", "/contexts/" + ctx + "/restart").status, 200);
  Reply r = Execute(port(), {{"code", "w"}, {"context_id", ctx}});
  ExpectWellFormed(r);
  ASSERT_EQ(OfType(r, "error").size(), 1u) << r.body;
  EXPECT_EQ(OfType(r, "error")[0].value("name", ""), "NameError");
  EXPECT_EQ(MainText(Execute(port(), {{"code", "1 + 1"}, {"context_id", ctx}})), "2");
  EXPECT_EQ(Call(port(), "DELETE", "/contexts/" + ctx).status, 200);
  Reply gone = Execute(port(), {{"code", "1"}, {"context_id", ctx}});
  EXPECT_EQ(gone.status, 404);
  EXPECT_EQ(gone.body, "Context " + ctx + " not found");
  EXPECT_EQ(Call(port(), "DELETE", "/contexts/" + ctx).status, 404);
  EXPECT_EQ(Call(port(), "POST", "/contexts/" + ctx + "/restart").status, 404);
}

// The line the host takes the template snapshot on, once, after the default
// python kernel is ready (the fixture waited for /health).
TEST_F(InterpreterServer, ReadyLineOnTheConsoleOnce) {
  std::string console;
  ASSERT_TRUE(WaitFor([&] {
    std::ifstream f(*dir_ + "/console");
    console.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    return !console.empty();
  }, 10s));
  EXPECT_EQ(console, "airlock-interpreter: ready\n");
}

// Each kernel's sockets are unix sockets in a directory of its own (0700,
// the kernel user's; no TCP port), gone with the context.
TEST_F(InterpreterServer, KernelSocketsAreIpcInAPrivateDirectory) {
  std::string ctx = NewContext();
  ASSERT_EQ(MainText(Execute(port(), {{"code", "1 + 1"}, {"context_id", ctx}})), "2");
  const std::string kdir = *dir_ + "/run/kernel-" + ctx;
  struct stat st {};
  ASSERT_EQ(stat(kdir.c_str(), &st), 0) << kdir;
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  std::ifstream conn(kdir + "/connection.json");
  json info = json::parse(conn, nullptr, false);
  ASSERT_TRUE(info.is_object());
  EXPECT_EQ(info.value("transport", ""), "ipc");
  EXPECT_EQ(info.value("ip", ""), kdir + "/k");
  for (int port = 1; port <= 5; ++port) {
    std::string sock = kdir + "/k-" + std::to_string(port);
    ASSERT_EQ(stat(sock.c_str(), &st), 0) << sock;
    EXPECT_TRUE(S_ISSOCK(st.st_mode)) << sock;
  }
  // None of the kernel's Jupyter channels is a TCP socket. The one TCP socket
  // a kernel may hold is ipykernel's IOPub pipe for forked subprocesses
  // (iostream.py, _setup_pipe_in: a PULL socket on 127.0.0.1 at a random
  // port, each message keyed by a random 16-byte id): a listener on loopback,
  // never connected. So every TCP socket among the kernel's fds (found by
  // inode in /proc/net/tcp{,6}; the test shares the kernel's network
  // namespace) must be a loopback listener, and there is at most one.
  Reply inodes = Execute(
      port(), {{"code", "import os\n' '.join(os.readlink('/proc/self/fd/' + f)[8:-1] for f in os.listdir('/proc/self/fd') "
                        "if os.readlink('/proc/self/fd/' + f).startswith('socket:'))"},
               {"context_id", ctx}});
  std::string tcp_table;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream f(table);
    tcp_table.append(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  std::stringstream ss(MainText(inodes));
  std::string inode;
  int tcp_sockets = 0;
  while (ss >> inode) {
    size_t at = tcp_table.find(" " + inode + " ");
    if (at == std::string::npos) continue;
    ++tcp_sockets;
    size_t b = tcp_table.rfind('\n', at);
    std::stringstream row(tcp_table.substr(b == std::string::npos ? 0 : b + 1, at - b));
    std::string slot, local, remote, state;
    row >> slot >> local >> remote >> state;
    EXPECT_EQ(state, "0A") << "a kernel TCP socket that is not a listener: " << row.str();
    EXPECT_TRUE(local.rfind("0100007F:", 0) == 0 || local.rfind("0000000000000000FFFF00000100007F:", 0) == 0 ||
                local.rfind("00000000000000000000000001000000:", 0) == 0)
        << "a kernel TCP socket beyond loopback: " << row.str();
  }
  EXPECT_LE(tcp_sockets, 1) << MainText(inodes);
  EXPECT_EQ(Call(port(), "DELETE", "/contexts/" + ctx).status, 200);
  EXPECT_TRUE(WaitFor([&] { return stat(kdir.c_str(), &st) != 0; }, 10s)) << kdir << " is still there";
}

TEST_F(InterpreterServer, RequestErrors) {
  Reply both = Execute(port(), {{"code", "1"}, {"context_id", "x"}, {"language", "python"}});
  EXPECT_EQ(both.status, 400);
  EXPECT_EQ(both.body, "Only one of context_id or language can be provided");
  Reply lang = Execute(port(), {{"code", "1"}, {"language", "cobol"}});
  EXPECT_EQ(lang.status, 500);
  EXPECT_NE(lang.body.find("python"), std::string::npos);
  EXPECT_EQ(Execute(port(), {{"language", "python"}}).status, 400);
  // " Python " normalises to the default python context.
  EXPECT_EQ(MainText(Execute(port(), {{"code", "3 * 3"}, {"language", " Python "}})), "9");
}

TEST_F(InterpreterServer, TenMegabytePrintArrivesWhole) {
  Reply r = Execute(port(), {{"code", "print('x' * 10_000_000)"}});
  ExpectWellFormed(r);
  EXPECT_EQ(Stdout(r), std::string(10'000'000, 'x') + "\n");
  EXPECT_TRUE(OfType(r, "error").empty());
}

TEST_F(InterpreterServer, NonAsciiIsEscaped) {
  Reply r = Execute(port(), {{"code", "print('caf\xc3\xa9 \xf0\x9f\x98\x80')"}});
  ExpectWellFormed(r);
  EXPECT_NE(r.body.find("caf\\u00e9 \\ud83d\\ude00"), std::string::npos) << r.body;
  EXPECT_EQ(Stdout(r), "caf\xc3\xa9 \xf0\x9f\x98\x80\n");
}

TEST_F(InterpreterServer, KernelDeathEndsTheExecutionAndRestartsTheKernel) {
  std::string ctx = NewContext();
  ExpectWellFormed(Execute(port(), {{"code", "k = 1"}, {"context_id", ctx}}));
  Reply r = Execute(port(), {{"code", "import os\nos._exit(3)"}, {"context_id", ctx}});
  ExpectWellFormed(r);
  auto errs = OfType(r, "error");
  ASSERT_EQ(errs.size(), 1u) << r.body;
  EXPECT_EQ(errs[0].value("name", ""), "UnexpectedEndOfExecution");
  // Same context id, a fresh kernel: the state is gone, the context works.
  Reply after = Execute(port(), {{"code", "'k' in globals()"}, {"context_id", ctx}});
  ExpectWellFormed(after);
  EXPECT_EQ(MainText(after), "False") << after.body;
}

TEST_F(InterpreterServer, ExecutionsInOneContextRunOneAtATime) {
  std::string ctx = NewContext();
  int fd = Connect(port());
  ASSERT_GE(fd, 0);
  json body{{"code", "import time\nprint('started', flush=True)\ntime.sleep(1)\nq = 'first done'"},
            {"context_id", ctx}};
  ASSERT_TRUE(SendAll(fd, Request("POST", "/execute", body.dump())));
  std::string raw;
  char buf[4096];
  while (raw.find("started") == std::string::npos) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    raw.append(buf, static_cast<size_t>(n));
  }
  ASSERT_NE(raw.find("started"), std::string::npos) << raw;
  // Sent while the first one sleeps: it waits for it, and sees its effect.
  Reply second = Execute(port(), {{"code", "q"}, {"context_id", ctx}});
  ExpectWellFormed(second);
  EXPECT_EQ(MainText(second), "first done") << second.body;
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) raw.append(buf, static_cast<size_t>(n));
  close(fd);
  Reply first = Parse(raw);
  ExpectWellFormed(first);
}

TEST_F(InterpreterServer, KeepaliveDuringSilence) {
  Reply r = Execute(port(), {{"code", "import time\ntime.sleep(6)\n'woke'"}});
  ExpectWellFormed(r);
  EXPECT_GE(OfType(r, "keepalive").size(), 1u) << r.body;
  EXPECT_EQ(MainText(r), "woke");
}

TEST_F(InterpreterServer, KernelThatCannotStart) {
  Reply created = Call(port(), "POST", "/contexts", R"({"language":"broken"})");
  EXPECT_EQ(created.status, 500) << created.body;
  Reply r = Execute(port(), {{"code", "1"}, {"language", "broken"}});
  ExpectWellFormed(r);
  auto errs = OfType(r, "error");
  ASSERT_EQ(errs.size(), 1u) << r.body;
  EXPECT_EQ(errs[0].value("name", ""), "KernelStartFailed");
  // Tried three times (new ports each time), then gave up.
  std::string log = server_->Log();
  size_t n = 0;
  for (size_t p = log.find("(broken): kernel start failed"); p != std::string::npos;
       p = log.find("(broken): kernel start failed", p + 1))
    ++n;
  EXPECT_GE(n, 6u) << log;  // 3 for the POST, 3 for the execute
  // The python kernels are unaffected.
  EXPECT_EQ(MainText(Execute(port(), {{"code", "2 + 2"}})), "4");
}

TEST_F(InterpreterServer, OutputLimitCutsAndNextCallWorks) {
  std::string dir = MakeTempDir();
  {
    Server small(dir, "--max-output-bytes 1048576", 1);
    ASSERT_GT(small.port(), 0) << small.Log();
    ASSERT_TRUE(small.WaitHealthy()) << small.Log();
    ExpectWellFormed(Execute(small.port(), {{"code", "n = 3"}}));
    Reply r = Execute(small.port(), {{"code", "while True: print('y' * 1000)"}});
    ExpectWellFormed(r);
    EXPECT_LE(r.body.size(), 1048576u + 4096u);
    auto errs = OfType(r, "error");
    ASSERT_EQ(errs.size(), 1u) << r.body.substr(r.body.size() > 1000 ? r.body.size() - 1000 : 0);
    EXPECT_EQ(errs[0].value("name", ""), "OutputLimitExceeded");
    EXPECT_NE(errs[0].value("value", "").find("1048576"), std::string::npos);
    Reply next = Execute(small.port(), {{"code", "n * 2"}});
    ExpectWellFormed(next);
    EXPECT_EQ(MainText(next), "6") << next.body;

    // A client that reads nothing while the cell prints (up to) 100 MB in
    // 100 kB messages: the server buffers about the cap, never the output.
    // (A single kernel message is held whole while it is checked, so the
    // cell flushes often, as ipykernel alone batches 0.2 s of prints into
    // one; and it paces itself a little, so that what is in flight between
    // the kernel and the interrupt stays small on a loaded machine.)
    auto status_kb = [&](const char* field) {
      std::ifstream status("/proc/" + std::to_string(small.pid()) + "/status");
      std::string line;
      long kb = -1;
      while (std::getline(status, line)) {
        if (line.rfind(field, 0) == 0) kb = std::atol(line.c_str() + std::strlen(field));
      }
      return kb;
    };
    auto peak_kb = [&] { return status_kb("VmHWM:"); };
    std::cout << "server peak RSS after the first cut: " << peak_kb() << " kB\n";
    std::ofstream("/proc/" + std::to_string(small.pid()) + "/clear_refs") << "5";  // resets VmHWM
    long base_kb = status_kb("VmRSS:");
    int fd = Connect(small.port());
    ASSERT_GE(fd, 0);
    std::string marker = dir + "/cwd/slow-done";
    json body{{"code", "import sys, time\ntry:\n    for i in range(100000):\n        print('y' * 1000)\n        if i % 100 == 0: sys.stdout.flush(); time.sleep(0.002)\nfinally:\n    open('slow-done', 'w').write('1')"}};
    ASSERT_TRUE(SendAll(fd, Request("POST", "/execute", body.dump())));
    struct stat st;
    EXPECT_TRUE(WaitFor([&] { return stat(marker.c_str(), &st) == 0; }, 120s));
    std::string raw;
    char buf[65536];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) raw.append(buf, static_cast<size_t>(n));
    close(fd);
    Reply slow = Parse(raw);
    ExpectWellFormed(slow);
    ASSERT_EQ(OfType(slow, "error").size(), 1u);
    EXPECT_EQ(OfType(slow, "error")[0].value("name", ""), "OutputLimitExceeded");
    long hwm_kb = peak_kb();
    std::cout << "server RSS before the slow client " << base_kb << " kB, peak during it " << hwm_kb << " kB\n";
    EXPECT_GT(hwm_kb, 0);
    // The cap is 1 MiB, the output up to 100 MB: ~10 MB of growth is usual
    // (the cap, what is in flight, allocator slack), up to ~20 MB seen with
    // four of these tests at once on 2 cores.
    EXPECT_LT(hwm_kb - base_kb, 32 * 1024) << "peak RSS growth of the server, kB";
  }
  std::system(("rm -rf " + dir).c_str());
}

// The token check at the interpreter itself (issue 32), so a request that
// reaches port 49999 without the daemon (a relay in the guest) cannot run
// code: the token is the one the agent wrote at /init, read on every
// request. Needs no kernel (the check comes first; a language it does not
// have answers 500 past it), so it runs without ipykernel too.
TEST(InterpreterAccess, TokenFileGuardsExecuteAndFollowsRotation) {
  std::string dir = MakeTempDir();
  std::string file = dir + "/access-token";
  auto write_token = [&](const std::string& t) {  // as the agent: a new file renamed over the old
    std::ofstream(file + ".tmp") << t;
    ASSERT_EQ(rename((file + ".tmp").c_str(), file.c_str()), 0);
  };
  FakeEnvd envd;
  Server server(dir, "--access-token-file " + file, envd.port());
  ASSERT_GT(server.port(), 0) << server.Log();
  const int port = server.port();
  const json nope = {{"code", "1"}, {"language", "nope"}};
  auto tok = [](const std::string& t) { return "X-Access-Token: " + t + "\r\n"; };
  // No token yet (before /init): open, as the agent.
  EXPECT_EQ(Execute(port, nope).status, 500);

  write_token("secret");
  Reply missing = Execute(port, nope);
  EXPECT_EQ(missing.status, 401) << missing.body;
  EXPECT_NE(missing.body.find("missing X-Access-Token"), std::string::npos) << missing.body;
  Reply wrong = Execute(port, nope, tok("wrong"));
  EXPECT_EQ(wrong.status, 401);
  EXPECT_NE(wrong.body.find("invalid X-Access-Token"), std::string::npos) << wrong.body;
  EXPECT_EQ(Execute(port, {{"code", "1"}}).status, 401);  // the default context: not run either
  Reply ok = Execute(port, nope, tok("secret"));
  EXPECT_EQ(ok.status, 500) << ok.body;  // past the check
  EXPECT_NE(ok.body.find("not supported"), std::string::npos) << ok.body;
  // The routes the official SDK calls without a token: open, or the right token.
  EXPECT_EQ(Call(port, "GET", "/contexts").status, 200);
  EXPECT_EQ(Call(port, "GET", "/contexts", "", tok("secret")).status, 200);
  EXPECT_EQ(Call(port, "GET", "/contexts", "", tok("wrong")).status, 401);
  EXPECT_EQ(Call(port, "DELETE", "/contexts/none").status, 404);
  EXPECT_EQ(Call(port, "POST", "/contexts/none/restart").status, 404);
  EXPECT_NE(Call(port, "GET", "/health").status, 401);
  EXPECT_EQ(Call(port, "GET", "/other").status, 401);
  EXPECT_EQ(Call(port, "GET", "/other", "", tok("secret")).status, 404);

  // Rotated at /init: the old token stops at once, the new one works.
  write_token("next");
  EXPECT_EQ(Execute(port, nope, tok("secret")).status, 401);
  EXPECT_EQ(Execute(port, nope, tok("next")).status, 500);
  // A token file that cannot be read refuses everything (503), never opens.
  ASSERT_EQ(unlink(file.c_str()), 0);
  ASSERT_EQ(mkdir(file.c_str(), 0700), 0);
  EXPECT_EQ(Execute(port, nope, tok("next")).status, 503);
  EXPECT_EQ(Call(port, "GET", "/contexts").status, 503);
  // Cleared (the agent removes the file): open again, as the agent.
  ASSERT_EQ(rmdir(file.c_str()), 0);
  EXPECT_EQ(Execute(port, nope).status, 500);
  std::system(("rm -rf " + dir).c_str());
}

// A new token is a new sandbox (a create from the template snapshot, a
// warm-pool claim, a fork child): the server fetches its env vars and
// re-seeds the PRNGs at once, before any execution asks; the same token
// written again (a resume) changes nothing, so a seeded sequence carries on.
// Before the ready line, one warm-up execution leaves no trace the user sees.
TEST(InterpreterIdentity, ANewTokenRefetchesEnvsAndReseedsAtOnce) {
  if (!HaveIpykernel()) GTEST_SKIP() << kPython << " has no ipykernel (Debian: python3-ipykernel)";
  std::string dir = MakeTempDir();
  std::string file = dir + "/airlock/access-token";  // the directory is made later, as by the agent
  auto write_token = [&](const std::string& t) {
    mkdir((dir + "/airlock").c_str(), 0700);
    std::ofstream(file + ".tmp") << t;
    ASSERT_EQ(rename((file + ".tmp").c_str(), file.c_str()), 0);
  };
  auto count = [](const std::string& s, const std::string& what) {
    size_t n = 0;
    for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
    return n;
  };
  FakeEnvd envd;
  std::ofstream(dir + "/console").flush();
  Server server(dir, "--access-token-file " + file + " --console " + dir + "/console", envd.port());
  ASSERT_GT(server.port(), 0) << server.Log();
  ASSERT_TRUE(server.WaitHealthy()) << server.Log();
  ASSERT_TRUE(WaitFor([&] {
    std::ifstream f(dir + "/console");
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()) ==
           "airlock-interpreter: ready\n";
  }, 60s)) << server.Log();
  const int port = server.port();
  // The warm pool's warm-up (before /init: no token yet) runs the same.
  EXPECT_EQ(Call(port, "POST", "/airlock/warm-up").status, 204);
  EXPECT_EQ(Call(port, "GET", "/airlock/warm-up").status, 405);
  // The warm-ups left nothing: no output cached, '_' unbound, the first count.
  Reply r = Execute(port, {{"code", "import random\nrandom.seed(7)\nprint(len(Out), repr(_), get_ipython().execution_count)"}});
  ExpectWellFormed(r);
  EXPECT_EQ(Stdout(r), "0 '' 1\n") << r.body;

  write_token("t1");
  ASSERT_TRUE(WaitFor([&] { return envd.tokens().find("t1;") != std::string::npos; }, 60s))
      << "no /envs fetch for the new token: " << envd.tokens() << server.Log();
  r = Execute(port,
              {{"code", "import os\nx = random.Random(7)\nx.random()\n"
                        "print(os.environ.get('SBX_VAR'), random.random() != x.random())"}},
              "X-Access-Token: t1\r\n");
  ExpectWellFormed(r);
  EXPECT_EQ(Stdout(r), "from envd \xc3\xa9 True\n") << r.body;

  // The same token again (a resume): no fetch, no re-seed.
  ExpectWellFormed(Execute(port, {{"code", "random.seed(9)"}}, "X-Access-Token: t1\r\n"));
  write_token("t1");
  r = Execute(port, {{"code", "print(random.random() == random.Random(9).random())"}}, "X-Access-Token: t1\r\n");
  ExpectWellFormed(r);
  EXPECT_EQ(Stdout(r), "True\n") << r.body;
  EXPECT_EQ(count(envd.tokens(), "t1;"), 1u) << envd.tokens();
  EXPECT_EQ(Call(port, "POST", "/airlock/warm-up").status, 401);  // past /init: the token, as /execute
  EXPECT_EQ(Call(port, "POST", "/airlock/warm-up", "", "X-Access-Token: t1\r\n").status, 204);

  // A fork child: a new token, its own env vars, in every context.
  std::string other = NewContextIn(port);
  ExpectWellFormed(Execute(port, {{"code", "1"}, {"context_id", other}}, "X-Access-Token: t1\r\n"));
  envd.set_body(R"({"SBX_VAR":"second"})");
  write_token("t2");
  ASSERT_TRUE(WaitFor([&] { return count(envd.tokens(), "t2;") >= 2; }, 60s)) << envd.tokens() << server.Log();
  for (const std::string& ctx : {std::string(), other}) {
    json req = {{"code", "import os\nprint(os.environ.get('SBX_VAR'))"}};
    if (!ctx.empty()) req["context_id"] = ctx;
    r = Execute(port, req, "X-Access-Token: t2\r\n");
    ExpectWellFormed(r);
    EXPECT_EQ(Stdout(r), "second\n") << r.body;
  }
  EXPECT_EQ(count(envd.tokens(), "t2;"), 2u) << envd.tokens();
  EXPECT_EQ(server.Log().find("execution failed in the kernel"), std::string::npos) << server.Log();
  std::system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace airlock::interpreter
