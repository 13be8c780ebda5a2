// Tests for src/net. The first group needs nothing; the "Root" group creates
// real namespaces and skips unless run as root with `ip netns` and `nft`.
// All traffic stays inside namespaces the test creates (198.18.0.0/15 and
// 169.254.0.20/30 only).
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <thread>

#include "common/fd.h"
#include "common/subprocess.h"
#include "net/address_pool.h"
#include "common/checklist.h"
#include "net/doctor.h"
#include "net/names.h"
#include "net/nft_rules.h"
#include "net/sandbox_network.h"

#include "tests/unit/scoped_dir.h"

namespace airlock::net {
namespace {

// Tests lease from their own corner of the benchmark range, away from where a
// real state dir's pool (default 198.18.0.0/15, lowest pairs first) allocates,
// so a test netns never shadows a live sandbox's address. ctest runs these
// cases in parallel, each in its own process with its own pool directory, so
// each case gets its own /27 (16 pairs): two cases leasing the same pair would
// put the same address on two host veths, and the host's route would reach
// only one of them (a failure seen in CI).
std::string TestPoolCidr(int slot) { return "198.19.240." + std::to_string(slot * 32) + "/27"; }

namespace fs = std::filesystem;

using test_util::ScopedDir;
std::string TempDir() { return test_util::MakeTempDir("airlock-net-test"); }

TEST(NetNames, VethNameFitsIfnamsiz) {
  EXPECT_EQ(HostVethName("abc"), "alhabc");
  std::string long_id = "i0123456789abcdefghijklmnop";
  EXPECT_LE(HostVethName(long_id).size(), 15u);
  EXPECT_NE(HostVethName(long_id), HostVethName(long_id + "x"));
  EXPECT_EQ(HostVethName(long_id).rfind("alh", 0), 0u);
  EXPECT_TRUE(ValidateSandboxId("sbx-1_a").ok());
  EXPECT_FALSE(ValidateSandboxId("").ok());
  EXPECT_FALSE(ValidateSandboxId("../x").ok());
  EXPECT_FALSE(ValidateSandboxId("-x").ok());
  EXPECT_FALSE(ValidateSandboxId(std::string(64, 'a')).ok());
}

TEST(NetCidr, Parse) {
  auto c = Cidr::Parse("198.18.0.0/15");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(Ipv4ToString(c->base), "198.18.0.0");
  EXPECT_EQ(c->size(), 131072u);
  EXPECT_EQ(Ipv4ToString(Cidr::Parse("198.19.3.7/24")->base), "198.19.3.0");
  EXPECT_FALSE(Cidr::Parse("198.18.0.0").ok());
  EXPECT_FALSE(Cidr::Parse("198.18.0.0/32").ok());
  EXPECT_FALSE(Cidr::Parse("198.18.0.0/1x").ok());
  EXPECT_FALSE(Cidr::Parse("300.18.0.0/15").ok());
}

TEST(NetNft, RulesetShape) {
  std::string r = NftRuleset("198.18.0.1");
  EXPECT_NE(r.find("table inet airlock"), std::string::npos);
  EXPECT_NE(r.find("ip daddr 198.18.0.1 tcp dport 49983 dnat ip to 169.254.0.21:49983"), std::string::npos);
  EXPECT_NE(r.find("snat ip to 169.254.0.22"), std::string::npos);
  EXPECT_NE(r.find("type filter hook forward priority filter; policy drop;"), std::string::npos);
  EXPECT_NE(r.find("type filter hook input priority filter; policy drop;"), std::string::npos);
}

TEST(NetNft, ExposedPortsAreOneSetAndOneRule) {
  std::string r = NftRuleset("198.18.0.1", std::nullopt, 7);
  EXPECT_NE(r.find("set exposed_ports { type inet_service; size 7; }"), std::string::npos) << r;
  EXPECT_NE(r.find("iifname \"eth0\" ip daddr 198.18.0.1 tcp dport @exposed_ports dnat ip to 169.254.0.21\n"),
            std::string::npos)
      << r;
  EXPECT_EQ(NftExposePorts({8080, 3000}), "add element inet airlock exposed_ports { 8080, 3000 }\n");
  EXPECT_EQ(NftExposePorts({}), "");
  std::string m = NftExposedSetMigration("198.18.0.1", 32);
  EXPECT_NE(m.find("add set inet airlock exposed_ports { type inet_service; size 32; }"), std::string::npos) << m;
  EXPECT_NE(m.find("add rule inet airlock prerouting iifname \"eth0\" ip daddr 198.18.0.1 tcp dport @exposed_ports"),
            std::string::npos)
      << m;
}

TEST(NetNft, AuditLogBeforeEveryGuestDrop) {
  // Without egress nothing reads NFLOG: no log statements.
  EXPECT_EQ(NftRuleset("198.18.0.1").find(" log "), std::string::npos);
  std::string r = NftRuleset("198.18.0.1", NftEgress{"198.18.0.0", 49153, 49180, 49443});
  const std::string log = "limit name \"audit_log\" log group 7 prefix ";
  EXPECT_NE(r.find("limit audit_log { rate 50/second burst 100 packets }"), std::string::npos) << r;
  // Each logged drop: the log rule, then the same match dropping (so over the limit it still drops).
  auto log_then_drop = [&](const std::string& match, const std::string& prefix) {
    size_t l = r.find(match + " " + log + "\"" + prefix + "\"\n");
    size_t d = r.find(match + " drop\n", l);
    EXPECT_NE(l, std::string::npos) << prefix << "\n" << r;
    EXPECT_NE(d, std::string::npos) << prefix;
  };
  log_then_drop("    iifname \"tap0\" ip daddr @forbidden", "deny:forbidden-range");
  log_then_drop("    iifname \"tap0\"", "deny:default-deny");
  log_then_drop("    iifname \"tap0\"", "deny:gateway");
  log_then_drop("    meta protocol ip6", "deny:ipv6");
  // Over the budget: one sample a second, marked rate-limit, before each drop.
  EXPECT_NE(r.find("    iifname \"tap0\" limit name \"audit_log_over\" limit name \"audit_log_note\" log group 7 "
                   "prefix \"deny:rate-limit\"\n    iifname \"tap0\" drop\n"),
            std::string::npos)
      << r;
  // default-deny is the forward chain's last rule, after the CIDR jump and established flows.
  size_t fwd = r.find("chain forward");
  size_t jump = r.find("jump egress_cidr_fwd", fwd);
  size_t dd = r.find("deny:default-deny", fwd);
  EXPECT_LT(jump, dd);
  EXPECT_LT(dd, r.find("chain input"));
  EXPECT_NE(r.find("type filter hook ingress device \"tap0\""), std::string::npos);
  EXPECT_NE(r.find("ip6 daddr ff02::/16 drop"), std::string::npos);
}

TEST(NetNft, CidrUpdateLogsDecisionsWithTheRule) {
  std::string u = NftEgressCidrUpdate({{"!203.0.113.0/24", 22, false, "203.0.113.0/24:22"},
                                       {"203.0.113.30/32", 8080, true, ""},
                                       {"0.0.0.0/0", std::nullopt, false, "internet"}});
  EXPECT_EQ(u.rfind("add limit inet airlock audit_log {", 0), 0u) << u;
  const std::string fwd = "add rule inet airlock egress_cidr_fwd ";
  const std::string over = " limit name \"audit_log_over\" limit name \"audit_log_note\" log group 7 prefix ";
  EXPECT_NE(u.find("add limit inet airlock audit_log_over { rate over 50/second burst 100 packets }\n"),
            std::string::npos);
  EXPECT_NE(u.find(fwd +
                   "ip daddr 203.0.113.0/24 tcp dport 22 limit name \"audit_log\" log group 7 prefix "
                   "\"deny:203.0.113.0/24:22\"\n" +
                   fwd + "ip daddr 203.0.113.0/24 tcp dport 22" + over + "\"deny:rate-limit\"\n" + fwd +
                   "ip daddr 203.0.113.0/24 tcp dport 22 drop\n"),
            std::string::npos)
      << u;
  EXPECT_NE(u.find(fwd +
                   "ip daddr 203.0.113.30/32 tcp dport 8080 limit name \"audit_log\" log group 7 prefix "
                   "\"allow:203.0.113.30/32:8080\"\n" +
                   fwd + "ip daddr 203.0.113.30/32 tcp dport 8080" + over + "\"allow:rate-limit\"\n" + fwd +
                   "ip daddr 203.0.113.30/32 tcp dport 8080 accept\n"),
            std::string::npos)
      << u;
  EXPECT_NE(u.find("prefix \"allow:internet\"\n"), std::string::npos) << u;
  EXPECT_NE(u.find("prefix \"allow:rate-limit\"\n" + fwd + "ip daddr 0.0.0.0/0 meta l4proto tcp accept"),
            std::string::npos)
      << u;
}

TEST(NetNft, CidrUpdateDropsHostAddressesBeforeAnyAllow) {
  const std::string fwd = "add rule inet airlock egress_cidr_fwd ";
  std::string u =
      NftEgressCidrUpdate({{"0.0.0.0/0", std::nullopt, false, "internet"}}, {"203.0.113.5", "198.51.100.0/24"});
  EXPECT_NE(u.find("add set inet airlock host_addrs { type ipv4_addr; flags interval; }\n"
                   "flush set inet airlock host_addrs\n"
                   "add element inet airlock host_addrs { 203.0.113.5, 198.51.100.0/24 }\n"),
            std::string::npos)
      << u;
  size_t deny = u.find(fwd + "ip daddr @host_addrs limit name \"audit_log\" log group 7 prefix \"deny:host-address\"");
  size_t drop = u.find(fwd + "ip daddr @host_addrs drop\n");
  size_t allow = u.find("prefix \"allow:internet\"");
  ASSERT_NE(deny, std::string::npos) << u;
  ASSERT_NE(drop, std::string::npos) << u;
  ASSERT_NE(allow, std::string::npos) << u;
  EXPECT_LT(deny, drop);
  EXPECT_LT(drop, allow);
  // No host addresses: the set is emptied, the drop stays.
  u = NftEgressCidrUpdate({}, {});
  EXPECT_NE(u.find("flush set inet airlock host_addrs\n"), std::string::npos) << u;
  EXPECT_EQ(u.find("add element"), std::string::npos) << u;
  EXPECT_NE(u.find(fwd + "ip daddr @host_addrs drop\n"), std::string::npos) << u;
}

TEST(NetNft, LogPrefixIsBoundedAndQuoteFree) {
  EXPECT_EQ(NftLogPrefix("deny", "default-deny"), "deny:default-deny");
  EXPECT_EQ(NftLogPrefix("allow", "a\"b c;d"), "allow:a_b_c_d");
  std::string p = NftLogPrefix("allow", std::string(200, '1'));
  EXPECT_EQ(p.size(), 63u);
}

TEST(NetChecklist, FailureUndoesInReverse) {
  std::vector<std::string> log;
  Checklist c;
  ASSERT_TRUE(c.Do("a", [&] { log.push_back("do a"); return OkStatus(); },
                   [&] { log.push_back("undo a"); return OkStatus(); }).ok());
  ASSERT_TRUE(c.Do("b", [&] { log.push_back("do b"); return OkStatus(); },
                   [&] { log.push_back("undo b"); return OkStatus(); }).ok());
  Status st = c.Do("c", [&] { return Internal("boom"); }, nullptr);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("c: boom"), std::string::npos) << st.ToString();
  EXPECT_EQ(log, (std::vector<std::string>{"do a", "do b", "undo b", "undo a"}));
  EXPECT_TRUE(c.done().empty());
}

TEST(NetPool, AcquireReleaseAndExhaust) {
  ScopedDir scoped_dir{TempDir()};
  const std::string& dir = scoped_dir.path;
  auto pool = AddressPool::Create(dir, "198.19.236.0/30");  // two /31 pairs
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  auto a = pool->Acquire("a");
  auto b = pool->Acquire("b");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->host_str(), "198.19.236.0");
  EXPECT_EQ(a->netns_str(), "198.19.236.1");
  EXPECT_EQ(b->host_str(), "198.19.236.2");
  EXPECT_EQ(pool->Acquire("a").status().code(), StatusCode::kAlreadyExists);
  auto c = pool->Acquire("c");
  EXPECT_EQ(c.status().code(), StatusCode::kResourceExhausted);  // owners alive: nothing to reclaim
  ASSERT_TRUE(pool->Release(*a).ok());
  ASSERT_TRUE(pool->Release(*a).ok());  // idempotent
  auto c2 = pool->Acquire("c");
  ASSERT_TRUE(c2.ok());
  EXPECT_EQ(c2->host_str(), "198.19.236.0");
  auto found = pool->Find("c");
  ASSERT_TRUE(found.ok() && found->has_value());
  EXPECT_EQ((*found)->path, c2->path);
  fs::remove_all(dir);
}

