// The audit trail: chain, canonical form, verify locating edits/removals/
// reorders, torn tails after a crash, queries, and the data-plane tap
// (exec and file records parsed from real Connect/HTTP bytes).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "audit/audit_log.h"
#include "audit/data_plane_tap.h"
#include "envd/envelope.h"
#include "envd/proto_json.h"
#include "secrets/redactor.h"
#include "tests/unit/scoped_dir.h"

namespace airlock::audit {
namespace {

using nlohmann::json;
using test_util::MakeTempDir;
using test_util::ScopedDir;

std::string Slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}
void Spit(const std::string& p, const std::string& data) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << data;
}
std::vector<std::string> Lines(const std::string& data) {
  std::vector<std::string> out;
  std::istringstream s(data);
  std::string l;
  while (std::getline(s, l)) out.push_back(l);
  return out;
}
std::string Join(const std::vector<std::string>& lines) {
  std::string out;
  for (auto& l : lines) out += l + "\n";
  return out;
}
std::string DayFile(const std::string& dir) {
  for (auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".jsonl") return e.path().string();
  }
  return "";
}

// Writes n records and returns the day file's path.
std::string WriteRecords(const std::string& dir, int n) {
  auto log = AuditLog::Open(dir);
  EXPECT_TRUE(log.ok()) << log.status().ToString();
  for (int i = 0; i < n; ++i) {
    EXPECT_TRUE((*log)->Append({{"action", "test"}, {"i", i}, {"sandbox", i % 2 ? "sbA" : "sbB"}}).ok());
  }
  return DayFile(dir);
}

TEST(AuditLog, ChainsRecordsCanonicallyAndContinuesAfterReopen) {
  ScopedDir d{MakeTempDir("audit")};
  WriteRecords(d.path, 3);
  std::string file = WriteRecords(d.path, 2);  // reopen continues the chain
  auto lines = Lines(Slurp(file));
  ASSERT_EQ(lines.size(), 5u);
  std::string prev(64, '0');
  for (size_t i = 0; i < lines.size(); ++i) {
    json j = json::parse(lines[i]);
    EXPECT_EQ(j["seq"], i + 1);
    EXPECT_EQ(j["prev"], prev);
    json body = j;
    body.erase("hash");
    EXPECT_EQ(j["hash"], Sha256Hex(body.dump()));
    EXPECT_EQ(Canonical(j), lines[i]);
    prev = j["hash"];
  }
  auto rep = Verify(d.path);
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->ok()) << rep->problems[0].what;
  EXPECT_EQ(rep->records, 5u);
  EXPECT_EQ(::access((d.path + "/HEAD").c_str(), F_OK), 0);
}

TEST(AuditLog, VerifyLocatesAnEditedRecord) {
  ScopedDir d{MakeTempDir("audit")};
  std::string file = WriteRecords(d.path, 5);
  auto lines = Lines(Slurp(file));
  json j = json::parse(lines[2]);
  j["action"] = "innocent";
  lines[2] = j.dump();
  Spit(file, Join(lines));
  auto rep = Verify(d.path);
  ASSERT_TRUE(rep.ok());
  ASSERT_EQ(rep->problems.size(), 1u);
  EXPECT_EQ(rep->problems[0].line, 3u);
  EXPECT_EQ(rep->problems[0].file, std::filesystem::path(file).filename().string());
  EXPECT_NE(rep->problems[0].what.find("edited"), std::string::npos);
}

TEST(AuditLog, VerifyLocatesAnEditWithARecomputedHash) {
  ScopedDir d{MakeTempDir("audit")};
  std::string file = WriteRecords(d.path, 5);
  auto lines = Lines(Slurp(file));
  json j = json::parse(lines[1]);
  j["action"] = "innocent";
  j.erase("hash");
  j["hash"] = RecordHash(j);
  lines[1] = Canonical(j);
  Spit(file, Join(lines));
  auto rep = Verify(d.path);
  ASSERT_TRUE(rep.ok());
  ASSERT_EQ(rep->problems.size(), 1u);
  EXPECT_EQ(rep->problems[0].line, 3u);  // the next record no longer chains to it
  EXPECT_NE(rep->problems[0].what.find("chain broken"), std::string::npos);
}

