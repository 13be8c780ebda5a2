// Runs the real airlock-agent binary on 127.0.0.1:<free port> with a fake
// user database (--root-prefix) and talks HTTP/1.1 to it with a tiny
// blocking client. Run as root for the user-switching checks (they are
// skipped otherwise).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "envd/envelope.h"
#include "envd/messages.h"
#include "../wait_for.h"

namespace airlock::agent {
namespace {

using envd::Json;

std::string g_root;  // fake root with etc/passwd, etc/group, home/user
std::string g_home;
pid_t g_agent = -1;
int g_port = 0;
bool g_is_root = geteuid() == 0;

struct Response {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
};

class Conn {
 public:
  Conn() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(g_port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) ADD_FAILURE() << "connect: " << strerror(errno);
  }
  ~Conn() { Close(); }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  bool Send(std::string_view d) {
    while (!d.empty()) {
      ssize_t n = send(fd_, d.data(), d.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      d.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  bool Fill() {
    char b[65536];
    ssize_t n = recv(fd_, b, sizeof b, 0);
    if (n <= 0) return false;
    buf_.append(b, static_cast<size_t>(n));
    return true;
  }
  bool ReadHead(Response* r) {
    size_t p;
    while ((p = buf_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill()) return false;
    }
    std::string head = buf_.substr(0, p);
    buf_.erase(0, p + 4);
    std::istringstream in(head);
    std::string line;
    std::getline(in, line);
    r->status = std::atoi(line.c_str() + 9);
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      size_t c = line.find(':');
      if (c == std::string::npos) continue;
      std::string k = line.substr(0, c);
      for (auto& ch : k) ch = static_cast<char>(tolower(ch));
      r->headers[k] = line.substr(line.find_first_not_of(' ', c + 1));
    }
    if (r->status == 100) {
      *r = Response{};
      return ReadHead(r);
    }
    return true;
  }
  bool chunked(const Response& r) { return r.headers.count("transfer-encoding") > 0; }
  // Next piece of a chunked body; false at the end (or on error).
  bool ReadChunk(std::string* out) {
    size_t p;
    while ((p = buf_.find("\r\n")) == std::string::npos) {
      if (!Fill()) return false;
    }
    size_t n = std::strtoul(buf_.c_str(), nullptr, 16);
    buf_.erase(0, p + 2);
    while (buf_.size() < n + 2) {
      if (!Fill()) return false;
    }
    out->assign(buf_, 0, n);
    buf_.erase(0, n + 2);
    return n > 0;
  }
  bool ReadBody(Response* r) {
    if (chunked(*r)) {
      std::string c;
      while (ReadChunk(&c)) r->body += c;
      return true;
    }
    size_t len = r->headers.count("content-length") ? std::stoul(r->headers["content-length"]) : 0;
    while (buf_.size() < len) {
      if (!Fill()) return false;
    }
    r->body = buf_.substr(0, len);
    buf_.erase(0, len);
    return true;
  }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  std::string buf_;
};

std::string RequestHead(const std::string& method, const std::string& target, const std::string& ctype,
                        const std::vector<std::string>& headers, std::optional<size_t> length) {
  std::string h = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  if (!ctype.empty()) h += "Content-Type: " + ctype + "\r\n";
  for (const auto& x : headers) h += x + "\r\n";
  if (length) h += "Content-Length: " + std::to_string(*length) + "\r\n";
  else h += "Transfer-Encoding: chunked\r\n";
  return h + "\r\n";
}

Response Http(const std::string& method, const std::string& target, const std::string& body = "",
              const std::string& ctype = "", const std::vector<std::string>& headers = {}) {
  Conn c;
  Response r;
  c.Send(RequestHead(method, target, ctype, headers, body.size()) + body);
  EXPECT_TRUE(c.ReadHead(&r));
  EXPECT_TRUE(c.ReadBody(&r));
  return r;
}

Response Rpc(const std::string& method, const std::string& json, const std::vector<std::string>& headers = {}) {
  return Http("POST", "/" + method, json, "application/json", headers);
}

// A server-streaming call in progress.
struct Stream {
  Conn conn;
  Response head;
  envd::EnvelopeDecoder dec;
  bool ended = false;
  Status end_status;

  Stream(const std::string& method, const std::string& json, std::vector<std::string> headers = {}) {
    std::string env = envd::EncodeEnvelope(json);
    headers.push_back("Connect-Protocol-Version: 1");
    conn.Send(RequestHead("POST", "/" + method, "application/connect+json", headers, env.size()) + env);
    EXPECT_TRUE(conn.ReadHead(&head));
    EXPECT_EQ(head.status, 200);
    EXPECT_EQ(head.headers["content-type"], "application/connect+json");
  }
  // Next raw message payload; nullopt at end of stream (end_status set).
  std::optional<std::string> NextPayload() {
    while (!ended) {
      if (auto e = dec.Next()) {
        if (e->end_stream()) {
          ended = true;
          end_status = envd::ParseEndStream(e->payload);
          return std::nullopt;
        }
        return e->payload;
      }
      std::string chunk;
      if (!conn.ReadChunk(&chunk)) {
        ADD_FAILURE() << "stream ended without end-of-stream";
        ended = true;
        return std::nullopt;
      }
      EXPECT_TRUE(dec.Feed(chunk).ok());
    }
    return std::nullopt;
  }
  // Next message; nullopt at end of stream (end_status set).
  std::optional<envd::ProcessEvent> Next() {
    while (!ended) {
      if (auto e = dec.Next()) {
        if (e->end_stream()) {
          ended = true;
          end_status = envd::ParseEndStream(e->payload);
          return std::nullopt;
        }
        auto ev = envd::ParseEventResponse(e->payload);
        EXPECT_TRUE(ev.ok()) << e->payload;
        if (!ev.ok()) return std::nullopt;
        return *ev;
      }
      std::string chunk;
      if (!conn.ReadChunk(&chunk)) {
        ADD_FAILURE() << "stream ended without end-of-stream";
        ended = true;
        return std::nullopt;
      }
      EXPECT_TRUE(dec.Feed(chunk).ok());
    }
    return std::nullopt;
  }
};

struct RunResult {
  uint32_t pid = 0;
  std::string out, err;
  std::optional<envd::EndEvent> end;
  Status status;
  int keepalives = 0;
};

RunResult Drain(Stream& s, bool expect_start = true) {
  RunResult r;
  bool first = true;
  while (auto ev = s.Next()) {
    if (first && expect_start) {
      EXPECT_TRUE(std::holds_alternative<envd::StartEvent>(*ev)) << "first event must be start";
    }
    first = false;
    if (auto* st = std::get_if<envd::StartEvent>(&*ev)) r.pid = st->pid;
    if (auto* d = std::get_if<envd::DataEvent>(&*ev)) {
      (d->stream == envd::DataEvent::Stream::kStderr ? r.err : r.out) += d->data;
    }
    if (auto* e = std::get_if<envd::EndEvent>(&*ev)) r.end = *e;
    if (std::holds_alternative<envd::KeepAliveEvent>(*ev)) ++r.keepalives;
  }
  r.status = s.end_status;
  return r;
}

std::string StartJson(const std::string& script, bool stdin = false, const std::string& extra = "") {
  envd::OJson j = {{"process", {{"cmd", "/bin/bash"}, {"args", {"-l", "-c", script}}}}, {"stdin", stdin}};
  std::string s = envd::Dump(j);
  if (!extra.empty()) s = s.substr(0, s.size() - 1) + "," + extra + "}";
  return s;
}

RunResult RunScript(const std::string& script, std::vector<std::string> headers = {}) {
  Stream s("process.Process/Start", StartJson(script), std::move(headers));
  return Drain(s);
}

uint32_t ReadStartPid(Stream& s) {
  auto ev = s.Next();
  EXPECT_TRUE(ev && std::holds_alternative<envd::StartEvent>(*ev));
  return ev ? std::get<envd::StartEvent>(*ev).pid : 0;
}

long AgentRssKb() {
  std::ifstream f("/proc/" + std::to_string(g_agent) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return -1;
}

int AgentThreads() {
  std::ifstream f("/proc/" + std::to_string(g_agent) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::atoi(line.c_str() + 8);
  }
  return -1;
}

std::string ReadFileBytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class AgentServer : public ::testing::Environment {
 public:
  void SetUp() override {
    char tmpl[] = "/tmp/airlock-agent-test-XXXXXX";
    g_root = mkdtemp(tmpl);
    chmod(g_root.c_str(), 0755);
    g_home = g_root + "/home/user";
    mkdir((g_root + "/etc").c_str(), 0755);
    mkdir((g_root + "/home").c_str(), 0755);
    mkdir(g_home.c_str(), 0755);
    std::ofstream(g_root + "/etc/passwd") << "root:x:0:0:root:/root:/bin/bash\n"
                                          << "user:x:1000:1000::" << g_home << ":/bin/bash\n";
    std::ofstream(g_root + "/etc/group") << "root:x:0:\nuser:x:1000:\nextra:x:1500:user\n";
    if (g_is_root) {
      ASSERT_EQ(chown(g_home.c_str(), 1000, 1000), 0);
    }
    std::string log = g_root + "/agent.log";
    g_agent = fork();
    if (g_agent == 0) {
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 2);
      execl(AIRLOCK_AGENT_BINARY, "airlock-agent", "--listen", "127.0.0.1:0", "--root-prefix", g_root.c_str(),
            (char*)nullptr);
      _exit(127);
    }
    for (int i = 0; i < 200 && g_port == 0; ++i) {
      std::string l = ReadFileBytes(log);
      size_t p = l.find("ready port=");
      if (p != std::string::npos) g_port = std::atoi(l.c_str() + p + 11);
      else std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    ASSERT_NE(g_port, 0) << "agent did not become ready: " << ReadFileBytes(log);
  }
  void TearDown() override {
    if (g_agent > 0) {
      kill(g_agent, SIGTERM);
      waitpid(g_agent, nullptr, 0);
    }
    if (!g_root.empty()) (void)!system(("rm -rf '" + g_root + "'").c_str());
  }
};

const auto* const g_env = ::testing::AddGlobalTestEnvironment(new AgentServer);

// ---------------- the binary ----------------

TEST(AgentBinary, IsStatic) {
  if (system("command -v file >/dev/null 2>&1") != 0) GTEST_SKIP() << "file(1) not installed";
  FILE* p = popen("file -L '" AIRLOCK_AGENT_BINARY "'", "r");
  ASSERT_NE(p, nullptr);
  char buf[1024] = {};
  size_t n = fread(buf, 1, sizeof buf - 1, p);
  pclose(p);
  EXPECT_NE(std::string(buf, n).find("statically linked"), std::string::npos) << buf;
}

// ---------------- plain endpoints and errors ----------------

TEST(AgentHttp, HealthEnvsMetrics) {
  EXPECT_EQ(Http("GET", "/health").status, 204);
  auto envs = Http("GET", "/envs");
  EXPECT_EQ(envs.status, 200);
  EXPECT_EQ(envs.body, "{}");
  auto m = Http("GET", "/metrics");
  ASSERT_EQ(m.status, 200);
  auto j = Json::parse(m.body);
  for (const char* k : {"ts", "cpu_count", "cpu_used_pct", "mem_total", "mem_used", "mem_cache", "mem_total_mib",
                        "mem_used_mib", "disk_used", "disk_total"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  EXPECT_GT(j["mem_total"].get<uint64_t>(), 0u);
}

TEST(AgentHttp, ErrorsAreJson) {
  auto r = Http("GET", "/nope");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(Json::parse(r.body)["code"], 404);
  r = Rpc("process.Process/Bogus", "{}");
  EXPECT_EQ(r.status, 501);
  EXPECT_EQ(Json::parse(r.body)["code"], "unimplemented");
  r = Rpc("filesystem.Filesystem/Stat", "{not json");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(Json::parse(r.body)["code"], "invalid_argument");
  r = Rpc("filesystem.Filesystem/Stat", "{\"path\":5}");
  EXPECT_EQ(Json::parse(r.body)["code"], "invalid_argument");
  r = Rpc("process.Process/SendSignal", R"({"process":{"pid":999999},"signal":"SIGNAL_SIGKILL"})");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(Json::parse(r.body)["code"], "not_found");
  r = Rpc("filesystem.Filesystem/Stat", "{}", {"Authorization: Basic " + std::string("bm9ib2R5Og==")});
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(Json::parse(r.body)["code"], "unauthenticated");
  // Oversized unary body.
  r = Rpc("filesystem.Filesystem/Stat", "{\"path\":\"" + std::string(2 << 20, 'a') + "\"}");
  EXPECT_EQ(r.status, 429);
  // Garbage request line: a JSON 400 and the agent survives.
  {
    Conn c;
    c.Send("THIS IS NOT HTTP\r\n\r\n");
    Response resp;
    ASSERT_TRUE(c.ReadHead(&resp));
    EXPECT_EQ(resp.status, 400);
  }
  // Header names with underscores are fine; chunked request bodies too.
  {
    Conn c;
    c.Send(RequestHead("POST", "/filesystem.Filesystem/Stat", "application/json", {"X_Custom_Header: 1"},
                       std::nullopt) +
           "5\r\n{\"pat\r\n7\r\nh\":\"/\"}\r\n0\r\n\r\n");
    Response resp;
    ASSERT_TRUE(c.ReadHead(&resp));
    ASSERT_TRUE(c.ReadBody(&resp));
    EXPECT_EQ(resp.status, 200) << resp.body;
    // keep-alive: a second request on the same connection
    c.Send(RequestHead("GET", "/health", "", {}, 0));
    Response r2;
    ASSERT_TRUE(c.ReadHead(&r2));
    EXPECT_EQ(r2.status, 204);
  }
  EXPECT_EQ(Http("GET", "/health").status, 204);
}

TEST(AgentHttp, StreamErrorsInsideEndOfStream) {
  Stream s("process.Process/Start", StartJson("pwd", false, R"("x":1)").substr(0) , {});
  Drain(s);
  EXPECT_TRUE(s.end_status.ok());
  envd::OJson j = {{"process", {{"cmd", "/bin/bash"}, {"args", {"-c", "pwd"}}, {"cwd", "/nonexistent"}}}};
  Stream bad("process.Process/Start", envd::Dump(j));
  EXPECT_FALSE(bad.Next().has_value());
  EXPECT_EQ(bad.end_status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.end_status.message(), "cwd '/nonexistent' does not exist");
  Stream nf("process.Process/Connect", R"({"process":{"pid":999999}})");
  EXPECT_FALSE(nf.Next().has_value());
  EXPECT_EQ(nf.end_status.code(), StatusCode::kNotFound);
  Stream un("filesystem.Filesystem/NoSuchStream", R"({"path":"/"})");
  EXPECT_FALSE(un.Next().has_value());
  EXPECT_EQ(un.end_status.code(), StatusCode::kUnimplemented);
}

TEST(AgentHttp, KeepAliveAfterStream) {
  Stream s("process.Process/Start", StartJson("echo one"));
  EXPECT_EQ(Drain(s).out, "one\n");
  std::string last;
  EXPECT_FALSE(s.conn.ReadChunk(&last));  // the chunked terminator
  // The SDK reuses connections: the next request goes on the same socket.
  s.conn.Send(RequestHead("GET", "/health", "", {}, 0));
  Response r;
  ASSERT_TRUE(s.conn.ReadHead(&r));
  EXPECT_EQ(r.status, 204);
  std::string env = envd::EncodeEnvelope(StartJson("echo two"));
  s.conn.Send(RequestHead("POST", "/process.Process/Start", "application/connect+json", {}, env.size()) + env);
  Response r2;
  ASSERT_TRUE(s.conn.ReadHead(&r2));
  std::string all, c;
  while (s.conn.ReadChunk(&c)) all += c;
  EXPECT_NE(all.find(envd::Base64Encode("two\n")), std::string::npos);
}

// ---------------- processes ----------------

TEST(AgentProcess, StdoutStderrAndExitCodes) {
  auto r = RunScript("echo hi; echo err >&2; exit 3");
  EXPECT_NE(r.pid, 0u);
  EXPECT_EQ(r.out, "hi\n");
  EXPECT_EQ(r.err, "err\n");
  ASSERT_TRUE(r.end);
  EXPECT_EQ(r.end->exit_code, 3);
  EXPECT_TRUE(r.end->exited);
  EXPECT_EQ(r.end->status, "exit status 3");
  EXPECT_EQ(r.end->error, "exit status 3");
  EXPECT_TRUE(r.status.ok());

  r = RunScript("true");
  ASSERT_TRUE(r.end);
  EXPECT_EQ(r.end->exit_code, 0);
  EXPECT_TRUE(r.end->exited);
  EXPECT_EQ(r.end->status, "exit status 0");
  EXPECT_FALSE(r.end->error.has_value());

  r = RunScript("no_such_command_xyz");
  ASSERT_TRUE(r.end);
  EXPECT_EQ(r.end->exit_code, 127);
  EXPECT_NE(r.err.find("not found"), std::string::npos);

  Stream direct("process.Process/Start", R"({"process":{"cmd":"no_such_binary_xyz"}})");
  auto d = Drain(direct);
  ASSERT_TRUE(d.end);
  EXPECT_EQ(d.end->exit_code, 127);
  EXPECT_EQ(d.err, "no_such_binary_xyz: command not found\n");
}

TEST(AgentProcess, BinaryOutputIsByteExact) {
  auto r = RunScript("printf '\\x00\\xff\\xfe\\xc3(abc'; head -c 100000 /dev/zero | tr '\\0' 'z'");
  ASSERT_TRUE(r.end);
  EXPECT_EQ(r.out.substr(0, 8), std::string("\0\xff\xfe\xc3(abc", 8));
  EXPECT_EQ(r.out.size(), 100008u);
}

TEST(AgentProcess, UserEnvAndCwd) {
  envd::OJson j = {{"process", {{"cmd", "/bin/bash"},
                                {"args", {"-l", "-c", "id -u; id -G; pwd; echo $HOME $USER $LOGNAME $X; echo $PATH"}},
                                {"envs", {{"X", "y"}}}}}};
  Stream s("process.Process/Start", envd::Dump(j));
  auto r = Drain(s);
  if (g_is_root) {
    EXPECT_EQ(r.out.substr(0, r.out.find('\n')), "1000");
    EXPECT_NE(r.out.find("1000 1500"), std::string::npos) << r.out;
  }
  EXPECT_NE(r.out.find(g_home + "\n" + g_home + " user user y\n"), std::string::npos) << r.out;
  envd::OJson j2 = {{"process", {{"cmd", "/bin/bash"}, {"args", {"-c", "id -u; pwd"}}, {"cwd", "/tmp"}}}};
  Stream s2("process.Process/Start", envd::Dump(j2), {"Authorization: Basic cm9vdDo="});
  auto r2 = Drain(s2);
  EXPECT_EQ(r2.out, std::string(g_is_root ? "0" : std::to_string(geteuid())) + "\n/tmp\n");
  envd::OJson j3 = {{"process", {{"cmd", "pwd"}, {"cwd", "~/"}}}};
  Stream s3("process.Process/Start", envd::Dump(j3));
  EXPECT_EQ(Drain(s3).out, g_home + "\n");
}

TEST(AgentProcess, SignalKill) {
  Stream s("process.Process/Start", StartJson("sleep 30"));
  uint32_t pid = ReadStartPid(s);
  ASSERT_NE(pid, 0u);
  auto list = Rpc("process.Process/List", "{}");
  ASSERT_EQ(list.status, 200);
  bool listed = false;
  Json listed_json = Json::parse(list.body);
  for (auto& p : listed_json["processes"]) {
    if (p["pid"] == pid) {
      listed = true;
      EXPECT_EQ(p["config"]["cmd"], "/bin/bash");
      EXPECT_EQ(p["config"]["args"][2], "sleep 30");
    }
  }
  EXPECT_TRUE(listed) << list.body;
  auto r = Rpc("process.Process/SendSignal",
               R"({"process":{"pid":)" + std::to_string(pid) + R"(},"signal":"SIGNAL_SIGKILL"})");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "{}");
  auto res = Drain(s, false);
  ASSERT_TRUE(res.end);
  EXPECT_EQ(res.end->exit_code, -1);
  EXPECT_FALSE(res.end->exited);
  EXPECT_EQ(res.end->status, "signal: killed");
  EXPECT_EQ(res.end->error, "signal: killed");
  EXPECT_TRUE(res.status.ok());
}

// As envd: the Start stream's Connect-Timeout-Ms kills the process group and
// ends that stream with a Connect deadline_exceeded error, no end event (the
// Python SDK's commands.run(timeout=) waits for it); a Connect stream of the
// same process sees the process end as usual.
TEST(AgentProcess, ConnectTimeoutKillsTheGroupAndEndsTheStartStreamWithDeadlineExceeded) {
  auto t0 = std::chrono::steady_clock::now();
  Stream s("process.Process/Start", StartJson("echo before; sleep 30 & sleep 30; wait"), {"Connect-Timeout-Ms: 1500"});
  uint32_t pid = ReadStartPid(s);
  Stream c("process.Process/Connect", R"({"process":{"pid":)" + std::to_string(pid) + "}}");
  auto r = Drain(s, false);
  EXPECT_FALSE(r.end);
  EXPECT_EQ(r.out, "before\n");
  EXPECT_EQ(r.status.code(), StatusCode::kDeadlineExceeded) << r.status.ToString();
  auto other = Drain(c);
  ASSERT_TRUE(other.end);
  EXPECT_EQ(other.end->status, "signal: killed");
  EXPECT_TRUE(other.status.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST(AgentProcess, KeepaliveAfterSilence) {
  auto r = RunScript("sleep 2.5; echo x", {"Keepalive-Ping-Interval: 1"});
  EXPECT_GE(r.keepalives, 1);
  EXPECT_EQ(r.out, "x\n");
}

TEST(AgentProcess, ConnectReattachesAfterDroppedStream) {
  uint32_t pid;
  {
    Stream s("process.Process/Start", StartJson("sleep 1; echo after; exit 4"));
    pid = ReadStartPid(s);
  }  // stream dropped: the process must live on
  Stream c1("process.Process/Connect", R"({"process":{"pid":)" + std::to_string(pid) + "}}");
  Stream c2("process.Process/Connect", R"({"process":{"pid":)" + std::to_string(pid) + "}}");
  auto r1 = Drain(c1);
  auto r2 = Drain(c2);
  for (auto* r : {&r1, &r2}) {
    EXPECT_EQ(r->pid, pid);
    EXPECT_EQ(r->out, "after\n");
    ASSERT_TRUE(r->end);
    EXPECT_EQ(r->end->exit_code, 4);
  }
  // A late Connect within envd's 30 s retention still gets start + end (past
  // it, not_found: e2e_idle re-attaches 90 s after such an end).
  Stream late("process.Process/Connect", R"({"process":{"pid":)" + std::to_string(pid) + "}}");
  auto r3 = Drain(late);
  EXPECT_EQ(r3.pid, pid);
  ASSERT_TRUE(r3.end);
  EXPECT_EQ(r3.end->exit_code, 4);
  EXPECT_TRUE(r3.status.ok()) << r3.status.ToString();
}

// Resumable output (docs/agent.md "Resumable output"): offsets on every
// data event count the bytes of its stream; a client whose stream dropped
// mid-output reconnects with resumeFrom and gets every byte it missed,
// written while it was away or later, once and in order.
TEST(AgentProcess, ConnectResumesADroppedStreamFromItsOffsets) {
  std::string want_out, want_err;
  for (int i = 1; i <= 600; ++i) {
    want_out += "line " + std::to_string(i) + "\n";
    want_err += "err " + std::to_string(i) + "\n";
  }
  Stream s("process.Process/Start",
           StartJson("for i in $(seq 1 300); do echo line $i; echo err $i >&2; done; sleep 1; "
                     "for i in $(seq 301 600); do echo line $i; echo err $i >&2; done; exit 3"));
  auto first = s.Next();
  ASSERT_TRUE(first && std::holds_alternative<envd::StartEvent>(*first));
  const auto& start = std::get<envd::StartEvent>(*first);
  ASSERT_TRUE(start.offsets);
  EXPECT_EQ(*start.offsets, (envd::OutputOffsets{0, 0, 0}));
  const uint32_t pid = start.pid;
  std::string got_out, got_err;
  while (got_out.size() < 100) {  // some of the output, then the client goes away
    auto ev = s.Next();
    ASSERT_TRUE(ev);
    auto* d = std::get_if<envd::DataEvent>(&*ev);
    ASSERT_TRUE(d);
    std::string& got = d->stream == envd::DataEvent::Stream::kStderr ? got_err : got_out;
    EXPECT_EQ(d->offset, got.size()) << "the offset of a data event is the bytes of its stream before it";
    got += d->data;
  }
  s.conn.Close();
  // Resume from what arrived: the rest, byte for byte, then the end.
  envd::OJson req = {{"process", {{"pid", pid}}},
                     {"resumeFrom", {{"stdout", std::to_string(got_out.size())}, {"stderr", got_err.size()}}}};
  Stream c("process.Process/Connect", envd::Dump(req));
  auto cs = c.Next();
  ASSERT_TRUE(cs && std::holds_alternative<envd::StartEvent>(*cs));
  EXPECT_EQ(std::get<envd::StartEvent>(*cs).pid, pid);
  EXPECT_EQ(*std::get<envd::StartEvent>(*cs).offsets, (envd::OutputOffsets{got_out.size(), got_err.size(), 0}));
  while (auto ev = c.Next()) {
    if (auto* d = std::get_if<envd::DataEvent>(&*ev)) {
      std::string& got = d->stream == envd::DataEvent::Stream::kStderr ? got_err : got_out;
      ASSERT_EQ(d->offset, got.size());
      got += d->data;
    }
    if (auto* e = std::get_if<envd::EndEvent>(&*ev)) EXPECT_EQ(e->exit_code, 3);
  }
  EXPECT_TRUE(c.end_status.ok()) << c.end_status.ToString();
  EXPECT_EQ(got_out, want_out);
  EXPECT_EQ(got_err, want_err);
  // After the end, within the retention: the held output is still there.
  req["resumeFrom"] = {{"stdout", std::to_string(want_out.size() - 9)}};
  Stream late("process.Process/Connect", envd::Dump(req));
  auto r = Drain(late);
  EXPECT_EQ(r.out, "line 600\n");
  EXPECT_EQ(r.err, want_err);  // stderr from 0
  ASSERT_TRUE(r.end);
  EXPECT_EQ(r.end->exit_code, 3);
  // A plain Connect says where its (empty) output starts: the ends.
  Stream plain("process.Process/Connect", R"({"process":{"pid":)" + std::to_string(pid) + "}}");
  auto ps = plain.Next();
  ASSERT_TRUE(ps && std::holds_alternative<envd::StartEvent>(*ps));
  EXPECT_EQ(*std::get<envd::StartEvent>(*ps).offsets, (envd::OutputOffsets{want_out.size(), want_err.size(), 0}));
  Drain(plain, false);
}

// Past the per-process budget the oldest output is dropped: a resume from
// before it ends with out_of_range and says from where output is held; a
// resume past the end is out_of_range too; a resume within the held range
// gets exactly those bytes.
TEST(AgentProcess, ResumeFromDroppedOutputIsOutOfRange) {
  constexpr size_t kBytes = 3'000'000;
  uint32_t pid;
  {
    Stream s("process.Process/Start", StartJson("head -c " + std::to_string(kBytes) + " /dev/zero | tr '\\0' a; sleep 30"));
    pid = ReadStartPid(s);
  }  // no reader: the agent reads and holds the last kOutputHeldPerProcess
  const std::string sel = R"({"process":{"pid":)" + std::to_string(pid) + "}";
  auto resume = [&](uint64_t from) {
    return std::make_unique<Stream>("process.Process/Connect",
                                    sel + R"(,"resumeFrom":{"stdout":")" + std::to_string(from) + R"("}})");
  };
  // Wait until all of it was written (before, a resume from the end is past it).
  ASSERT_TRUE(WaitFor(
      [&] {
        auto c = resume(kBytes);
        auto ev = c->Next();
        return ev && std::holds_alternative<envd::StartEvent>(*ev);
      },
      std::chrono::seconds(30)));
  auto gone = resume(0);
  EXPECT_FALSE(gone->Next());
  EXPECT_EQ(gone->end_status.code(), StatusCode::kOutOfRange);
  EXPECT_NE(gone->end_status.message().find("is no longer held"), std::string::npos) << gone->end_status.message();
  auto past = resume(kBytes + 1);
  EXPECT_FALSE(past->Next());
  EXPECT_EQ(past->end_status.code(), StatusCode::kOutOfRange);
  EXPECT_NE(past->end_status.message().find("is past the 3000000 bytes"), std::string::npos)
      << past->end_status.message();
  auto tail = resume(kBytes - 512 * 1024);
  ReadStartPid(*tail);
  std::string got;
  while (got.size() < 512 * 1024) {
    auto ev = tail->Next();
    ASSERT_TRUE(ev);
    if (auto* d = std::get_if<envd::DataEvent>(&*ev)) got += d->data;
  }
  EXPECT_EQ(got, std::string(512 * 1024, 'a'));
  EXPECT_EQ(Rpc("process.Process/SendSignal", sel + R"(,"signal":"SIGNAL_SIGKILL"})").status, 200);
  Drain(*tail, false);
}

// SendSignal's scope: the process alone, or (the default) its process group.
TEST(AgentProcess, SignalScopeProcessSparesItsChildren) {
  auto alive = [](pid_t p) {
    std::ifstream f("/proc/" + std::to_string(p) + "/stat");
    std::string stat;
    std::getline(f, stat);
    size_t rp = stat.rfind(')');
    return rp != std::string::npos && rp + 2 < stat.size() && stat[rp + 2] != 'Z';
  };
  for (const char* scope : {"SIGNAL_SCOPE_PROCESS", "SIGNAL_SCOPE_GROUP"}) {
    Stream s("process.Process/Start", StartJson("sleep 300 & echo $!; wait"));
    uint32_t pid = ReadStartPid(s);
    auto ev = s.Next();
    ASSERT_TRUE(ev && std::holds_alternative<envd::DataEvent>(*ev));
    const pid_t child = std::atoi(std::get<envd::DataEvent>(*ev).data.c_str());
    ASSERT_GT(child, 0);
    auto r = Rpc("process.Process/SendSignal", R"({"process":{"pid":)" + std::to_string(pid) +
                                                   R"(},"signal":"SIGNAL_SIGKILL","scope":")" + scope + "\"}");
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_TRUE(WaitFor([&] { return !alive(static_cast<pid_t>(pid)); }, std::chrono::seconds(10)));
    if (std::string(scope) == "SIGNAL_SCOPE_PROCESS") {
      EXPECT_TRUE(alive(child)) << "the process scope ended a child";
      kill(child, SIGKILL);
    } else {
      EXPECT_TRUE(WaitFor([&] { return !alive(child); }, std::chrono::seconds(10))) << "the group scope spared a child";
    }
    Drain(s, false);
  }
}

TEST(AgentProcess, StdinInputAndClose) {
  Stream s("process.Process/Start", StartJson("cat; echo done", true));
  uint32_t pid = ReadStartPid(s);
  std::string sel = R"({"process":{"pid":)" + std::to_string(pid) + "}";
  auto r = Rpc("process.Process/SendInput", sel + R"(,"input":{"stdin":"YWJjCg=="}})");
  EXPECT_EQ(r.status, 200) << r.body;
  auto ev = s.Next();
  ASSERT_TRUE(ev && std::holds_alternative<envd::DataEvent>(*ev));
  EXPECT_EQ(std::get<envd::DataEvent>(*ev).data, "abc\n");
  EXPECT_EQ(Rpc("process.Process/CloseStdin", sel + "}").status, 200);
  auto rest = Drain(s, false);
  EXPECT_EQ(rest.out, "done\n");
  ASSERT_TRUE(rest.end);
  EXPECT_EQ(rest.end->exit_code, 0);
  // stdin not requested → SendInput fails cleanly.
  Stream s2("process.Process/Start", StartJson("sleep 5"));
  uint32_t pid2 = ReadStartPid(s2);
  auto bad = Rpc("process.Process/SendInput",
                 R"({"process":{"pid":)" + std::to_string(pid2) + R"(},"input":{"stdin":"YQ=="}})");
  EXPECT_EQ(Json::parse(bad.body)["code"], "failed_precondition");
  Rpc("process.Process/SendSignal", R"({"process":{"pid":)" + std::to_string(pid2) + R"(},"signal":9})");
  Drain(s2, false);
  // No `stdin` field at all (the SDK before 2.x): stdin is open, as in envd.
  envd::OJson old = {{"process", {{"cmd", "/bin/bash"}, {"args", {"-l", "-c", "head -n 1"}}}}};
  Stream s3("process.Process/Start", envd::Dump(old));
  uint32_t pid3 = ReadStartPid(s3);
  auto fed = Rpc("process.Process/SendInput",
                 R"({"process":{"pid":)" + std::to_string(pid3) + R"(},"input":{"stdin":"b2xkCg=="}})");
  EXPECT_EQ(fed.status, 200) << fed.body;
  auto old_end = Drain(s3, false);
  EXPECT_EQ(old_end.out, "old\n");
  ASSERT_TRUE(old_end.end);
  EXPECT_EQ(old_end.end->exit_code, 0);
}

TEST(AgentProcess, PtyStart) {
  envd::OJson j = {{"process", {{"cmd", "/bin/bash"}, {"args", {"-c", "tty >/dev/null && stty size"}}}},
                   {"pty", {{"size", {{"cols", 100}, {"rows", 30}}}}}};
  Stream s("process.Process/Start", envd::Dump(j));
  auto r = Drain(s);
  ASSERT_TRUE(r.end);
  EXPECT_EQ(r.end->exit_code, 0);
}

TEST(AgentProcess, BigOutputWithBackpressureHasBoundedMemory) {
  const size_t kBytes = 200u << 20;
  Stream s("process.Process/Start", StartJson("head -c " + std::to_string(kBytes) + " /dev/zero"));
  ReadStartPid(s);
  std::this_thread::sleep_for(std::chrono::seconds(1));  // a slow reader
  long rss = AgentRssKb();
  EXPECT_LT(rss, 64 * 1024) << "agent RSS while the reader stalls: " << rss << " KiB";
  auto r = Drain(s, false);
  EXPECT_EQ(r.out.size(), kBytes);
  ASSERT_TRUE(r.end);
  EXPECT_EQ(r.end->exit_code, 0);
}

TEST(AgentProcess, ManyConcurrentStreamsOneThread) {
  std::vector<std::unique_ptr<Stream>> streams;
  for (int i = 0; i < 150; ++i) {
    streams.push_back(std::make_unique<Stream>("process.Process/Start", StartJson("sleep 1; echo " + std::to_string(i))));
  }
  EXPECT_EQ(AgentThreads(), 1);
  for (int i = 0; i < 150; ++i) {
    auto r = Drain(*streams[static_cast<size_t>(i)]);
    EXPECT_EQ(r.out, std::to_string(i) + "\n");
  }
}

// ---------------- filesystem ----------------

Json Ok(const Response& r) {
  EXPECT_EQ(r.status, 200) << r.body;
  return Json::parse(r.body, nullptr, false);
}

TEST(AgentFilesystem, StatListMakeMoveRemove) {
  std::string base = g_home + "/fs";
  auto mk = Ok(Rpc("filesystem.Filesystem/MakeDir", R"({"path":"fs/a/b"})"));
  EXPECT_EQ(mk["entry"]["path"], base + "/a/b");
  EXPECT_EQ(mk["entry"]["type"], "FILE_TYPE_DIRECTORY");
  if (g_is_root) {
    EXPECT_EQ(mk["entry"]["owner"], "user");
  }
  struct stat st;
  ASSERT_EQ(stat((base + "/a").c_str(), &st), 0);
  if (g_is_root) {
    EXPECT_EQ(st.st_uid, 1000u);
  }
  auto again = Rpc("filesystem.Filesystem/MakeDir", R"({"path":"~/fs/a/b"})");
  EXPECT_EQ(again.status, 409);
  EXPECT_EQ(Json::parse(again.body)["code"], "already_exists");
  std::ofstream(base + "/a/file.txt") << "hello";
  auto onfile = Rpc("filesystem.Filesystem/MakeDir", R"({"path":")" + base + R"(/a/file.txt"})");
  EXPECT_EQ(Json::parse(onfile.body)["code"], "invalid_argument");
  ASSERT_EQ(symlink("file.txt", (base + "/a/link").c_str()), 0);

  auto stat_r = Ok(Rpc("filesystem.Filesystem/Stat", R"({"path":")" + base + R"(/a/file.txt"})"));
  auto e = stat_r["entry"];
  EXPECT_EQ(e["name"], "file.txt");
  EXPECT_EQ(e["type"], "FILE_TYPE_FILE");
  EXPECT_EQ(e["size"], "5");
  EXPECT_EQ(e["permissions"], "-rw-r--r--");
  EXPECT_EQ(e["mode"], 0644);
  EXPECT_FALSE(e.contains("symlinkTarget"));
  EXPECT_TRUE(envd::ParseTimestamp(e["modifiedTime"].get<std::string>()).ok());
  auto link = Ok(Rpc("filesystem.Filesystem/Stat", R"({"path":"fs/a/link"})"))["entry"];
  EXPECT_EQ(link["type"], "FILE_TYPE_FILE");  // envd follows the link: the target's type and mode
  EXPECT_EQ(link["mode"], 0644);
  EXPECT_EQ(link["symlinkTarget"], base + "/a/file.txt");  // resolved, absolute (envd)

  auto l1 = Ok(Rpc("filesystem.Filesystem/ListDir", R"({"path":")" + base + R"(","depth":1})"));
  ASSERT_EQ(l1["entries"].size(), 1u);
  EXPECT_EQ(l1["entries"][0]["path"], base + "/a");
  auto l3 = Ok(Rpc("filesystem.Filesystem/ListDir", R"({"path":"~/fs","depth":3})"));
  std::vector<std::string> paths;
  for (auto& x : l3["entries"]) paths.push_back(x["path"]);
  EXPECT_EQ(paths, (std::vector<std::string>{base + "/a", base + "/a/b", base + "/a/file.txt", base + "/a/link"}));
  auto notdir = Rpc("filesystem.Filesystem/ListDir", R"({"path":")" + base + R"(/a/file.txt"})");
  EXPECT_EQ(Json::parse(notdir.body)["code"], "invalid_argument");
  auto missing = Rpc("filesystem.Filesystem/ListDir", R"({"path":"/nonexistent-dir"})");
  EXPECT_EQ(missing.status, 404);

  auto mv = Ok(Rpc("filesystem.Filesystem/Move",
                   R"({"source":")" + base + R"(/a/file.txt","destination":"fs/new/deep/f.txt"})"));
  EXPECT_EQ(mv["entry"]["path"], base + "/new/deep/f.txt");
  EXPECT_EQ(mv["entry"]["size"], "5");
  auto mv404 = Rpc("filesystem.Filesystem/Move", R"({"source":"/nonexistent-x","destination":"/tmp/y"})");
  EXPECT_EQ(Json::parse(mv404.body)["code"], "not_found");

  EXPECT_EQ(Ok(Rpc("filesystem.Filesystem/Remove", R"({"path":"fs"})")), Json::object());
  EXPECT_NE(stat(base.c_str(), &st), 0);
  Ok(Rpc("filesystem.Filesystem/Remove", R"({"path":"fs"})"));  // missing: still OK
  auto gone = Rpc("filesystem.Filesystem/Stat", R"({"path":"fs"})");
  EXPECT_EQ(gone.status, 404);
  EXPECT_EQ(Json::parse(gone.body)["code"], "not_found");
}

// ---------------- /files ----------------

std::string UrlEncode(const std::string& s) {
  std::string o;
  char b[4];
  for (unsigned char c : s) {
    if (isalnum(c) || c == '/' || c == '.' || c == '-' || c == '_' || c == '~') {
      o.push_back(static_cast<char>(c));
    } else {
      snprintf(b, sizeof b, "%%%02X", c);
      o += b;
    }
  }
  return o;
}

std::string Multipart(const std::vector<std::pair<std::string, std::string>>& files, const std::string& boundary) {
  std::string b;
  for (const auto& [name, data] : files) {
    b += "--" + boundary + "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"" + name +
         "\"\r\nContent-Type: application/octet-stream\r\n\r\n" + data + "\r\n";
  }
  return b + "--" + boundary + "--\r\n";
}

TEST(AgentFiles, MultipartUploadAndDownload) {
  std::string bin;
  for (int i = 0; i < 70000; ++i) bin.push_back(static_cast<char>(i * 7 + (i >> 8)));
  std::string utf = g_home + "/d\xc3\xa9j\xc3\xa0/\xe6\x97\xa5\xe6\x9c\xac.bin";
  std::string body = Multipart({{utf, bin}, {"rel/c.txt", "see"}}, "XyZ");
  auto r = Http("POST", "/files", body, "multipart/form-data; boundary=XyZ");
  ASSERT_EQ(r.status, 200) << r.body;
  auto j = Json::parse(r.body);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["path"], utf);
  EXPECT_EQ(j[0]["name"], "\xe6\x97\xa5\xe6\x9c\xac.bin");
  EXPECT_EQ(j[0]["type"], "file");
  EXPECT_EQ(j[1]["path"], g_home + "/rel/c.txt");
  EXPECT_EQ(ReadFileBytes(utf), bin);
  struct stat st;
  ASSERT_EQ(stat((g_home + "/rel/c.txt").c_str(), &st), 0);
  if (g_is_root) {
    EXPECT_EQ(st.st_uid, 1000u);
    ASSERT_EQ(stat((g_home + "/rel").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 1000u);
  }
  auto down = Http("GET", "/files?path=" + UrlEncode(utf));
  EXPECT_EQ(down.status, 200);
  EXPECT_EQ(down.body, bin);
  auto rel = Http("GET", "/files?path=rel%2Fc.txt&username=user");
  EXPECT_EQ(rel.body, "see");

  // path query parameter wins over the filename.
  auto q = Http("POST", "/files?path=" + UrlEncode(g_home + "/q.txt"), Multipart({{"ignored.txt", "Q"}}, "b"),
                "multipart/form-data; boundary=b");
  ASSERT_EQ(q.status, 200) << q.body;
  EXPECT_EQ(Json::parse(q.body)[0]["path"], g_home + "/q.txt");
  EXPECT_EQ(ReadFileBytes(g_home + "/q.txt"), "Q");

  // Errors.
  auto missing = Http("GET", "/files?path=%2Fnonexistent-file");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(Json::parse(missing.body)["code"], 404);
  EXPECT_EQ(Http("GET", "/files?path=%2Ftmp").status, 400);
  EXPECT_EQ(Http("POST", "/files?path=%2Ftmp", Multipart({{"x", "y"}}, "b"), "multipart/form-data; boundary=b").status,
            400);
  EXPECT_EQ(Http("POST", "/files", "--b\r\ntruncated", "multipart/form-data; boundary=b").status, 400);
  EXPECT_EQ(Http("POST", "/files", Multipart({{"dup", "1"}, {g_home + "/dup", "2"}}, "b"),
                 "multipart/form-data; boundary=b")
                .status,
            400);
  EXPECT_EQ(Http("GET", "/files?path=x&username=nobody").status, 401);
}

// POST /files/compose, as envd's compose.go: the sources concatenated in
// order into the destination (relative paths are the user's home's), the
// sources removed; 400 / 404 / 403 as envd, nothing left behind on failure.
TEST(AgentFiles, ComposeConcatenatesAndRemovesTheSources) {
  std::string big(300000, 'b');
  auto up = Http("POST", "/files", Multipart({{"parts/1", "first,"}, {"parts/2", big}, {"parts/3", ",last"}}, "b"),
                 "multipart/form-data; boundary=b");
  ASSERT_EQ(up.status, 200) << up.body;
  auto r = Http("POST", "/files/compose",
                R"({"source_paths":["parts/1","parts/2",")" + g_home + R"(/parts/3"],"destination":"out/whole.txt"})",
                "application/json");
  ASSERT_EQ(r.status, 200) << r.body;
  auto j = Json::parse(r.body);
  EXPECT_EQ(j["path"], g_home + "/out/whole.txt");
  EXPECT_EQ(j["name"], "whole.txt");
  EXPECT_EQ(j["type"], "file");
  EXPECT_EQ(ReadFileBytes(g_home + "/out/whole.txt"), "first," + big + ",last");
  struct stat st;
  for (const char* part : {"/parts/1", "/parts/2", "/parts/3"}) EXPECT_NE(stat((g_home + part).c_str(), &st), 0) << part;
  ASSERT_EQ(stat((g_home + "/out/whole.txt").c_str(), &st), 0);
  if (g_is_root) EXPECT_EQ(st.st_uid, 1000u) << "the user's file";
  // Errors, as envd.
  auto compose = [](const std::string& body) { return Http("POST", "/files/compose", body, "application/json"); };
  EXPECT_EQ(compose(R"({"source_paths":[],"destination":"x"})").status, 400);
  EXPECT_EQ(compose(R"({"source_paths":["a"]})").status, 400);
  EXPECT_EQ(compose("not json").status, 400);
  EXPECT_EQ(compose(R"({"source_paths":["out/whole.txt"],"destination":"out/whole.txt"})").status, 400);
  auto missing = compose(R"({"source_paths":["no-such-part"],"destination":"y"})");
  EXPECT_EQ(missing.status, 404) << missing.body;
  EXPECT_EQ(compose(R"({"source_paths":["/tmp"],"destination":"y"})").status, 400) << "a directory is no source";
  EXPECT_EQ(compose(R"({"source_paths":["out/whole.txt"],"destination":"z","username":"nobody"})").status, 401);
  EXPECT_EQ(ReadFileBytes(g_home + "/out/whole.txt"), "first," + big + ",last") << "a failed compose leaves it be";
  EXPECT_NE(stat((g_home + "/y").c_str(), &st), 0);
  EXPECT_EQ(Http("GET", "/files/compose").status, 405);
  // A FIFO is no source (and does not hold the open); the destination by
  // another path (a symlinked directory) is no source either, nothing removed.
  ASSERT_EQ(mkfifo((g_home + "/fifo").c_str(), 0644), 0);
  EXPECT_EQ(compose(R"({"source_paths":["fifo"],"destination":"f"})").status, 400);
  ASSERT_EQ(symlink((g_home + "/out").c_str(), (g_home + "/out-link").c_str()), 0);
  EXPECT_EQ(compose(R"({"source_paths":["out-link/whole.txt"],"destination":"out/whole.txt"})").status, 400);
  EXPECT_EQ(ReadFileBytes(g_home + "/out/whole.txt"), "first," + big + ",last");
  if (g_is_root) {
    std::string secret = g_root + "/compose-secret";  // root's, 0600
    std::ofstream(secret) << "root-only";
    ASSERT_EQ(chmod(secret.c_str(), 0600), 0);
    auto denied = compose(R"({"source_paths":[")" + secret + R"("],"destination":"stolen"})");
    EXPECT_EQ(denied.status, 403) << denied.body;
    EXPECT_NE(stat((g_home + "/stolen").c_str(), &st), 0);
    EXPECT_EQ(stat(secret.c_str(), &st), 0) << "a source the user cannot read is not removed";
  }
}

// Item 15: every file operation runs with the requesting user's permissions.
TEST(AgentFiles, ActAsTheRequestingUser) {
  if (!g_is_root) GTEST_SKIP() << "needs root (the agent must be able to switch users)";
  const std::vector<std::string> kRoot = {"Authorization: Basic cm9vdDo="};  // "root:"
  std::string secret = g_root + "/secret";  // root's, 0600: like /etc/shadow
  std::ofstream(secret) << "root-only";
  ASSERT_EQ(chmod(secret.c_str(), 0600), 0);
  std::string etc = g_root + "/etc";  // root's, 0755: like /etc

  // Reads: 403 for the user, the bytes for root.
  auto denied = Http("GET", "/files?path=" + UrlEncode(secret) + "&username=user");
  EXPECT_EQ(denied.status, 403) << denied.body;
  EXPECT_EQ(Json::parse(denied.body)["code"], 403);
  auto as_root = Http("GET", "/files?path=" + UrlEncode(secret) + "&username=root");
  EXPECT_EQ(as_root.status, 200);
  EXPECT_EQ(as_root.body, "root-only");
  // No capability is left either: another root process's /proc files are closed.
  std::string environ = "/proc/" + std::to_string(g_agent) + "/environ";
  EXPECT_EQ(Http("GET", "/files?path=" + UrlEncode(environ) + "&username=user").status, 403);
  EXPECT_EQ(Http("GET", "/files?path=" + UrlEncode(environ) + "&username=root").status, 200);

  // Writes through a symlinked directory into a root-owned one: 403, nothing written.
  ASSERT_EQ(symlink(etc.c_str(), (g_home + "/etc-link").c_str()), 0);
  auto w = Http("POST", "/files?path=etc-link%2Fevil&username=user", "x", "application/octet-stream");
  EXPECT_EQ(w.status, 403) << w.body;
  auto mp = Http("POST", "/files?username=user", Multipart({{"etc-link/evil", "x"}}, "b"),
                 "multipart/form-data; boundary=b");
  EXPECT_EQ(mp.status, 403) << mp.body;
  auto deep = Http("POST", "/files?path=" + UrlEncode(etc + "/new/dir/f"), "x", "application/octet-stream");
  EXPECT_EQ(deep.status, 403) << deep.body;
  struct stat st;
  EXPECT_NE(lstat((etc + "/evil").c_str(), &st), 0);
  EXPECT_NE(lstat((etc + "/new").c_str(), &st), 0);
  // Overwriting a root file the user may not write: 403, content unchanged.
  auto over = Http("POST", "/files?path=" + UrlEncode(secret), "pwned", "application/octet-stream");
  EXPECT_EQ(over.status, 403) << over.body;
  EXPECT_EQ(ReadFileBytes(secret), "root-only");

  // A user's upload (and its new parents) belong to the user, via the kernel.
  ASSERT_EQ(Http("POST", "/files?path=own%2Fsub%2Ff.txt", "mine", "application/octet-stream").status, 200);
  ASSERT_EQ(stat((g_home + "/own/sub/f.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u);
  EXPECT_EQ(st.st_gid, 1000u);
  ASSERT_EQ(stat((g_home + "/own/sub").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u);
  // Root's upload is root's.
  ASSERT_EQ(Http("POST", "/files?path=" + UrlEncode(etc + "/by-root") + "&username=root", "r",
                 "application/octet-stream").status, 200);
  ASSERT_EQ(stat((etc + "/by-root").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);

  // The filesystem service: permission_denied for the user, success for root.
  auto code = [](const Response& r) { return Json::parse(r.body)["code"].get<std::string>(); };
  std::string priv = g_root + "/private";  // root's, 0700
  ASSERT_EQ(mkdir(priv.c_str(), 0700), 0);
  std::ofstream(priv + "/f") << "p";
  auto stat_r = Rpc("filesystem.Filesystem/Stat", R"({"path":")" + priv + R"(/f"})");
  EXPECT_EQ(stat_r.status, 403);
  EXPECT_EQ(code(stat_r), "permission_denied");
  EXPECT_EQ(code(Rpc("filesystem.Filesystem/ListDir", R"({"path":")" + priv + R"("})")), "permission_denied");
  EXPECT_EQ(code(Rpc("filesystem.Filesystem/MakeDir", R"({"path":")" + etc + R"(/d"})")), "permission_denied");
  EXPECT_EQ(code(Rpc("filesystem.Filesystem/MakeDir", R"({"path":"etc-link/d"})")), "permission_denied");
  EXPECT_EQ(code(Rpc("filesystem.Filesystem/Remove", R"({"path":")" + etc + R"(/passwd"})")), "permission_denied");
  EXPECT_EQ(code(Rpc("filesystem.Filesystem/Move",
                     R"({"source":")" + secret + R"(","destination":")" + g_home + R"(/stolen"})")),
            "permission_denied");
  EXPECT_EQ(stat((etc + "/passwd").c_str(), &st), 0);
  EXPECT_EQ(stat(secret.c_str(), &st), 0);
  EXPECT_NE(lstat((etc + "/d").c_str(), &st), 0);
  EXPECT_EQ(Ok(Rpc("filesystem.Filesystem/Stat", R"({"path":")" + priv + R"(/f"})", kRoot))["entry"]["size"], "1");
  auto mk = Ok(Rpc("filesystem.Filesystem/MakeDir", R"({"path":")" + priv + R"(/d"})", kRoot));
  EXPECT_EQ(mk["entry"]["owner"], "root");
  auto mine = Ok(Rpc("filesystem.Filesystem/MakeDir", R"({"path":"mine/x"})"));
  EXPECT_EQ(mine["entry"]["owner"], "user");
  EXPECT_EQ(mine["entry"]["group"], "user");

  unlink((g_home + "/etc-link").c_str());
  unlink((etc + "/by-root").c_str());
  (void)!system(("rm -rf '" + priv + "' '" + g_home + "/own' '" + g_home + "/mine' '" + secret + "'").c_str());
}

std::string Gzip(const std::string& in) {
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  std::string out(compressBound(in.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

TEST(AgentFiles, OctetStreamAndGzip) {
  std::string data(3 << 20, 'a');
  for (size_t i = 0; i < data.size(); i += 97) data[i] = static_cast<char>(i);
  auto r = Http("POST", "/files?path=raw.bin", data, "application/octet-stream");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(ReadFileBytes(g_home + "/raw.bin"), data);
  auto g = Http("POST", "/files?path=" + UrlEncode(g_home + "/g.txt"), Gzip(data), "application/octet-stream",
                {"Content-Encoding: gzip"});
  ASSERT_EQ(g.status, 200) << g.body;
  EXPECT_EQ(Json::parse(g.body)[0]["path"], g_home + "/g.txt");
  EXPECT_EQ(ReadFileBytes(g_home + "/g.txt"), data);
  auto bad = Http("POST", "/files?path=bad.txt", "not gzip", "application/octet-stream", {"Content-Encoding: gzip"});
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(Http("POST", "/files", "x", "application/octet-stream").status, 400);  // path required
}

TEST(AgentFiles, Upload200MBStreamsToDisk) {
  const size_t kTotal = 200u << 20;
  Conn c;
  c.Send(RequestHead("POST", "/files?path=big.bin", "application/octet-stream", {}, std::nullopt));
  std::string chunk(1 << 20, '\0');
  for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = static_cast<char>(i % 251);
  long max_rss = 0;
  char hdr[32];
  for (size_t sent = 0; sent < kTotal; sent += chunk.size()) {
    snprintf(hdr, sizeof hdr, "%zx\r\n", chunk.size());
    ASSERT_TRUE(c.Send(hdr) && c.Send(chunk) && c.Send("\r\n"));
    if ((sent >> 20) % 32 == 0) max_rss = std::max(max_rss, AgentRssKb());
  }
  c.Send("0\r\n\r\n");
  Response r;
  ASSERT_TRUE(c.ReadHead(&r));
  ASSERT_TRUE(c.ReadBody(&r));
  EXPECT_EQ(r.status, 200) << r.body;
  struct stat st;
  ASSERT_EQ(stat((g_home + "/big.bin").c_str(), &st), 0);
  EXPECT_EQ(static_cast<size_t>(st.st_size), kTotal);
  EXPECT_LT(max_rss, 64 * 1024) << "agent buffered the upload";
  unlink((g_home + "/big.bin").c_str());
}

// ---------------- file metadata (X-Metadata-* → user.e2b.*) ----------------

TEST(AgentFiles, MetadataOnUploadStatListAndRename) {
  std::string dir = g_home + "/meta";
  auto r = Http("POST", "/files", Multipart({{"meta/a.txt", "A"}, {"meta/b.txt", "B"}}, "b"),
                "multipart/form-data; boundary=b", {"X-Metadata-Owner: alice", "x-metadata-TEAM: Core Infra"});
  ASSERT_EQ(r.status, 200) << r.body;
  auto j = Json::parse(r.body);
  ASSERT_EQ(j.size(), 2u);
  Json want = {{"owner", "alice"}, {"team", "Core Infra"}};
  EXPECT_EQ(j[0]["metadata"], want);
  EXPECT_EQ(j[1]["metadata"], want);
  EXPECT_EQ(Ok(Rpc("filesystem.Filesystem/Stat", R"({"path":"meta/a.txt"})"))["entry"]["metadata"], want);
  auto list = Ok(Rpc("filesystem.Filesystem/ListDir", R"({"path":"meta"})"))["entries"];
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[1]["metadata"], want);
  // A rename keeps it (the inode's xattrs).
  auto mv = Ok(Rpc("filesystem.Filesystem/Move", R"({"source":"meta/a.txt","destination":"meta/moved.txt"})"));
  EXPECT_EQ(mv["entry"]["metadata"], want);
  // Raw upload with other metadata replaces the whole set; none clears it.
  auto raw = Http("POST", "/files?path=meta%2Fb.txt", "B2", "application/octet-stream", {"X-Metadata-Only: 1"});
  ASSERT_EQ(raw.status, 200) << raw.body;
  EXPECT_EQ(Json::parse(raw.body)[0]["metadata"], Json({{"only", "1"}}));
  EXPECT_EQ(Ok(Rpc("filesystem.Filesystem/Stat", R"({"path":"meta/b.txt"})"))["entry"]["metadata"],
            Json({{"only", "1"}}));
  ASSERT_EQ(Http("POST", "/files?path=meta%2Fb.txt", "B3", "application/octet-stream").status, 200);
  EXPECT_FALSE(Ok(Rpc("filesystem.Filesystem/Stat", R"({"path":"meta/b.txt"})"))["entry"].contains("metadata"));
  // Bad metadata: 400 before anything is written.
  for (const std::string& h : {std::string("X-Metadata-K: caf\xc3\xa9"),
                               "X-Metadata-Big: " + std::string(5000, 'v'), std::string("X-Metadata-: v")}) {
    auto bad = Http("POST", "/files?path=meta%2Fbad.txt", "x", "application/octet-stream", {h});
    EXPECT_EQ(bad.status, 400) << bad.body;
    EXPECT_NE(Json::parse(bad.body)["message"].get<std::string>().find("invalid metadata"), std::string::npos);
  }
  struct stat st;
  EXPECT_NE(stat((dir + "/bad.txt").c_str(), &st), 0);
}

// ---------------- WatchDir and the polled watchers ----------------

std::vector<std::string> WatchEvents(Stream& s, size_t n) {
  std::vector<std::string> out;
  while (out.size() < n) {
    auto p = s.NextPayload();
    if (!p) break;
    auto j = Json::parse(*p);
    if (j.contains("keepalive")) continue;
    if (!j.contains("filesystem")) {
      out.push_back("?" + *p);
      continue;
    }
    out.push_back(j["filesystem"]["type"].get<std::string>().substr(11) + " " +
                  j["filesystem"]["name"].get<std::string>());
  }
  return out;
}

TEST(AgentWatch, StreamStartEventsAndEnd) {
  std::string dir = g_home + "/w1";
  ASSERT_EQ(mkdir(dir.c_str(), 0777), 0);
  Stream s("filesystem.Filesystem/WatchDir", R"({"path":"w1","recursive":true})",
           {"Keepalive-Ping-Interval: 1", "Connect-Timeout-Ms: 4000"});
  auto first = s.NextPayload();
  ASSERT_TRUE(first);
  EXPECT_EQ(*first, R"({"start":{}})");
  // Each step waits for the watch to report the directory first: what is
  // created and gone again before inotify is read cannot be reported.
  ASSERT_EQ(mkdir((dir + "/sub").c_str(), 0755), 0);
  EXPECT_EQ(WatchEvents(s, 1), (std::vector<std::string>{"CREATE sub"}));
  ASSERT_EQ(system(("cd '" + dir + "' && printf x > sub/f && mv sub/f g && rm g").c_str()), 0);
  EXPECT_EQ(WatchEvents(s, 5),
            (std::vector<std::string>{"CREATE sub/f", "WRITE sub/f", "RENAME sub/f", "CREATE g", "REMOVE g"}));
  // Keepalives in the silence, then the Connect-Timeout-Ms deadline ends it.
  int keepalives = 0;
  while (auto p = s.NextPayload()) keepalives += *p == R"({"keepalive":{}})";
  EXPECT_GE(keepalives, 1);
  EXPECT_EQ(s.end_status.code(), StatusCode::kDeadlineExceeded) << s.end_status.ToString();
}

TEST(AgentWatch, ErrorsInTheEndOfStream) {
  Stream missing("filesystem.Filesystem/WatchDir", R"({"path":"/nonexistent-watch-dir"})");
  EXPECT_FALSE(missing.NextPayload());
  EXPECT_EQ(missing.end_status.code(), StatusCode::kNotFound) << missing.end_status.ToString();
  std::ofstream(g_home + "/plain.txt") << "x";
  Stream file("filesystem.Filesystem/WatchDir", R"({"path":"plain.txt"})");
  EXPECT_FALSE(file.NextPayload());
  EXPECT_EQ(file.end_status.code(), StatusCode::kInvalidArgument);
  if (g_is_root) {  // the requesting user's rights decide
    std::string secret = g_root + "/secret-dir";
    ASSERT_EQ(mkdir(secret.c_str(), 0700), 0);
    Stream denied("filesystem.Filesystem/WatchDir", R"({"path":")" + secret + R"("})");
    EXPECT_FALSE(denied.NextPayload());
    EXPECT_EQ(denied.end_status.code(), StatusCode::kPermissionDenied) << denied.end_status.ToString();
    Stream as_root("filesystem.Filesystem/WatchDir", R"({"path":")" + secret + R"("})",
                   {"Authorization: Basic cm9vdDo=", "Connect-Timeout-Ms: 200"});
    EXPECT_EQ(*as_root.NextPayload(), R"({"start":{}})");
  }
}

TEST(AgentWatch, WatcherCapAndDisconnectReleases) {
  std::string dir = g_home + "/w2";
  ASSERT_EQ(mkdir(dir.c_str(), 0777), 0);
  std::vector<std::unique_ptr<Stream>> streams;
  for (int i = 0; i < 64; ++i) {
    streams.push_back(std::make_unique<Stream>("filesystem.Filesystem/WatchDir", R"({"path":"w2"})"));
    ASSERT_EQ(*streams.back()->NextPayload(), R"({"start":{}})") << i;
  }
  Stream over("filesystem.Filesystem/WatchDir", R"({"path":"w2"})");
  EXPECT_FALSE(over.NextPayload());
  EXPECT_EQ(over.end_status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(over.end_status.message().find("at most 64"), std::string::npos) << over.end_status.message();
  auto create = Rpc("filesystem.Filesystem/CreateWatcher", R"({"path":"w2"})");
  EXPECT_EQ(create.status, 429) << create.body;
  streams.clear();  // the clients go away: every watcher is released
  bool ok = false;
  for (int i = 0; i < 100 && !ok; ++i) {
    auto r = Rpc("filesystem.Filesystem/CreateWatcher", R"({"path":"w2"})");
    ok = r.status == 200;
    if (ok) Ok(Rpc("filesystem.Filesystem/RemoveWatcher", envd::Dump({{"watcherId", Json::parse(r.body)["watcherId"]}})));
    else std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(ok);
  EXPECT_EQ(AgentThreads(), 1);
}

TEST(AgentWatch, PolledWatcher) {
  std::string dir = g_home + "/w3";
  ASSERT_EQ(mkdir(dir.c_str(), 0777), 0);
  auto created = Ok(Rpc("filesystem.Filesystem/CreateWatcher", R"({"path":"w3","recursive":true})"));
  std::string id = created["watcherId"];
  ASSERT_FALSE(id.empty());
  ASSERT_EQ(system(("cd '" + dir + "' && mkdir d && : > d/x").c_str()), 0);
  std::vector<std::string> got;
  for (int i = 0; i < 100 && got.size() < 2; ++i) {
    auto r = Ok(Rpc("filesystem.Filesystem/GetWatcherEvents", envd::Dump({{"watcherId", id}})));
    for (auto& e : r["events"]) got.push_back(e["type"].get<std::string>() + " " + e["name"].get<std::string>());
    if (got.size() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(got, (std::vector<std::string>{"EVENT_TYPE_CREATE d", "EVENT_TYPE_CREATE d/x"}));
  EXPECT_EQ(Ok(Rpc("filesystem.Filesystem/RemoveWatcher", envd::Dump({{"watcherId", id}}))), Json::object());
  auto gone = Rpc("filesystem.Filesystem/GetWatcherEvents", envd::Dump({{"watcherId", id}}));
  EXPECT_EQ(gone.status, 404);
  EXPECT_EQ(Json::parse(gone.body)["code"], "not_found");
  EXPECT_EQ(Rpc("filesystem.Filesystem/RemoveWatcher", R"({})").status, 400);
}

}  // namespace
}  // namespace airlock::agent