TEST(NetPool, ConcurrentProcessesGetDistinctPairs) {
  ScopedDir scoped_dir{TempDir()};
  const std::string& dir = scoped_dir.path;
  const int kProcs = 12;
  std::vector<pid_t> pids;
  for (int i = 0; i < kProcs; ++i) {
    pid_t p = ::fork();
    ASSERT_GE(p, 0);
    if (p == 0) {
      auto pool = AddressPool::Create(dir, "198.19.237.0/24");
      if (!pool.ok()) ::_exit(2);
      auto l = pool->Acquire("p" + std::to_string(i));
      ::_exit(l.ok() ? 0 : 1);
    }
    pids.push_back(p);
  }
  for (pid_t p : pids) {
    int ws = 0;
    ::waitpid(p, &ws, 0);
    EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  }
  auto pool = AddressPool::Create(dir, "198.19.237.0/24");
  auto all = pool->List();
  ASSERT_TRUE(all.ok());
  std::set<uint32_t> ips;
  for (auto& [l, o] : *all) ips.insert(l.host_ip);
  EXPECT_EQ(ips.size(), static_cast<size_t>(kProcs));
  // Every owner has exited and no netns al-p<i> exists: all stale.
  auto reclaimed = pool->Reclaim();
  ASSERT_TRUE(reclaimed.ok());
  EXPECT_EQ(reclaimed->size(), static_cast<size_t>(kProcs));
  EXPECT_TRUE(pool->List()->empty());
  fs::remove_all(dir);
}