TEST(AuditLog, VerifyLocatesRemovedAndReorderedRecords) {
  ScopedDir d{MakeTempDir("audit")};
  std::string file = WriteRecords(d.path, 5);
  auto orig = Lines(Slurp(file));
  auto lines = orig;
  lines.erase(lines.begin() + 1);
  Spit(file, Join(lines));
  auto rep = Verify(d.path);
  ASSERT_TRUE(rep.ok());
  ASSERT_FALSE(rep->ok());
  EXPECT_EQ(rep->problems[0].line, 2u);
  EXPECT_NE(rep->problems[0].what.find("removed"), std::string::npos);

  lines = orig;
  std::swap(lines[2], lines[3]);
  Spit(file, Join(lines));
  rep = Verify(d.path);
  ASSERT_TRUE(rep.ok());
  ASSERT_FALSE(rep->ok());
  EXPECT_EQ(rep->problems[0].line, 3u);

  lines = orig;
  lines.pop_back();  // the newest record: only HEAD knows
  Spit(file, Join(lines));
  rep = Verify(d.path);
  ASSERT_TRUE(rep.ok());
  ASSERT_EQ(rep->problems.size(), 1u);
  EXPECT_EQ(rep->problems[0].file, "HEAD");
  EXPECT_NE(rep->problems[0].what.find("removed from the end"), std::string::npos);
}

// Issue 11 item 4: one writer per trail, and a trail two writers did write
// (two daemons on one registry before the lock) reads as damage, not tampering.
TEST(AuditLog, SecondWriterIsRefusedNamingTheHolder) {
  ScopedDir d{MakeTempDir("audit")};
  auto first = AuditLog::Open(d.path);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = AuditLog::Open(d.path);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("in use by pid " + std::to_string(::getpid())), std::string::npos)
      << second.status().message();
  first->reset();
  EXPECT_TRUE(AuditLog::Open(d.path).ok());  // released with the first
}

TEST(AuditLog, VerifyTellsInterleavedWritersFromTampering) {
  ScopedDir a{MakeTempDir("audit")}, b{MakeTempDir("audit")};
  std::string base = WriteRecords(a.path, 3);
  std::filesystem::copy(a.path, b.path,
                        std::filesystem::copy_options::recursive | std::filesystem::copy_options::overwrite_existing);
  std::string fa = WriteRecords(a.path, 2);  // writer A: seq 4, 5
  std::string fb = WriteRecords(b.path, 2);  // writer B from the same base: seq 4, 5
  auto la = Lines(Slurp(fa)), lb = Lines(Slurp(fb));
  ASSERT_EQ(la.size(), 5u);
  ASSERT_EQ(lb.size(), 5u);
  // What two daemons appending at once leave: A4 B4 A5 B5 after the common 1..3.
  std::vector<std::string> merged = {la[0], la[1], la[2], la[3], lb[3], la[4], lb[4]};
  Spit(fa, Join(merged));
  // HEAD is whichever writer wrote last: B.
  std::filesystem::copy_file(b.path + "/HEAD", a.path + "/HEAD", std::filesystem::copy_options::overwrite_existing);
  auto rep = Verify(a.path);
  ASSERT_TRUE(rep.ok());
  ASSERT_FALSE(rep->ok());
  std::string all;
  for (const auto& p : rep->problems) all += p.what + (p.tampering ? " [tampering]\n" : " [damage]\n");
  EXPECT_FALSE(rep->tampered()) << all;
  EXPECT_NE(rep->problems[0].what.find("two daemons"), std::string::npos) << rep->problems[0].what;
  // An edit inside that trail is still tampering.
  json j = json::parse(merged[5]);
  j["action"] = "innocent";
  merged[5] = j.dump();
  Spit(fa, Join(merged));
  rep = Verify(a.path);
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->tampered());
  // So is a removal in a single writer's trail.
  ScopedDir c{MakeTempDir("audit")};
  std::string fc = WriteRecords(c.path, 5);
  auto lc = Lines(Slurp(fc));
  lc.erase(lc.begin() + 2);
  Spit(fc, Join(lc));
  rep = Verify(c.path);
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->tampered());
  (void)base;
}

