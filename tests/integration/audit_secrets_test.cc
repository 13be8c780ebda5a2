// Secrets and audit against a real daemon and microVM: canary secrets through
// every path (env scope visible in the guest; brokered scope only as a
// placeholder: absent from every process's environment and writable memory
// and from the guest's files), redaction in API errors, daemon logs and the
// audit trail, exec/file records, GET /sandboxes/{id}/audit, and
// `airlock audit verify` locating a tampered record.
#include <gtest/gtest.h>

#include <filesystem>

#include "audit/audit_log.h"
#include "common/hex.h"
#include "tests/integration/daemon.h"

namespace airlock::testing {
namespace {

using nlohmann::json;

// Scans other processes' environ and writable memory and a few directories
// for a needle given XOR-0x5a encoded (so the needle is never in this
// script's argv or source); prints one line per hit, then "scanned N".
constexpr char kScanner[] = R"PY(
import os, re, sys
needle = bytes(b ^ 0x5a for b in bytes.fromhex(sys.argv[1]))
me = os.getpid(); hits = []; n = 0
for p in os.listdir('/proc'):
    if not p.isdigit() or int(p) in (me, os.getppid()): continue
    try:
        if needle in open('/proc/%s/environ' % p, 'rb').read(): hits.append('environ:' + p)
        maps = open('/proc/%s/maps' % p).read().splitlines()
        mem = open('/proc/%s/mem' % p, 'rb', 0)
        for line in maps:
            m = re.match(r'([0-9a-f]+)-([0-9a-f]+) rw', line)
            if not m: continue
            a, b = int(m.group(1), 16), int(m.group(2), 16)
            if b - a > 64 << 20: continue
            try:
                mem.seek(a); data = mem.read(b - a); n += 1
                if needle in data: hits.append('mem:%s:%s' % (p, line.split()[-1] if len(line.split()) > 5 else 'anon'))
            except OSError: pass
    except OSError: pass
for root in ('/etc', '/home', '/root', '/tmp', '/run', '/var/tmp', '/var/log'):
    for d, _, fs in os.walk(root):
        for f in fs:
            path = os.path.join(d, f)
            try:
                if os.path.isfile(path) and os.path.getsize(path) < (16 << 20) and needle in open(path, 'rb').read():
                    hits.append('file:' + path)
            except OSError: pass
for h in hits: print('HIT', h)
print('scanned', n)
)PY";

std::string XorHex(const std::string& s) {
  std::string out;
  for (unsigned char c : s) AppendHexByte(out, c ^ 0x5a);
  return out;
}

TEST(AuditSecretsTest, CanariesNeverLeakAndEveryCallIsAudited) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  const std::string env_canary = "envcanary-" + std::to_string(::getpid()) + "-e91f0c7d2b";
  const std::string broker_canary = "brokercanary-" + std::to_string(::getpid()) + "-5ac8e33f71";
  auto set1 = RunCli({"secret", "--db", dir + "/airlock.db", "set", "ENV_CANARY"}, env_canary + "\n");
  ASSERT_EQ(set1.code, 0) << set1.err;
  auto set2 = RunCli({"secret", "--db", dir + "/airlock.db", "set", "BROKER_CANARY"}, broker_canary);
  ASSERT_EQ(set2.code, 0) << set2.err;
  auto ls = RunCli({"secret", "--db", dir + "/airlock.db", "ls"});
  EXPECT_NE(ls.out.find("BROKER_CANARY"), std::string::npos);
  EXPECT_EQ(ls.out.find(env_canary), std::string::npos);