TEST(NetPool, FullPoolReclaimsStaleLease) {
  ScopedDir scoped_dir{TempDir()};
  const std::string& dir = scoped_dir.path;
  pid_t p = ::fork();
  if (p == 0) {
    auto pool = AddressPool::Create(dir, "198.19.236.4/31");
    ::_exit(pool.ok() && pool->Acquire("dead").ok() ? 0 : 1);
  }
  int ws = 0;
  ::waitpid(p, &ws, 0);
  ASSERT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  auto pool = AddressPool::Create(dir, "198.19.236.4/31");
  auto l = pool->Acquire("alive");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->host_str(), "198.19.236.4");
  fs::remove_all(dir);
}

// ---- root-only: real namespaces -------------------------------------------

bool HaveNetns(std::string* why) {
  if (::geteuid() != 0) {
    *why = "needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN)";
    return false;
  }
  auto r = Run({"ip", "netns", "list"});
  if (!r.ok() || !r->status.success()) {
    *why = "`ip netns` unavailable";
    return false;
  }
  if (!FindExecutable("nft").ok()) {
    *why = "nft not installed";
    return false;
  }
  return true;
}

#define REQUIRE_NETNS()                          \
  do {                                           \
    std::string why;                             \
    if (!HaveNetns(&why)) GTEST_SKIP() << why;   \
  } while (0)