TEST(AuditLog, TornTailIsReportedThenRecoveredVisibly) {
  ScopedDir d{MakeTempDir("audit")};
  std::string file = WriteRecords(d.path, 3);
  std::string data = Slurp(file);
  Spit(file, data + "{\"action\":\"half-writ");
  auto rep = Verify(d.path);
  ASSERT_TRUE(rep.ok());
  ASSERT_EQ(rep->problems.size(), 1u);
  EXPECT_EQ(rep->problems[0].line, 4u);
  EXPECT_NE(rep->problems[0].what.find("torn"), std::string::npos);

  auto log = AuditLog::Open(d.path);  // recovery: the torn bytes move aside, a record says so
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  ASSERT_TRUE((*log)->Append({{"action", "after"}}).ok());
  rep = Verify(d.path);
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->ok()) << rep->problems[0].what;
  ASSERT_EQ(rep->notes.size(), 1u);
  EXPECT_NE(rep->notes[0].find("torn"), std::string::npos);
  auto lines = Lines(Slurp(file));
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(json::parse(lines[3])["action"], "audit.torn_tail");
  EXPECT_EQ(Slurp(file + ".torn-" + std::to_string(data.size())), "{\"action\":\"half-writ");
}

TEST(AuditLog, ConcurrentAppendsKeepTheChain) {
  ScopedDir d{MakeTempDir("audit")};
  auto log = AuditLog::Open(d.path);
  ASSERT_TRUE(log.ok());
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) (void)(*log)->Append({{"action", "x"}, {"t", t}, {"i", i}});
    });
  }
  for (auto& t : ts) t.join();
  auto rep = Verify(d.path);
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->ok());
  EXPECT_EQ(rep->records, 400u);
}

TEST(AuditLog, RedactsSecretsBeforeHashing) {
  ScopedDir d{MakeTempDir("audit")};
  auto red = std::make_shared<secrets::Redactor>();
  ASSERT_TRUE(red->Add("TOKEN", "canary-4f1c9e2a77").ok());
  auto log = AuditLog::Open(d.path, red);
  ASSERT_TRUE(log.ok());
  ASSERT_TRUE((*log)->Append({{"action", "exec"}, {"args", {"-c", "curl -H 'x: canary-4f1c9e2a77'"}}}).ok());
  std::string data = Slurp(DayFile(d.path));
  EXPECT_EQ(data.find("canary-4f1c9e2a77"), std::string::npos);
  EXPECT_NE(data.find("[REDACTED:TOKEN]"), std::string::npos);
  auto rep = Verify(d.path);
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->ok());
}

TEST(AuditLog, QueryFiltersBySandboxAndTime) {
  ScopedDir d{MakeTempDir("audit")};
  WriteRecords(d.path, 6);
  auto a = Query(d.path, {"sbA", 0, 1000});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->size(), 3u);
  auto future =
      Query(d.path,
            {"",
             std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
                     .count() +
                 60000,
             1000});
  ASSERT_TRUE(future.ok());
  EXPECT_TRUE(future->empty());
  auto last2 = Query(d.path, {"", 0, 2});
  ASSERT_TRUE(last2.ok());
  ASSERT_EQ(last2->size(), 2u);
  EXPECT_EQ((*last2)[1]["seq"], 6);
  EXPECT_EQ(*ParseSince("1700000000", 0), 1700000000000);
  EXPECT_EQ(*ParseSince("-10m", 1000000), 1000000 - 600000);
  EXPECT_EQ(*ParseSince("2023-11-14T22:13:20Z", 0), 1700000000000);
  EXPECT_FALSE(ParseSince("yesterday", 0).ok());
}