  TestDaemon d(dir);
  ASSERT_FALSE(d.key().empty());
  // Invalid secret references are 400s that name the problem.
  auto bad = d.Do("POST", "/v2/sandboxes", json{{"secrets", {{"NOPE", {{"scope", "env"}}}}}}.dump());
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->status, 400) << bad->body;
  bad = d.Do("POST", "/v2/sandboxes", json{{"secrets", {{"BROKER_CANARY", {{"scope", "brokered"}}}}}}.dump());
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(bad->body.find("needs hosts"), std::string::npos) << bad->body;

  json body = {{"templateID", "base"},
               {"envVars", {{"PLAIN", "plain-value"}}},
               {"secrets",
                {{"ENV_CANARY", {{"scope", "env"}}},
                 {"BROKER_CANARY", {{"scope", "brokered"}, {"hosts", {"api.example.test"}}, {"env", "API_TOKEN"}}}}}};
  auto created = d.Do("POST", "/v2/sandboxes", body.dump());
  ASSERT_TRUE(created.ok());
  ASSERT_EQ(created->status, 201) << created->body;
  json sb = json::parse(created->body);
  std::string id = sb["sandboxID"], token = sb["envdAccessToken"];

  auto e = d.Run(id, token, "echo \"$ENV_CANARY\"; echo \"$API_TOKEN\"; echo \"$PLAIN\"");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  std::string placeholder;
  {
    std::istringstream s(e->out);
    std::string l1, l2, l3;
    std::getline(s, l1);
    std::getline(s, l2);
    std::getline(s, l3);
    EXPECT_EQ(l1, env_canary);  // scope env: the value, this sandbox only
    EXPECT_EQ(l2.rfind("AIRLOCK_BROKERED_", 0), 0u) << l2;
    EXPECT_EQ(l3, "plain-value");
    placeholder = l2;
  }
  EXPECT_EQ(e->out.find(broker_canary), std::string::npos);

  // The sandbox CA (certificate only) is trusted by the guest's runtimes.
  auto ca = d.Run(id, token,
                  "openssl x509 -in /usr/local/share/ca-certificates/airlock-sandbox.crt -noout -subject; "
                  "grep -c \"$(sed -n 2p /usr/local/share/ca-certificates/airlock-sandbox.crt)\" "
                  "/etc/ssl/certs/ca-certificates.crt; echo \"$NODE_EXTRA_CA_CERTS\"; "
                  "grep -rl 'PRIVATE KEY' /usr/local/share/ca-certificates /etc/ssl/certs || echo no-key; "
                  "python3 -c \"import ssl; print(any('airlock sandbox' in str(c) for c in "
                  "ssl.create_default_context().get_ca_certs()))\"");
  ASSERT_TRUE(ca.ok()) << ca.status().ToString();
  EXPECT_NE(ca->out.find("airlock sandbox " + id), std::string::npos) << ca->out << ca->err;
  EXPECT_NE(ca->out.find("\n1\n/usr/local/share/ca-certificates/airlock-sandbox.crt\nno-key\nTrue\n"),
            std::string::npos)
      << ca->out << ca->err;

  // The brokered value is nowhere in the guest; the env one is (positive control).
  std::string script = "python3 - " + XorHex(broker_canary) + " <<'EOF'\n" + kScanner + "EOF\n";
  auto scan = d.Run(id, token, script, 0, "root");
  ASSERT_TRUE(scan.ok()) << scan.status().ToString();
  EXPECT_EQ(scan->out.find("HIT"), std::string::npos) << scan->out;
  EXPECT_NE(scan->out.find("scanned"), std::string::npos) << scan->out << scan->err;
  script = "python3 - " + XorHex(env_canary) + " <<'EOF'\n" + kScanner + "EOF\n";
  auto control = d.Run(id, token, "sleep 30 & " + script, 0, "root");
  ASSERT_TRUE(control.ok());
  EXPECT_NE(control->out.find("HIT environ:"), std::string::npos) << control->out << control->err;
  EXPECT_NE(control->out.find("HIT mem:"), std::string::npos) << control->out;

  // File write and read through the data plane are audited with their hash.
  std::vector<std::pair<std::string, std::string>> dh = {
      {"E2b-Sandbox-Id", id}, {"X-Access-Token", token}, {"Content-Type", "application/octet-stream"}};
  auto up = d.Do("POST", "/files?path=/tmp/audited.txt&username=user", "audited file body", false, dh);
  ASSERT_TRUE(up.ok());
  EXPECT_EQ(up->status, 200) << up->body;
  auto down = d.Do("GET", "/files?path=/tmp/audited.txt&username=user", "", false,
                   {{"E2b-Sandbox-Id", id}, {"X-Access-Token", token}});
  ASSERT_TRUE(down.ok());
  EXPECT_EQ(down->body, "audited file body");

  // API errors are redacted.
  auto err = d.Do("GET", "/sandboxes/" + env_canary);
  ASSERT_TRUE(err.ok());
  EXPECT_EQ(err->status, 404);
  EXPECT_EQ(err->body.find(env_canary), std::string::npos) << err->body;
  EXPECT_NE(err->body.find("[REDACTED:ENV_CANARY]"), std::string::npos) << err->body;
  auto logs = d.Do("GET", "/v2/sandboxes/" + id + "/logs");
  ASSERT_TRUE(logs.ok());
  EXPECT_EQ(logs->body.find(env_canary), std::string::npos);

  // GET /sandboxes/{id}/audit: the exec with its command line and env names.
  auto au = d.Do("GET", "/sandboxes/" + id + "/audit");
  ASSERT_TRUE(au.ok());
  ASSERT_EQ(au->status, 200) << au->body;
  json recs = json::parse(au->body);
  bool saw_exec = false, saw_env_attach = false, saw_write = false, saw_read = false;
  for (auto& r : recs) {
    std::string a = r.value("action", "");
    if (a == "exec" && r.value("cmd", "") == "/bin/bash" && r["args"].dump().find("$PLAIN") != std::string::npos) {
      saw_exec = true;
      EXPECT_EQ(r["exit_code"], 0);
      EXPECT_EQ(r["stdout_bytes"], e->out.size());
      EXPECT_EQ(r["stdout_sha256"], audit::Sha256Hex(e->out));
    }
    if (a == "secret.attach" && r.value("name", "") == "ENV_CANARY")
      saw_env_attach = r.value("exposed_to_guest", false);
    if (a == "secret.attach" && r.value("name", "") == "BROKER_CANARY") {
      EXPECT_FALSE(r.value("exposed_to_guest", true));
    }
    if (a == "file.write") saw_write = r["files"][0]["sha256"] == audit::Sha256Hex("audited file body");
    if (a == "file.read") saw_read = r.value("sha256", "") == audit::Sha256Hex("audited file body");
  }
  EXPECT_TRUE(saw_exec) << au->body.substr(0, 4000);
  EXPECT_TRUE(saw_env_attach);
  EXPECT_TRUE(saw_write);
  EXPECT_TRUE(saw_read);
  EXPECT_EQ(d.Do("DELETE", "/sandboxes/" + id)->status, 204);

  // Nothing airlock wrote holds a canary, raw or base64.
  std::string audit_all;
  for (auto& f : std::filesystem::directory_iterator(dir + "/audit")) audit_all += Slurp(f.path().string());
  std::string daemon_log = Slurp(dir + "/daemon.log");
  for (const auto& secret : {env_canary, broker_canary}) {
    for (const auto& form : {secret, envd::Base64Encode(secret).substr(0, 16)}) {
      EXPECT_EQ(audit_all.find(form), std::string::npos) << form;
      EXPECT_EQ(daemon_log.find(form), std::string::npos) << form;
      EXPECT_EQ(au->body.find(form), std::string::npos) << form;
    }
  }
  EXPECT_NE(audit_all.find("[REDACTED:ENV_CANARY]"), std::string::npos);  // the 404 call's path

  // The CLI: query, verify, then detect a tampered record and say where.
  auto q = RunCli({"audit", "--dir", dir + "/audit", "--sandbox", id});
  EXPECT_EQ(q.code, 0);
  EXPECT_NE(q.out.find("\"action\":\"exec\""), std::string::npos);
  auto v = RunCli({"audit", "verify", "--dir", dir + "/audit"});
  EXPECT_EQ(v.code, 0) << v.out << v.err;
  EXPECT_NE(v.out.find("chain intact"), std::string::npos);
  std::string file;
  for (auto& f : std::filesystem::directory_iterator(dir + "/audit")) {
    if (f.path().extension() == ".jsonl") file = f.path().string();
  }
  std::string data = Slurp(file);
  size_t pos = data.find("\"action\":\"exec\"");
  ASSERT_NE(pos, std::string::npos);
  data.replace(pos, 15, "\"action\":\"noop\"");
  size_t line = std::count(data.begin(), data.begin() + static_cast<long>(pos), '\n') + 1;
  { std::ofstream(file, std::ios::trunc | std::ios::binary) << data; }
  v = RunCli({"audit", "verify", "--dir", dir + "/audit"});
  EXPECT_EQ(v.code, 1) << v.out;
  EXPECT_NE(v.out.find(std::filesystem::path(file).filename().string() + ":" + std::to_string(line) + ":"),
            std::string::npos)
      << v.out;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace airlock::testing