std::string Sh(const std::vector<std::string>& argv) {
  auto r = Run(argv);
  return r.ok() ? r->out + r->err : "";
}

bool LinkExists(const std::string& name) {
  return Sh({"ip", "-o", "link", "show"}).find(" " + name + ":") != std::string::npos ||
         Sh({"ip", "-o", "link", "show"}).find(" " + name + "@") != std::string::npos;
}

std::string TestId(const std::string& tag) { return "t" + std::to_string(::getpid()) + tag; }

TEST(NetRoot, CreateDestroyLeavesNothing) {
  REQUIRE_NETNS();
  ScopedDir scoped_dir{TempDir()};
  const std::string& dir = scoped_dir.path;
  auto pool = AddressPool::Create(dir, TestPoolCidr(1));
  ASSERT_TRUE(pool.ok());
  std::string id = TestId("a");
  auto t0 = std::chrono::steady_clock::now();
  auto n = SandboxNetwork::Create(id, *pool);
  auto t1 = std::chrono::steady_clock::now();
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  std::cerr << "network create took "
            << std::chrono::duration_cast<std::chrono::milliseconds>(t1 - t0).count() << " ms\n";
  EXPECT_TRUE(NetnsExists("al-" + id));
  EXPECT_TRUE(LinkExists((*n)->host_veth()));
  EXPECT_GE((*n)->netns_fd(), 0);
  EXPECT_EQ((*n)->tap_name(), "tap0");
  EXPECT_EQ((*n)->agent_endpoint(), (*n)->netns_ip() + ":49983");
  std::string inside = Sh({"ip", "-n", "al-" + id, "-o", "addr"});
  EXPECT_NE(inside.find("169.254.0.22/30"), std::string::npos) << inside;
  EXPECT_NE(inside.find((*n)->netns_ip() + "/31"), std::string::npos) << inside;
  EXPECT_NE(Sh({"ip", "netns", "exec", "al-" + id, "nft", "list", "tables"}).find("inet airlock"),
            std::string::npos);
  EXPECT_EQ(Sh({"ip", "netns", "exec", "al-" + id, "sysctl", "-n", "net.ipv4.ip_forward"}), "1\n");
  ASSERT_TRUE((*n)->ExposeTcpPorts({8080, 3000}).ok());
  ASSERT_TRUE((*n)->ExposeTcpPorts({8080}).ok());  // already there: fine
  std::string set = Sh({"ip", "netns", "exec", "al-" + id, "nft", "list", "set", "inet", "airlock", "exposed_ports"});
  EXPECT_NE(set.find("3000, 8080"), std::string::npos) << set;
  EXPECT_NE(Sh({"ip", "netns", "exec", "al-" + id, "nft", "list", "chain", "inet", "airlock", "prerouting"})
                .find("dport @exposed_ports dnat ip to 169.254.0.21"),
            std::string::npos);
  std::string veth = (*n)->host_veth();
  ASSERT_TRUE((*n)->Destroy().ok());
  ASSERT_TRUE((*n)->Destroy().ok());  // idempotent
  EXPECT_FALSE(NetnsExists("al-" + id));
  EXPECT_EQ(Sh({"ip", "netns", "list"}).find("al-" + id), std::string::npos);
  EXPECT_FALSE(LinkExists(veth));
  EXPECT_TRUE(pool->List()->empty());
  EXPECT_FALSE(fs::exists(dir + "/net/al-" + id + ".nft"));
  fs::remove_all(dir);
}