// Query reads a line at a time: a torn last line is no record, a record
// that only mentions a sandbox id in another field is not that sandbox's,
// and an id JSON escapes is still found.
TEST(AuditLog, QueryMatchesTheSandboxFieldLineByLine) {
  ScopedDir d{MakeTempDir("audit")};
  {
    auto log = AuditLog::Open(d.path);
    ASSERT_TRUE(log.ok()) << log.status().ToString();
    ASSERT_TRUE((*log)->Append({{"action", "a"}, {"sandbox", "sbA"}}).ok());
    ASSERT_TRUE((*log)->Append({{"action", "b"}, {"sandbox", "sbB"}, {"checkpoint", "sbA-ckpt-1"}}).ok());
    ASSERT_TRUE((*log)->Append({{"action", "c"}, {"sandbox", "odd\"id"}}).ok());
    ASSERT_TRUE((*log)->Append({{"action", "d"}, {"sandbox", "sbA"}}).ok());
  }
  const std::string file = DayFile(d.path);
  Spit(file, Slurp(file) + R"({"action":"torn","sandbox":"sbA")");  // no '\n'
  auto a = Query(d.path, {"sbA", 0, 1000});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_EQ(a->size(), 2u);
  EXPECT_EQ((*a)[0]["action"], "a");
  EXPECT_EQ((*a)[1]["action"], "d");
  auto odd = Query(d.path, {"odd\"id", 0, 1000});
  ASSERT_TRUE(odd.ok());
  ASSERT_EQ(odd->size(), 1u);
  EXPECT_EQ((*odd)[0]["action"], "c");
  auto all = Query(d.path, {"", 0, 1000});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 4u);
}

// ---- data-plane tap ----

std::string Chunked(const std::string& body) {
  std::string out;
  for (size_t i = 0; i < body.size(); i += 7) {  // small chunks, split anywhere
    std::string part = body.substr(i, 7);
    char hdr[16];
    std::snprintf(hdr, sizeof hdr, "%zx\r\n", part.size());
    out += hdr + part + "\r\n";
  }
  return out + "0\r\n\r\n";
}

TEST(DataPlaneTap, ExecRecordHasCommandEnvNamesOutputHashesAndExit) {
  std::vector<json> got;
  TapRequest req{"sb1", "", "POST", "/process.Process/Start", {}, "Basic cm9vdDo=", "application/connect+json"};
  auto tap = DataPlaneTap::Create(req, [&](const json& r) { got.push_back(r); });
  ASSERT_TRUE(tap);
  std::string start = envd::EncodeEnvelope(
      R"({"process":{"cmd":"/bin/bash","args":["-c","echo hi"],"envs":{"SECRET_NAME":"value-not-logged"},"cwd":"/tmp"}})");
  tap->OnRequestBody(start.substr(0, 10));
  tap->OnRequestBody(start.substr(10));
  tap->OnResponseHead(200, true);
  std::string stream =
      envd::EncodeEnvelope(R"({"event":{"start":{"pid":42}}})") +
      envd::EncodeEnvelope(R"({"event":{"data":{"stdout":")" + envd::Base64Encode("hi\n") + "\"}}}") +
      envd::EncodeEnvelope(R"({"event":{"data":{"stderr":")" + envd::Base64Encode("oops") + "\"}}}") +
      envd::EncodeEnvelope(R"({"event":{"end":{"exitCode":3,"exited":true,"status":"exit status 3"}}})") +
      envd::EncodeEndStream(OkStatus());
  std::string framed = Chunked(stream);
  for (size_t i = 0; i < framed.size(); i += 5) tap->OnResponseBytes(framed.substr(i, 5));
  tap->Finish();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0]["action"], "exec.start");
  EXPECT_EQ(got[0]["pid"], 42);
  EXPECT_EQ(got[0]["cmd"], "/bin/bash");
  EXPECT_EQ(got[0]["env_names"], json({"SECRET_NAME"}));
  json r = got[1];
  EXPECT_EQ(r["action"], "exec");
  EXPECT_EQ(r["sandbox"], "sb1");
  EXPECT_EQ(r["cmd"], "/bin/bash");
  EXPECT_EQ(r["args"], json({"-c", "echo hi"}));
  EXPECT_EQ(r["cwd"], "/tmp");
  EXPECT_EQ(r["user"], "root");
  EXPECT_EQ(r["env_names"], json({"SECRET_NAME"}));
  EXPECT_EQ(r.dump().find("value-not-logged"), std::string::npos);
  EXPECT_EQ(r["pid"], 42);
  EXPECT_EQ(r["stdout_bytes"], 3);
  EXPECT_EQ(r["stdout_sha256"], Sha256Hex("hi\n"));
  EXPECT_EQ(r["stderr_bytes"], 4);
  EXPECT_EQ(r["stderr_sha256"], Sha256Hex("oops"));
  EXPECT_EQ(r["exit_code"], 3);
  EXPECT_EQ(r["outcome"], "ended");
  EXPECT_FALSE(r.contains("error")) << r.dump();
}