TEST(NetRoot, TwoNetworksDifferentAddresses) {
  REQUIRE_NETNS();
  ScopedDir scoped_dir{TempDir()};
  const std::string& dir = scoped_dir.path;
  auto pool = AddressPool::Create(dir, TestPoolCidr(2));
  auto a = SandboxNetwork::Create(TestId("x"), *pool);
  auto b = SandboxNetwork::Create(TestId("y"), *pool);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString() << b.status().ToString();
  EXPECT_NE((*a)->host_ip(), (*b)->host_ip());
  EXPECT_NE((*a)->netns_ip(), (*b)->netns_ip());
  EXPECT_NE((*a)->host_veth(), (*b)->host_veth());
  a->reset();  // destructor destroys
  b->reset();
  EXPECT_FALSE(NetnsExists("al-" + TestId("x")));
  EXPECT_TRUE(pool->List()->empty());
  fs::remove_all(dir);
}

TEST(NetRoot, FailedStepRollsBack) {
  REQUIRE_NETNS();
  ScopedDir scoped_dir{TempDir()};
  const std::string& dir = scoped_dir.path;
  auto pool = AddressPool::Create(dir, TestPoolCidr(3));
  std::string id = TestId("f");
  // A netns of that name already exists: step "netns" fails, the lease is undone.
  ASSERT_TRUE(RunChecked({"ip", "netns", "add", "al-" + id}).ok());
  auto n = SandboxNetwork::Create(id, *pool);
  EXPECT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("netns"), std::string::npos) << n.status().ToString();
  EXPECT_TRUE(pool->List()->empty());
  EXPECT_TRUE(NetnsExists("al-" + id));  // not ours: left alone
  (void)RunChecked({"ip", "netns", "del", "al-" + id});
  fs::remove_all(dir);
}