TEST(DataPlaneTap, KilledProcessRecordsTheSignal) {
  std::vector<json> got;
  TapRequest req{"sb1", "", "POST", "/process.Process/Start", {}, "", "application/connect+json"};
  auto tap = DataPlaneTap::Create(req, [&](const json& r) { got.push_back(r); });
  tap->OnRequestBody(envd::EncodeEnvelope(R"({"process":{"cmd":"sleep","args":["100"]}})"));
  tap->OnResponseHead(200, false);
  tap->OnResponseBytes(envd::EncodeEnvelope(R"({"event":{"end":{"exitCode":-1,"status":"signal: killed"}}})"));
  tap.reset();  // destroyed without Finish: still one record
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0]["signal"], "killed");
  EXPECT_EQ(got[0]["user"], "default");
  EXPECT_FALSE(got[0].contains("exit_code"));
}

// The agent ends a Start stream whose Connect-Timeout-Ms passed with
// deadline_exceeded and no end event (as envd): the record says so, and the
// relay need not drain for an end that will not come.
TEST(DataPlaneTap, DeadlineExceededRecordsTheKill) {
  std::vector<json> got;
  TapRequest req{"sb1", "", "POST", "/process.Process/Start", {}, "", "application/connect+json"};
  auto tap = DataPlaneTap::Create(req, [&](const json& r) { got.push_back(r); });
  tap->OnRequestBody(envd::EncodeEnvelope(R"({"process":{"cmd":"sleep","args":["100"]}})"));
  tap->OnResponseHead(200, false);
  tap->OnResponseBytes(envd::EncodeEnvelope(R"({"event":{"start":{"pid":7}}})"));
  EXPECT_TRUE(tap->WantsDrain());
  tap->OnResponseBytes(envd::EncodeEndStream(Status(StatusCode::kDeadlineExceeded, "context deadline exceeded")));
  EXPECT_FALSE(tap->WantsDrain());
  tap->Finish();
  ASSERT_EQ(got.size(), 2u);  // exec.start, then exec
  EXPECT_EQ(got[1]["action"], "exec");
  EXPECT_EQ(got[1]["signal"], "killed");
  EXPECT_EQ(got[1]["outcome"], "deadline exceeded");
  EXPECT_FALSE(got[1].contains("error")) << got[1].dump();
}

TEST(DataPlaneTap, HostileStreamsBecomeErrorsNotCrashes) {
  std::vector<json> got;
  TapRequest req{"sb1", "", "POST", "/process.Process/Start", {}, "Basic !!!", ""};
  auto tap = DataPlaneTap::Create(req, [&](const json& r) { got.push_back(r); });
  tap->OnRequestBody(std::string(300 * 1024, 'x'));
  tap->OnResponseHead(200, true);
  tap->OnResponseBytes("zzzz\r\n\xff\xff");
  tap->OnResponseBytes(std::string("\x00\xff\xff\xff\xff", 5));
  tap->Finish();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].contains("error"));
  EXPECT_EQ(got[0]["outcome"], "stream closed before the end");
}

TEST(DataPlaneTap, FileWriteMultipartAndReadRecords) {
  std::vector<json> got;
  TapRequest w{"sb1", "", "POST", "/files", {{"username", "user"}}, "", "multipart/form-data; boundary=XyZ"};
  auto tap = DataPlaneTap::Create(w, [&](const json& r) { got.push_back(r); });
  std::string body =
      "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/home/user/a.txt\"\r\n"
      "Content-Type: application/octet-stream\r\n\r\nhello world\r\n--XyZ--\r\n";
  for (size_t i = 0; i < body.size(); i += 9) tap->OnRequestBody(body.substr(i, 9));
  tap->OnResponseHead(200, false);
  tap->OnResponseBytes("[]");
  tap->Finish();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0]["action"], "file.write");
  ASSERT_EQ(got[0]["files"].size(), 1u);
  EXPECT_EQ(got[0]["files"][0]["path"], "/home/user/a.txt");
  EXPECT_EQ(got[0]["files"][0]["size"], 11);
  EXPECT_EQ(got[0]["files"][0]["sha256"], Sha256Hex("hello world"));
  EXPECT_EQ(got[0]["user"], "user");

  TapRequest r{"sb1", "", "GET", "/files", {{"path", "/etc/hostname"}}, "", ""};
  tap = DataPlaneTap::Create(r, [&](const json& rec) { got.push_back(rec); });
  tap->OnResponseHead(200, true);
  tap->OnResponseBytes(Chunked("file contents"));
  tap->Finish();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1]["action"], "file.read");
  EXPECT_EQ(got[1]["path"], "/etc/hostname");
  EXPECT_EQ(got[1]["size"], 13);
  EXPECT_EQ(got[1]["sha256"], Sha256Hex("file contents"));

  TapRequest c{"sb1", "", "POST", "/files/compose", {}, "Basic dXNlcjo=", "application/json"};
  tap = DataPlaneTap::Create(c, [&](const json& rec) { got.push_back(rec); });
  ASSERT_NE(tap, nullptr);
  tap->OnRequestBody(R"({"source_paths":["p/1","p/2"],"destination":"whole.bin"})");
  tap->OnResponseHead(200, false);
  tap->OnResponseBytes(R"({"path":"/home/user/whole.bin","name":"whole.bin","type":"file"})");
  tap->Finish();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[2]["action"], "file.compose");
  EXPECT_EQ(got[2]["destination"], "whole.bin");
  EXPECT_EQ(got[2]["sources"], json::array({"p/1", "p/2"}));
  EXPECT_EQ(got[2]["status"], 200);

  EXPECT_EQ(DataPlaneTap::Create({"sb1", "", "GET", "/health", {}, "", ""}, [](const json&) {}), nullptr);
}