// Replaces tap0 with a veth pair named tap0 whose other end lives in a
// "guest" netns holding 169.254.0.21/30 (no default route), i.e. what a VMM
// would give us, without a VM.
class FakeGuest {
 public:
  Status Start(SandboxNetwork& n) {
    guest_ns_ = "airlock-test-g" + std::to_string(::getpid());
    RETURN_IF_ERROR(Ok(RunChecked({"ip", "netns", "add", guest_ns_})));
    const std::string ns = n.netns_name();
    RETURN_IF_ERROR(Ok(RunChecked({"ip", "-n", ns, "link", "del", "tap0"})));
    RETURN_IF_ERROR(Ok(RunChecked({"ip", "-n", ns, "link", "add", "tap0", "type", "veth", "peer", "name", "eth0",
                                   "netns", guest_ns_})));
    RETURN_IF_ERROR(Ok(RunChecked({"ip", "-n", ns, "addr", "add", "169.254.0.22/30", "dev", "tap0"})));
    RETURN_IF_ERROR(Ok(RunChecked({"ip", "-n", ns, "link", "set", "tap0", "up"})));
    RETURN_IF_ERROR(Ok(RunChecked({"ip", "-n", guest_ns_, "addr", "add", "169.254.0.21/30", "dev", "eth0"})));
    RETURN_IF_ERROR(Ok(RunChecked({"ip", "-n", guest_ns_, "link", "set", "eth0", "up"})));
    RETURN_IF_ERROR(Ok(RunChecked({"ip", "-n", guest_ns_, "link", "set", "lo", "up"})));
    fd_.Reset(::open(("/run/netns/" + guest_ns_).c_str(), O_RDONLY | O_CLOEXEC));
    return fd_ ? OkStatus() : ErrnoError("open guest netns");
  }
  ~FakeGuest() {
    fd_.Reset();
    if (!guest_ns_.empty()) (void)Run({"ip", "netns", "del", guest_ns_});
  }
  // A socket created inside the guest netns (setns in a helper thread).
  UniqueFd Socket() {
    int s = -1;
    std::thread([&] {
      if (::setns(fd_.get(), CLONE_NEWNET) == 0) s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    }).join();
    return UniqueFd(s);
  }

 private:
  static Status Ok(const StatusOr<std::string>& r) { return r.ok() ? OkStatus() : r.status(); }
  std::string guest_ns_;
  UniqueFd fd_;
};

sockaddr_in Addr(const std::string& ip, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  ::inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  return a;
}

// Non-blocking connect with a timeout; true when connected.
bool ConnectWithin(int s, const sockaddr_in& a, int ms) {
  int fl = ::fcntl(s, F_GETFL);
  ::fcntl(s, F_SETFL, fl | O_NONBLOCK);
  int r = ::connect(s, reinterpret_cast<const sockaddr*>(&a), sizeof(a));
  if (r != 0 && errno != EINPROGRESS) return false;
  pollfd p{s, POLLOUT, 0};
  if (r != 0 && ::poll(&p, 1, ms) != 1) return false;
  int err = 0;
  socklen_t len = sizeof(err);
  ::getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
  ::fcntl(s, F_SETFL, fl);
  return err == 0;
}