// The code interpreter's /execute (port 49999): the code's hash and size,
// never the code; output sizes, results and their formats, the error, the
// outcome; a line split anywhere, a huge line and a hostile stream.
TEST(DataPlaneTap, InterpreterExecuteRecord) {
  std::vector<json> got;
  TapRequest req{"sb1", "", "POST", "/execute", {}, "", "application/json", 49999};
  auto tap = DataPlaneTap::Create(req, [&](const json& r) { got.push_back(r); });
  ASSERT_NE(tap, nullptr);
  std::string body = R"({"code":"print('hi')\n1/0","language":"python","env_vars":{"SECRET_NAME":"value-never-kept"}})";
  tap->OnRequestBody(body.substr(0, 10));
  tap->OnRequestBody(body.substr(10));
  tap->OnResponseHead(200, true);
  std::string stream =
      "{\"type\": \"number_of_executions\", \"execution_count\": 4}\n"
      "{\"type\": \"stdout\", \"text\": \"hi\\n\", \"timestamp\": \"t\"}\n"
      "{\"type\": \"stdout\", \"text\": \"" + std::string(2 << 20, 'z') + "\"}\n"
      "{\"type\": \"result\", \"text\": \"1\", \"png\": \"aGk=\", \"chart\": {}, \"extra\": {}, \"is_main_result\": false}\n"
      "{\"type\": \"error\", \"name\": \"ZeroDivisionError\", \"value\": \"" + std::string(1000, 'v') + "\", \"traceback\": \"...\"}\n"
      "{\"type\": \"end_of_execution\"}\n";
  std::string framed = Chunked(stream);
  for (size_t i = 0; i < framed.size(); i += 7777) tap->OnResponseBytes(framed.substr(i, 7777));
  tap->Finish();
  ASSERT_EQ(got.size(), 1u);
  const json& r = got[0];
  EXPECT_EQ(r["action"], "interpreter.execute");
  EXPECT_EQ(r["code_sha256"], Sha256Hex("print('hi')\n1/0"));
  EXPECT_EQ(r["code_bytes"], 15);
  EXPECT_EQ(r["language"], "python");
  EXPECT_EQ(r["env_names"], json::array({"SECRET_NAME"}));
  EXPECT_EQ(r["execution_count"], 4);
  // 3 bytes of text, plus the too-long line counted by its size.
  EXPECT_GT(r["stdout_bytes"].get<uint64_t>(), (2u << 20));
  EXPECT_EQ(r["results"], 1);
  EXPECT_EQ(r["result_formats"], json::array({"chart", "png", "text"}));
  EXPECT_EQ(r["error_name"], "ZeroDivisionError");
  EXPECT_EQ(r["error_value"].get<std::string>().size(), 256u);
  EXPECT_EQ(r["outcome"], "ended");
  EXPECT_EQ(r.dump().find("value-never-kept"), std::string::npos);
  EXPECT_EQ(r.dump().find("print("), std::string::npos);
  EXPECT_FALSE(r.contains("error")) << r.dump();
}

TEST(DataPlaneTap, InterpreterOtherPathsAndPortsAreNotTapped) {
  auto sink = [](const json&) {};
  EXPECT_EQ(DataPlaneTap::Create({"sb", "", "GET", "/contexts", {}, "", "", 49999}, sink), nullptr);
  EXPECT_EQ(DataPlaneTap::Create({"sb", "", "POST", "/execute", {}, "", "", 8080}, sink), nullptr);
  EXPECT_EQ(DataPlaneTap::Create({"sb", "", "POST", "/process.Process/Start", {}, "", "", 8080}, sink), nullptr);
}

TEST(DataPlaneTap, InterpreterCutStreamAndUnparsableRequest) {
  std::vector<json> got;
  TapRequest req{"sb1", "", "POST", "/execute", {}, "", "", 49999};
  auto tap = DataPlaneTap::Create(req, [&](const json& r) { got.push_back(r); });
  tap->OnRequestBody("{not json");
  tap->OnResponseHead(200, false);
  tap->OnResponseBytes("{\"type\": \"stdout\", \"text\": \"a\"}\n\xff\xfe{{{\n{\"type\": \"stdo");
  tap->Finish();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0]["outcome"], "stream closed before the end");
  EXPECT_EQ(got[0]["stdout_bytes"], 1);
  EXPECT_TRUE(got[0].contains("request_sha256"));
  EXPECT_TRUE(got[0].contains("error"));
}

}  // namespace
}  // namespace airlock::audit