TEST(NetRoot, HostReachesGuestAgentGuestReachesNothing) {
  REQUIRE_NETNS();
  ScopedDir scoped_dir{TempDir()};
  const std::string& dir = scoped_dir.path;
  auto pool = AddressPool::Create(dir, TestPoolCidr(4));
  auto n = SandboxNetwork::Create(TestId("d"), *pool);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  FakeGuest guest;
  Status gs = guest.Start(**n);
  ASSERT_TRUE(gs.ok()) << gs.ToString();

  // "Agent" listening on 169.254.0.21:49983 in the guest.
  UniqueFd lsock = guest.Socket();
  ASSERT_TRUE(lsock.valid());
  int one = 1;
  ::setsockopt(lsock.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in la = Addr("169.254.0.21", 49983);
  ASSERT_EQ(::bind(lsock.get(), reinterpret_cast<sockaddr*>(&la), sizeof(la)), 0) << strerror(errno);
  ASSERT_EQ(::listen(lsock.get(), 4), 0);

  // Host (root ns) → agent_endpoint.
  UniqueFd c(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(ConnectWithin(c.get(), Addr((*n)->netns_ip(), 49983), 3000)) << "host could not reach guest";
  sockaddr_in peer{};
  socklen_t plen = sizeof(peer);
  UniqueFd acc(::accept4(lsock.get(), reinterpret_cast<sockaddr*>(&peer), &plen, SOCK_CLOEXEC));
  ASSERT_TRUE(acc.valid());
  char ip[INET_ADDRSTRLEN];
  ::inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof(ip));
  EXPECT_STREQ(ip, "169.254.0.22");  // SNAT: the guest sees the gateway
  ASSERT_EQ(::write(c.get(), "ping", 4), 4);
  char buf[8] = {};
  ASSERT_EQ(::read(acc.get(), buf, 4), 4);
  EXPECT_STREQ(buf, "ping");
  ASSERT_EQ(::write(acc.get(), "pong", 4), 4);
  ASSERT_EQ(::read(c.get(), buf, 4), 4);
  auto t1 = std::chrono::steady_clock::now();
  EXPECT_EQ(std::string(buf, 4), "pong");
  std::cerr << "connect+round trip host→guest: "
            << std::chrono::duration_cast<std::chrono::microseconds>(t1 - t0).count() << " us\n";

  // A port that is not exposed: nothing.
  UniqueFd c2(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_FALSE(ConnectWithin(c2.get(), Addr((*n)->netns_ip(), 22), 300));

  // Guest → host veth address, guest → netns gateway, guest → elsewhere: all dropped.
  UniqueFd hl(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in ha = Addr((*n)->host_ip(), 0);
  ASSERT_EQ(::bind(hl.get(), reinterpret_cast<sockaddr*>(&ha), sizeof(ha)), 0) << strerror(errno);
  ASSERT_EQ(::listen(hl.get(), 4), 0);
  socklen_t hlen = sizeof(ha);
  ::getsockname(hl.get(), reinterpret_cast<sockaddr*>(&ha), &hlen);
  for (const auto& [dst, port] : std::vector<std::pair<std::string, int>>{
           {(*n)->host_ip(), ntohs(ha.sin_port)}, {"169.254.0.22", 49983}, {(*n)->netns_ip(), 49983}}) {
    UniqueFd g = guest.Socket();
    EXPECT_FALSE(ConnectWithin(g.get(), Addr(dst, port), 500)) << "guest reached " << dst << ":" << port;
  }
  // Even with a default route in the guest, forwarding to the host is dropped.
  (void)airlock::Run({"ip", "netns", "exec", "airlock-test-g" + std::to_string(::getpid()), "ip", "route", "add", "default",
             "via", "169.254.0.22"});
  {
    UniqueFd g = guest.Socket();
    EXPECT_FALSE(ConnectWithin(g.get(), Addr((*n)->host_ip(), ntohs(ha.sin_port)), 500));
  }
  n->reset();
  fs::remove_all(dir);
}

// A child process creates a network in `root` (leases tagged `owner`) and
// dies without cleaning up.
void LeaveOrphanNetwork(const std::string& root, const std::string& id, const std::string& owner) {
  pid_t p = ::fork();
  if (p == 0) {
    auto pool = AddressPool::Create(root, TestPoolCidr(5), owner);
    if (!pool.ok()) ::_exit(1);
    auto n = SandboxNetwork::Create(id, *pool);
    if (!n.ok()) ::_exit(1);
    (*n)->Release();
    ::_exit(0);
  }
  int ws = 0;
  ::waitpid(p, &ws, 0);
  ASSERT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  ASSERT_TRUE(NetnsExists("al-" + id));
}

// Issue 11 item 3: clean-up touches only what its own leases name, never a
// bystander's network (another lease root: another daemon or test) nor one
// leased by another registry.
TEST(NetRoot, CleanupLeftoversTouchesOnlyItsOwnLeases) {
  REQUIRE_NETNS();
  ScopedDir scoped_dir{TempDir()}, other_root{TempDir()};
  const std::string& dir = scoped_dir.path;
  std::string orphan = TestId("o"), bystander = TestId("b"), tagged = TestId("t");
  LeaveOrphanNetwork(dir, orphan, "");
  LeaveOrphanNetwork(other_root.path, bystander, "");
  LeaveOrphanNetwork(dir, tagged, "/var/lib/other/airlock.db");
  // A live network of ours must survive the cleanup.
  auto pool = AddressPool::Create(dir, TestPoolCidr(6));
  auto live = SandboxNetwork::Create(TestId("l"), *pool);
  ASSERT_TRUE(live.ok());
  auto removed = CleanupLeftovers(dir, "/var/lib/mine/airlock.db");
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_FALSE(NetnsExists("al-" + orphan));
  EXPECT_FALSE(LinkExists(HostVethName(orphan)));
  EXPECT_TRUE(NetnsExists("al-" + bystander)) << "another lease root's network was removed";
  EXPECT_TRUE(LinkExists(HostVethName(bystander)));
  EXPECT_TRUE(NetnsExists("al-" + tagged)) << "another registry's network was removed";
  EXPECT_TRUE(NetnsExists("al-" + TestId("l")));
  EXPECT_EQ(pool->List()->size(), 2u);  // live + tagged
  // Their owners clean up their own.
  ASSERT_TRUE(CleanupLeftovers(dir, "/var/lib/other/airlock.db").ok());
  EXPECT_FALSE(NetnsExists("al-" + tagged));
  ASSERT_TRUE(CleanupLeftovers(other_root.path).ok());
  EXPECT_FALSE(NetnsExists("al-" + bystander));
  EXPECT_FALSE(LinkExists(HostVethName(bystander)));
  EXPECT_EQ(pool->List()->size(), 1u);
  live->reset();
  EXPECT_TRUE(pool->List()->empty());
  fs::remove_all(dir);
}

TEST(NetRoot, AdoptThenDestroy) {
  REQUIRE_NETNS();
  ScopedDir scoped_dir{TempDir()};
  const std::string& dir = scoped_dir.path;
  auto pool = AddressPool::Create(dir, TestPoolCidr(7));
  std::string id = TestId("r");
  auto n = SandboxNetwork::Create(id, *pool);
  ASSERT_TRUE(n.ok());
  std::string ip = (*n)->netns_ip();
  (*n)->Release();
  n->reset();
  auto a = SandboxNetwork::Adopt(id, *pool);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ((*a)->netns_ip(), ip);
  ASSERT_TRUE((*a)->Destroy().ok());
  EXPECT_FALSE(NetnsExists("al-" + id));
  EXPECT_FALSE(LinkExists(HostVethName(id)));
  EXPECT_TRUE(pool->List()->empty());
  fs::remove_all(dir);
}

TEST(NetRoot, DoctorChecks) {
  auto checks = NetworkDoctorChecks();
  ASSERT_FALSE(checks.empty());
  for (const auto& c : checks) {
    std::cerr << (c.ok ? "[ok]   " : "[FAIL] ") << c.name << ": " << c.detail << "\n";
    if (::geteuid() == 0) {
      EXPECT_TRUE(c.ok) << c.name << ": " << c.detail;
    }
  }
  EXPECT_EQ(Sh({"ip", "netns", "list"}).find("airlock-doctor"), std::string::npos);
}

}  // namespace
}  // namespace airlock::net
