// The cluster registry (src/cluster/cluster_registry.h) against a real
// PostgreSQL: Debian's server, started here in a temp directory on a Unix
// socket only (no network). Skips without root (the server runs as user
// postgres) or without the server package.
#include <gtest/gtest.h>
#include <pwd.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <set>
#include <thread>

#include "cluster/cluster_registry.h"
#include "cluster/secret_replica.h"
#include "common/subprocess.h"
#include "secrets/sealed.h"
#include "secrets/secret_store.h"
#include "tests/unit/scoped_dir.h"
#include "tests/wait_for.h"

namespace airlock::cluster {
namespace {

namespace fs = std::filesystem;

std::string PgBin() {
  std::error_code ec;
  std::string best;
  for (const auto& e : fs::directory_iterator("/usr/lib/postgresql", ec)) {
    if (fs::exists(e.path() / "bin/postgres") && e.path().string() > best) best = e.path().string();
  }
  return best.empty() ? "" : best + "/bin";
}

class ClusterRegistryTest : public ::testing::Test {
 protected:
  // The node's claim of a placement's reservation (as a create carrying its token does).
  int64_t Claim(const Placement& p) {
    auto c = reg_->ClaimReservation(p.node, p.token, "");
    EXPECT_TRUE(c.ok()) << c.status().message();
    return c.ok() ? *c : 0;
  }
  static void SetUpTestSuite() {
    bin_ = PgBin();
    passwd* pw = ::getpwnam("postgres");
    if (::geteuid() != 0 || bin_.empty() || !pw) return;
    char tmpl[] = "/tmp/airlock-pg-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    ASSERT_EQ(::chown(dir_.c_str(), pw->pw_uid, pw->pw_gid), 0);
    const std::vector<std::string> as_pg = {"setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups"};
    auto argv = as_pg;
    for (std::string a : {bin_ + "/initdb", std::string("-D"), dir_ + "/data", std::string("--auth=trust"),
                          std::string("-U"), std::string("postgres"), std::string("--no-sync")})
      argv.push_back(a);
    auto init = airlock::Run(argv);
    ASSERT_TRUE(init.ok() && init->status.success()) << (init.ok() ? init->err : init.status().message());
    argv = as_pg;
    for (std::string a : {bin_ + "/postgres", std::string("-D"), dir_ + "/data", std::string("-k"), dir_,
                          std::string("-c"), std::string("listen_addresses="), std::string("-c"), std::string("fsync=off")})
      argv.push_back(a);
    SpawnOptions so;
    so.argv = argv;
    so.stdout_to_devnull = so.stderr_to_devnull = true;
    auto child = Spawn(so);
    ASSERT_TRUE(child.ok()) << child.status().message();
    server_ = new Child(std::move(*child));
    url_ = "postgresql:///postgres?host=" + dir_ + "&user=postgres";
    ASSERT_TRUE(WaitFor([] { return PgConn::Connect(url_).ok(); },
                        std::chrono::steady_clock::now() + std::chrono::seconds(30)))
        << "postgres did not start";
  }
  static void TearDownTestSuite() {
    if (server_) {
      (void)server_->Signal(SIGINT);
      (void)server_->WaitFor(std::chrono::seconds(30));
      delete server_;
      server_ = nullptr;
    }
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  void SetUp() override {
    if (url_.empty()) GTEST_SKIP() << "needs root and Debian's postgresql (scripts/setup installs it)";
    auto r = ClusterRegistry::Open(url_, 4);
    ASSERT_TRUE(r.ok()) << r.status().message();
    reg_ = std::move(*r);
    // Each test starts from an empty registry (the schema stays).
    ASSERT_TRUE(reg_->pool()
                    .Exec("TRUNCATE nodes, node_templates, sandboxes, api_keys, template_bundles, node_artefacts, "
                          "artefact_grants, cluster_secrets CASCADE")
                    .ok());
  }
  NodeInfo Node(const std::string& name, int capacity) {
    NodeInfo n;
    n.name = name;
    n.address = "192.0.2.1:" + std::to_string(3000 + capacity);
    n.boot_id = RandomHex(8);
    n.capacity = capacity;
    return n;
  }
  int Reserved(const std::string& name) {
    auto r = reg_->pool().Exec("SELECT reserved FROM nodes WHERE name = $1", {name});
    return r.ok() && !r->empty() ? std::stoi(r->Text(0, 0)) : -1;
  }

  static inline std::string bin_, dir_, url_;
  static inline Child* server_ = nullptr;
  std::unique_ptr<ClusterRegistry> reg_;
};

TEST_F(ClusterRegistryTest, MigrationsRunOnceAndAreRecorded) {
  auto again = ClusterRegistry::Open(url_, 1);  // a second daemon starting
  ASSERT_TRUE(again.ok()) << again.status().message();
  auto v = reg_->pool().Exec("SELECT count(*), max(version) FROM schema_migrations");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->Text(0, 0), std::to_string(kSchemaVersion));
  EXPECT_EQ(v->Text(0, 1), std::to_string(kSchemaVersion));
  // A registry newer than this binary is refused, not used.
  ASSERT_TRUE(reg_->pool().Exec("INSERT INTO schema_migrations (version) VALUES (999)").ok());
  auto newer = ClusterRegistry::Open(url_, 1);
  EXPECT_EQ(newer.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(newer.status().message().find("upgrade this binary"), std::string::npos) << newer.status().message();
  ASSERT_TRUE(reg_->pool().Exec("DELETE FROM schema_migrations WHERE version = 999").ok());
}

TEST_F(ClusterRegistryTest, TwoFrontsRacingNeverOverCommitANode) {
  ASSERT_TRUE(reg_->RegisterNode(Node("a", 7), {}).ok());
  ASSERT_TRUE(reg_->RegisterNode(Node("b", 5), {}).ok());
  std::atomic<int> placed{0}, refused{0};
  std::vector<std::thread> fronts;
  for (int f = 0; f < 4; ++f) {
    fronts.emplace_back([&] {
      auto mine = ClusterRegistry::Open(url_, 1);  // a front's own connection
      ASSERT_TRUE(mine.ok());
      for (int i = 0; i < 10; ++i) {
        auto p = (*mine)->Place("base", 2, std::chrono::seconds(60));
        if (p.ok()) ++placed;
        else if (p.status().code() == StatusCode::kResourceExhausted) ++refused;
      }
    });
  }
  for (auto& t : fronts) t.join();
  EXPECT_EQ(placed.load(), 12);
  EXPECT_EQ(refused.load(), 28);
  EXPECT_EQ(Reserved("a"), 7);
  EXPECT_EQ(Reserved("b"), 5);
}

TEST_F(ClusterRegistryTest, PlacementSkipsDrainingStaleAndTemplateLessNodes) {
  NodeInfo a = Node("a", 3), b = Node("b", 3), c = Node("c", 3);
  a.templates = {"base"};
  b.templates = {"base", "custom-1"};
  c.templates = {"base"};
  for (auto* n : {&a, &b, &c}) ASSERT_TRUE(reg_->RegisterNode(*n, {}).ok());
  // Only b has custom-1.
  for (int i = 0; i < 3; ++i) {
    auto p = reg_->Place("custom-1", 3, std::chrono::seconds(60));
    ASSERT_TRUE(p.ok()) << p.status().message();
    EXPECT_EQ(p->node, "b");
  }
  EXPECT_EQ(reg_->Place("custom-1", 3, std::chrono::seconds(60)).status().code(), StatusCode::kResourceExhausted);
  // A template no node lists may go anywhere; a draining node and one whose heartbeat is stale get nothing.
  ASSERT_TRUE(reg_->SetDraining("a", true).ok());
  ASSERT_TRUE(reg_->pool().Exec("UPDATE nodes SET heartbeat = now() - interval '1 minute' WHERE name = 'c'").ok());
  EXPECT_EQ(reg_->Place("unlisted", 3, std::chrono::seconds(5)).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(reg_->SetDraining("nosuchnode", true).code(), StatusCode::kNotFound);
  ASSERT_TRUE(reg_->SetDraining("a", false).ok());
  auto p = reg_->Place("unlisted", 3, std::chrono::seconds(5));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->node, "a");
}

TEST_F(ClusterRegistryTest, SlotsAreCountedOnceWhateverTheOrderOfFrontAndNode) {
  ASSERT_TRUE(reg_->RegisterNode(Node("a", 10), {}).ok());
  // A front's create: reserve, then the node records it without counting again.
  auto p1 = reg_->Place("base", 1, std::chrono::seconds(60));
  ASSERT_TRUE(p1.ok());
  ASSERT_TRUE(reg_->AddSandbox("s1", "a", Claim(*p1)).ok());
  EXPECT_EQ(Reserved("a"), 1);
  // The node's sync got there first (and counted it): the front's slot is freed.
  auto p2 = reg_->Place("base", 1, std::chrono::seconds(60));
  ASSERT_TRUE(p2.ok());
  ASSERT_TRUE(reg_->AddSandbox("s2", "a", 0).ok());
  ASSERT_TRUE(reg_->AddSandbox("s2", "a", Claim(*p2)).ok());
  EXPECT_EQ(Reserved("a"), 2);
  // A fork child: counted when recorded; recorded twice, counted once.
  ASSERT_TRUE(reg_->AddSandbox("s3", "a", 0).ok());
  ASSERT_TRUE(reg_->AddSandbox("s3", "a", 0).ok());
  EXPECT_EQ(Reserved("a"), 3);
  // A refused create's slot goes back.
  auto refused = reg_->Place("base", 1, std::chrono::seconds(60));
  ASSERT_TRUE(refused.ok());
  ASSERT_TRUE(reg_->Release("a", refused->reservation).ok());
  EXPECT_EQ(Reserved("a"), 3);
  for (const char* id : {"s1", "s2", "s3", "s3"}) ASSERT_TRUE(reg_->RemoveSandbox(id, "a").ok());
  EXPECT_EQ(Reserved("a"), 0);
  auto gone = reg_->Locate("s1");
  ASSERT_TRUE(gone.ok());
  EXPECT_FALSE(gone->has_value());
}

// A fork child needs a free slot of its node (no front reserved one): a
// node at its capacity refuses it and counts nothing; one with room counts
// it once, however often it is recorded.
TEST_F(ClusterRegistryTest, AForkChildIsCountedOnlyWithinItsNodesCapacity) {
  ASSERT_TRUE(reg_->RegisterNode(Node("a", 2), {"s1"}).ok());
  ASSERT_TRUE(reg_->AddSandbox("c1", "a", kWithinCapacity).ok());
  ASSERT_TRUE(reg_->AddSandbox("c1", "a", kWithinCapacity).ok());
  EXPECT_EQ(Reserved("a"), 2);
  Status full = reg_->AddSandbox("c2", "a", kWithinCapacity);
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted) << full.message();
  EXPECT_NE(full.message().find("capacity"), std::string::npos) << full.message();
  EXPECT_EQ(Reserved("a"), 2);
  auto c2 = reg_->Locate("c2");
  ASSERT_TRUE(c2.ok());
  EXPECT_FALSE(c2->has_value());
  // A front's reservation in flight holds its slot against forks too.
  ASSERT_TRUE(reg_->RemoveSandbox("c1", "a").ok());
  auto p = reg_->Place("base", 1, std::chrono::seconds(60));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(reg_->AddSandbox("c3", "a", kWithinCapacity).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(reg_->AddSandbox("c3", "x", kWithinCapacity).code(), StatusCode::kNotFound);
}

// Issue 32, item 9: drift in `reserved` (a slot freed twice, an edit by
// hand) is corrected by the node's next heartbeat: it becomes the node's
// live sandboxes plus the reservations still in flight; a reservation
// older than the TTL with no record from the node is dropped.
TEST_F(ClusterRegistryTest, EveryHeartbeatReconcilesReservedWithWhatTheNodeRuns) {
  NodeInfo a = Node("a", 5);
  ASSERT_TRUE(reg_->RegisterNode(a, {"x", "y"}).ok());
  auto in_flight = reg_->Place("base", 1, std::chrono::seconds(60));  // a create in flight
  ASSERT_TRUE(in_flight.ok());
  EXPECT_EQ(Reserved("a"), 3);
  for (int drift : {0, 5}) {
    ASSERT_TRUE(reg_->pool().Exec("UPDATE nodes SET reserved = $1 WHERE name = 'a'", {std::to_string(drift)}).ok());
    ASSERT_TRUE(reg_->Heartbeat("a", a.boot_id).ok());
    EXPECT_EQ(Reserved("a"), 3) << "after a drift to " << drift;
  }
  // A lost sandbox is not counted.
  ASSERT_TRUE(reg_->pool().Exec("UPDATE sandboxes SET lost_at = now() WHERE id = 'y'").ok());
  ASSERT_TRUE(reg_->Heartbeat("a", a.boot_id).ok());
  EXPECT_EQ(Reserved("a"), 2);
  ASSERT_TRUE(reg_->pool().Exec("UPDATE sandboxes SET lost_at = NULL WHERE id = 'y'").ok());
  // The create's reservation ages past the TTL with no record: dropped.
  ASSERT_TRUE(reg_->pool().Exec("UPDATE reservations SET made_at = now() - interval '1 hour'").ok());
  ASSERT_TRUE(reg_->Heartbeat("a", a.boot_id).ok());
  EXPECT_EQ(Reserved("a"), 2);
  // Its node records the sandbox after all: counted, as no reservation holds its slot.
  ASSERT_TRUE(reg_->AddSandbox("z", "a", in_flight->reservation).ok());
  EXPECT_EQ(Reserved("a"), 3);
  ASSERT_TRUE(reg_->Heartbeat("a", a.boot_id).ok());
  EXPECT_EQ(Reserved("a"), 3);
}

// Issue 32, item 9: a create's slot is freed only once, and only for a
// create its node refused, whatever order the node records the others in.
// Each create carries its own reservation (schema 3), so a record uses
// that one and a refusal frees its own.
TEST_F(ClusterRegistryTest, AReservationIsFreedOnceByItsRefusalAndNeverTwice) {
  NodeInfo a = Node("a", 2);
  ASSERT_TRUE(reg_->RegisterNode(a, {}).ok());
  auto first = reg_->Place("base", 1, std::chrono::seconds(60));
  auto second = reg_->Place("base", 1, std::chrono::seconds(60));
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_NE(first->reservation, second->reservation);
  EXPECT_EQ(Reserved("a"), 2);
  // Both in flight (their clients may have hung up): no third create fits.
  EXPECT_EQ(reg_->Place("base", 1, std::chrono::seconds(60)).status().code(), StatusCode::kResourceExhausted);
  // The second is made and recorded first, then the first is refused.
  ASSERT_TRUE(reg_->AddSandbox("s2", "a", Claim(*second)).ok());
  EXPECT_EQ(Reserved("a"), 2);
  ASSERT_TRUE(reg_->Release("a", first->reservation).ok());
  EXPECT_EQ(Reserved("a"), 1);
  ASSERT_TRUE(reg_->Release("a", first->reservation).ok());  // twice: nothing more
  EXPECT_EQ(Reserved("a"), 1);
  auto hb = reg_->Heartbeat("a", a.boot_id);
  ASSERT_TRUE(hb.ok());
  EXPECT_EQ(hb->reserved_was, 1);
  EXPECT_EQ(hb->reserved, 1);  // nothing of the two creates is left counted but s2
  // A create recorded while the node's sync had already counted it: its slot is freed once.
  auto third = reg_->Place("base", 1, std::chrono::seconds(60));
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(Reserved("a"), 2);
  ASSERT_TRUE(reg_->AddSandbox("s3", "a", 0).ok());  // the sync
  EXPECT_EQ(Reserved("a"), 3);
  ASSERT_TRUE(reg_->AddSandbox("s3", "a", Claim(*third)).ok());  // the create's record
  EXPECT_EQ(Reserved("a"), 2);
  hb = reg_->Heartbeat("a", a.boot_id);
  ASSERT_TRUE(hb.ok());
  EXPECT_EQ(hb->reserved, 2);
  // Two nodes' reservations never mix: a record on b uses none of a's.
  NodeInfo b = Node("b", 2);
  ASSERT_TRUE(reg_->RegisterNode(b, {}).ok());
  ASSERT_TRUE(reg_->SetDraining("b", true).ok());  // the next placement goes to a
  ASSERT_TRUE(reg_->RemoveSandbox("s3", "a").ok());
  auto on_a = reg_->Place("base", 1, std::chrono::seconds(60));
  ASSERT_TRUE(on_a.ok());
  ASSERT_EQ(on_a->node, "a");
  ASSERT_TRUE(reg_->AddSandbox("t1", "b", on_a->reservation).ok());  // a's reservation on b: none, counted
  EXPECT_EQ(Reserved("b"), 1);
  EXPECT_EQ(Reserved("a"), 2);
  ASSERT_TRUE(reg_->Release("a", on_a->reservation).ok());
  EXPECT_EQ(Reserved("a"), 1);
}

TEST_F(ClusterRegistryTest, ALapsedNodeLosesItsSandboxesAndGetsThemBackOnRegistering) {
  NodeInfo a = Node("a", 5);
  ASSERT_TRUE(reg_->RegisterNode(a, {"x", "y"}).ok());
  EXPECT_EQ(Reserved("a"), 2);
  auto in_flight = reg_->Place("base", 1, std::chrono::seconds(60));  // a create in flight when it lapses
  ASSERT_TRUE(in_flight.ok());
  ASSERT_TRUE(reg_->AddSandbox("x", "a", 0).ok());
  EXPECT_EQ(Reserved("a"), 3);
  auto hb = reg_->Heartbeat("a", a.boot_id);
  ASSERT_TRUE(hb.ok());
  EXPECT_TRUE(hb->registered);
  EXPECT_EQ(hb->reserved, 3);
  // Not lapsed yet.
  auto none = reg_->MarkLapsed(std::chrono::seconds(60));
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  ASSERT_TRUE(reg_->pool().Exec("UPDATE nodes SET heartbeat = now() - interval '10 seconds' WHERE name = 'a'").ok());
  auto lapsed = reg_->MarkLapsed(std::chrono::seconds(5));
  ASSERT_TRUE(lapsed.ok());
  EXPECT_EQ(*lapsed, std::vector<std::string>{"a"});
  EXPECT_EQ(Reserved("a"), 0);
  auto x = reg_->Locate("x");
  ASSERT_TRUE(x.ok() && x->has_value());
  EXPECT_TRUE((*x)->lost);
  EXPECT_GT((*x)->lost_at_ms, 0);
  // Its heartbeat now says: register again.
  hb = reg_->Heartbeat("a", a.boot_id);
  ASSERT_TRUE(hb.ok());
  EXPECT_FALSE(hb->registered);
  // The lapse dropped the reservation: a late refusal frees nothing.
  ASSERT_TRUE(reg_->Release("a", in_flight->reservation).ok());
  EXPECT_EQ(Reserved("a"), 0);
  // A lost sandbox's end frees nothing (its slot was freed with the node).
  ASSERT_TRUE(reg_->RemoveSandbox("y", "a").ok());
  EXPECT_EQ(Reserved("a"), 0);
  // Registered again (a new boot) with what its journal holds: x survived, z is new.
  a.boot_id = RandomHex(8);
  ASSERT_TRUE(reg_->RegisterNode(a, {"x", "z"}).ok());
  EXPECT_EQ(Reserved("a"), 2);
  ASSERT_TRUE(reg_->Heartbeat("a", a.boot_id).ok());
  EXPECT_EQ(Reserved("a"), 2);
  x = reg_->Locate("x");
  ASSERT_TRUE(x.ok() && x->has_value());
  EXPECT_FALSE((*x)->lost);
  EXPECT_EQ((*x)->address, a.address);
  auto nodes = reg_->Nodes();
  ASSERT_TRUE(nodes.ok());
  ASSERT_EQ(nodes->size(), 1u);
  EXPECT_TRUE((*nodes)[0].live);
  // A clean stop is a lapse at once; an older boot's leave changes nothing.
  ASSERT_TRUE(reg_->Leave("a", "an-older-boot").ok());
  EXPECT_EQ(Reserved("a"), 2);
  ASSERT_TRUE(reg_->Leave("a", a.boot_id).ok());
  EXPECT_EQ(Reserved("a"), 0);
  x = reg_->Locate("x");
  ASSERT_TRUE(x.ok() && x->has_value());
  EXPECT_TRUE((*x)->lost);
}

TEST_F(ClusterRegistryTest, NotificationsAnnounceMovedAndRemovedSandboxes) {
  ASSERT_TRUE(reg_->RegisterNode(Node("a", 5), {"q1", "q\"2"}).ok());  // an id a text[] literal must quote
  auto listen = PgConn::Connect(url_);
  ASSERT_TRUE(listen.ok());
  ASSERT_TRUE((*listen)->Exec("LISTEN airlock_sandbox").ok());
  ASSERT_TRUE(reg_->RemoveSandbox("q\"2", "a").ok());
  std::vector<std::string> got;
  ASSERT_TRUE(WaitFor(
      [&] {
        auto n = (*listen)->TakeNotifications();
        if (n.ok())
          for (auto& x : *n) got.push_back(x.payload);
        return !got.empty();
      },
      std::chrono::steady_clock::now() + std::chrono::seconds(10)));
  EXPECT_EQ(got, std::vector<std::string>{"q\"2"});
}

TEST_F(ClusterRegistryTest, ApiKeysAndTheirVersion) {
  auto v0 = reg_->KeyVersion();
  ASSERT_TRUE(v0.ok());
  auto k = reg_->CreateApiKey("agents", "team-a", false);
  ASSERT_TRUE(k.ok()) << k.status().message();
  EXPECT_EQ(k->second.rfind(kApiKeyPrefix, 0), 0u);
  auto v1 = reg_->KeyVersion();
  ASSERT_TRUE(v1.ok());
  EXPECT_NE(*v0, *v1);
  auto rows = reg_->ApiKeysByHash();
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].second.team, "team-a");
  EXPECT_EQ((*rows)[0].first.size(), 64u);  // SHA-256 hex, never the key
  EXPECT_EQ(reg_->CreateApiKey("x", "bad team!", false).status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(reg_->RemoveApiKey("agents").ok());
  EXPECT_EQ(reg_->RemoveApiKey("agents").code(), StatusCode::kNotFound);
}

// Issue 38 item 4: a reservation is bound to its create. The node claims it
// by the token the front's create carried: only its own node's, for the
// body it was made for, once, within the TTL.
TEST_F(ClusterRegistryTest, AReservationIsClaimedOnceByItsNodeForItsCreate) {
  NodeInfo a = Node("a", 5);
  ASSERT_TRUE(reg_->RegisterNode(a, {}).ok());
  ASSERT_TRUE(reg_->RegisterNode(Node("b", 5), {}).ok());
  ASSERT_TRUE(reg_->SetDraining("b", true).ok());
  auto p = reg_->Place("base", 1, std::chrono::seconds(60), "digest-of-create-1");
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->node, "a");
  EXPECT_EQ(p->token.size(), 32u);
  auto other = reg_->Place("base", 1, std::chrono::seconds(60), "digest-of-create-1");
  ASSERT_TRUE(other.ok());
  EXPECT_NE(p->token, other->token);
  auto refused = [&](const std::string& node, const std::string& token, const std::string& digest) {
    auto c = reg_->ClaimReservation(node, token, digest);
    EXPECT_EQ(c.status().code(), StatusCode::kPermissionDenied);
    return c.status().message();
  };
  EXPECT_NE(refused("a", "0123456789abcdef0123456789abcdef", "digest-of-create-1").find("not one this cluster holds"),
            std::string::npos);
  EXPECT_NE(refused("b", p->token, "digest-of-create-1").find("for node a, not b"), std::string::npos);
  EXPECT_NE(refused("a", p->token, "digest-of-create-2").find("for another create"), std::string::npos);
  auto claimed = reg_->ClaimReservation("a", p->token, "digest-of-create-1");
  ASSERT_TRUE(claimed.ok()) << claimed.status().message();
  EXPECT_EQ(*claimed, p->reservation);
  EXPECT_NE(refused("a", p->token, "digest-of-create-1").find("already used"), std::string::npos);
  // A refusal message never carries the token.
  EXPECT_EQ(refused("a", p->token, "digest-of-create-1").find(p->token), std::string::npos);
  ASSERT_TRUE(reg_->pool().Exec("UPDATE reservations SET made_at = now() - interval '1 hour' WHERE id = $1",
                                {std::to_string(other->reservation)}).ok());
  EXPECT_NE(refused("a", other->token, "digest-of-create-1").find("expired"), std::string::npos);
  // The claimed one is used by the record; the count holds the sandbox once.
  ASSERT_TRUE(reg_->AddSandbox("s1", "a", *claimed).ok());
  EXPECT_EQ(Reserved("a"), 2);  // s1 and the expired one (dropped at the next heartbeat)
  auto hb = reg_->Heartbeat("a", a.boot_id);
  ASSERT_TRUE(hb.ok());
  EXPECT_EQ(hb->reserved, 1);
}

// Issue 38 item 5: a front that dies between a placement and its create's
// delivery stops renewing the reservation's lease; the node's next
// heartbeat after the lease drops it and frees its slot. A renewed lease, or
// a reservation the node claimed, holds. A create that fails after its
// claim gives the slot back at once (the node's Release), and the front's
// own Release afterwards frees nothing more.
TEST_F(ClusterRegistryTest, AReservationWhoseFrontStopsRenewingItIsDroppedAtTheNextBeat) {
  NodeInfo a = Node("a", 5);
  ASSERT_TRUE(reg_->RegisterNode(a, {}).ok());
  auto dead = reg_->Place("base", 1, std::chrono::seconds(60));   // its front died: never renewed
  auto alive = reg_->Place("base", 1, std::chrono::seconds(60));  // its front waits and renews
  auto claimed = reg_->Place("base", 1, std::chrono::seconds(60));
  ASSERT_TRUE(dead.ok() && alive.ok() && claimed.ok());
  ASSERT_TRUE(reg_->ClaimReservation("a", claimed->token, "").ok());
  EXPECT_EQ(Reserved("a"), 3);
  // Every lease has run out...
  ASSERT_TRUE(reg_->pool().Exec("UPDATE reservations SET lease_until = now() - interval '1 second'").ok());
  // ... and the living front renews its own.
  ASSERT_TRUE(reg_->RenewLeases({alive->reservation}).ok());
  auto hb = reg_->Heartbeat("a", a.boot_id);
  ASSERT_TRUE(hb.ok());
  EXPECT_EQ(hb->dropped, 1);
  EXPECT_EQ(hb->reserved_was, 3);
  EXPECT_EQ(hb->reserved, 2);
  EXPECT_EQ(reg_->ClaimReservation("a", dead->token, "").status().code(), StatusCode::kPermissionDenied);
  ASSERT_TRUE(reg_->ClaimReservation("a", alive->token, "").ok());
  // The claimed create fails on the node: its slot goes back, once.
  ASSERT_TRUE(reg_->Release("a", claimed->reservation).ok());
  EXPECT_EQ(Reserved("a"), 1);
  ASSERT_TRUE(reg_->Release("a", claimed->reservation).ok());  // the front's, after the node's 5xx
  EXPECT_EQ(Reserved("a"), 1);
  // The other is made: used, not freed by a late release.
  ASSERT_TRUE(reg_->AddSandbox("s1", "a", alive->reservation).ok());
  ASSERT_TRUE(reg_->Release("a", alive->reservation).ok());
  EXPECT_EQ(Reserved("a"), 1);
  hb = reg_->Heartbeat("a", a.boot_id);
  ASSERT_TRUE(hb.ok());
  EXPECT_EQ(hb->reserved, 1);
  EXPECT_EQ(hb->dropped, 0);
}

// A create with an Idempotency-Key: its first node is recorded per team,
// a retry is placed there only (draining or not), a concurrent first call
// through another front finds the recorded one, and a node that is no
// longer live gives its keys up.
TEST_F(ClusterRegistryTest, AnIdempotencyKeysRetriesGoToItsFirstNode) {
  NodeInfo a = Node("a", 5), b = Node("b", 5);
  ASSERT_TRUE(reg_->RegisterNode(a, {}).ok());
  ASSERT_TRUE(reg_->RegisterNode(b, {}).ok());
  auto none = reg_->IdempotencyNode("team-1", "k1");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, "");
  auto first = reg_->RecordIdempotencyNode("team-1", "k1", "b");
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, "b");
  auto racing = reg_->RecordIdempotencyNode("team-1", "k1", "a");  // another front's, a moment later
  ASSERT_TRUE(racing.ok());
  EXPECT_EQ(*racing, "b");
  EXPECT_EQ(*reg_->IdempotencyNode("team-1", "k1"), "b");
  EXPECT_EQ(*reg_->IdempotencyNode("team-2", "k1"), "") << "keys are per team";
  ASSERT_TRUE(reg_->SetDraining("b", true).ok());
  for (int i = 0; i < 5; ++i) {
    auto p = reg_->Place("base", 3, std::chrono::seconds(60), "", "b");
    ASSERT_TRUE(p.ok()) << p.status().message();
    EXPECT_EQ(p->node, "b");
    ASSERT_TRUE(reg_->Release("b", p->reservation).ok());
  }
  auto normal = reg_->Place("base", 3, std::chrono::seconds(60));
  ASSERT_TRUE(normal.ok());
  EXPECT_EQ(normal->node, "a") << "a draining node still gets no new create";
  ASSERT_TRUE(reg_->Leave("b", b.boot_id).ok());
  EXPECT_EQ(*reg_->IdempotencyNode("team-1", "k1"), "") << "a node that left keeps no key";
  EXPECT_EQ(*reg_->RecordIdempotencyNode("team-1", "k1", "a"), "a");
}

// A registry of schema 3 (before templates on every node) gains the
// tables of schema 4 when a newer daemon opens it, its rows kept.
TEST_F(ClusterRegistryTest, ASchema3RegistryMigratesTo4) {
  ASSERT_TRUE(reg_->RegisterNode(Node("a", 2), {"sbx-1"}).ok());
  ASSERT_TRUE(reg_->pool().Exec("DROP TABLE template_bundles, node_artefacts, artefact_grants, cluster_secrets").ok());
  ASSERT_TRUE(reg_->pool().Exec("DELETE FROM schema_migrations WHERE version = 4").ok());
  reg_.reset();
  auto r = ClusterRegistry::Open(url_, 2);
  ASSERT_TRUE(r.ok()) << r.status().message();
  reg_ = std::move(*r);
  auto v = reg_->pool().Exec("SELECT max(version) FROM schema_migrations");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->Text(0, 0), "4");
  auto where = reg_->Locate("sbx-1");
  ASSERT_TRUE(where.ok() && where->has_value());
  EXPECT_EQ((*where)->node, "a");
  ASSERT_TRUE(reg_->PublishTemplate("tpl1", "team-a", {"app"}, "a", "{}").ok());
  ASSERT_TRUE(reg_->RecordArtefact("a", std::string(64, 'a'), 1).ok());
  EXPECT_TRUE(reg_->GrantArtefact("b", "a", std::string(64, 'a')).ok());
  EXPECT_TRUE(reg_->PublishSecret("TOKEN", "c2VhbGVk", "{}", "a").ok());
}

TEST_F(ClusterRegistryTest, TemplateBundlesArePublishedReplacedTombstonedAndFoundByAnyName) {
  ASSERT_TRUE(reg_->PublishTemplate("tpla", "team-a", {"tpla", "app", "web"}, "n1", R"({"v":1})").ok());
  auto got = reg_->TemplateBundlesNamed("app");
  ASSERT_TRUE(got.ok()) << got.status().message();
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].template_id, "tpla");
  EXPECT_EQ((*got)[0].team, "team-a");
  EXPECT_EQ((*got)[0].publisher, "n1");
  EXPECT_EQ((*got)[0].names, (std::vector<std::string>{"tpla", "app", "web"}));
  EXPECT_EQ((*got)[0].bundle, R"({"v":1})");
  EXPECT_GT((*got)[0].updated_ms, 0);
  EXPECT_EQ(reg_->TemplateBundlesNamed("tpla")->size(), 1u);
  EXPECT_EQ(reg_->TemplateBundlesNamed("web")->size(), 1u);
  EXPECT_TRUE(reg_->TemplateBundlesNamed("nope")->empty());
  EXPECT_TRUE(reg_->TemplateBundlesNamed("")->empty());
  // Another team's "app" is another template: both rows, the caller picks.
  // The id joins the names when the publisher left it out.
  ASSERT_TRUE(reg_->PublishTemplate("tplb", "team-b", {"app"}, "n2", "b").ok());
  got = reg_->TemplateBundlesNamed("app");
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ(reg_->TemplateBundlesNamed("tplb")->at(0).names, (std::vector<std::string>{"tplb", "app"}));
  // A new publish replaces the row: names, publisher, bundle.
  ASSERT_TRUE(reg_->PublishTemplate("tpla", "team-a", {"tpla", "app2"}, "n3", R"({"v":2})").ok());
  EXPECT_TRUE(reg_->TemplateBundlesNamed("web")->empty());
  got = reg_->TemplateBundlesNamed("app2");
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].publisher, "n3");
  EXPECT_EQ((*got)[0].bundle, R"({"v":2})");
  got = reg_->TemplateBundlesNamed("app");
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].template_id, "tplb");
  // A delete leaves a tombstone, found by id and names alike.
  ASSERT_TRUE(reg_->PublishTemplate("tpla", "team-a", {"tpla", "app2"}, "n3", "").ok());
  for (const char* name : {"tpla", "app2"}) {
    got = reg_->TemplateBundlesNamed(name);
    ASSERT_EQ(got->size(), 1u) << name;
    EXPECT_EQ((*got)[0].bundle, "") << name;
  }
  auto null = reg_->pool().Exec("SELECT bundle IS NULL FROM template_bundles WHERE template_id = 'tpla'");
  ASSERT_TRUE(null.ok());
  EXPECT_EQ(null->Text(0, 0), "t");
  // And a template published again after its tombstone is back.
  ASSERT_TRUE(reg_->PublishTemplate("tpla", "team-a", {"tpla", "app2"}, "n1", "{}").ok());
  EXPECT_EQ(reg_->TemplateBundlesNamed("app2")->at(0).bundle, "{}");
  EXPECT_EQ(reg_->PublishTemplate("", "team-a", {"x"}, "n1", "{}").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reg_->PublishTemplate("tplc", "team-a", {"x"}, "", "{}").code(), StatusCode::kInvalidArgument);
}

TEST_F(ClusterRegistryTest, AnArtefactsHoldersAreItsLiveFreshNodesDrainingOnesIncluded) {
  const std::string d(64, 'd'), e(64, 'e');
  NodeInfo a = Node("a", 2), b = Node("b", 2), c = Node("c", 2), n = Node("n", 2);
  for (auto* x : {&a, &b, &c, &n}) ASSERT_TRUE(reg_->RegisterNode(*x, {}).ok());
  for (const char* x : {"a", "b", "c", "n", "ghost"}) ASSERT_TRUE(reg_->RecordArtefact(x, d, 100).ok()) << x;
  ASSERT_TRUE(reg_->RecordArtefact("a", e, 5).ok());
  ASSERT_TRUE(reg_->SetDraining("c", true).ok());  // still serves reads
  ASSERT_TRUE(reg_->pool().Exec("UPDATE nodes SET heartbeat = now() - interval '1 minute' WHERE name = 'b'").ok());
  ASSERT_TRUE(reg_->Leave("n", n.boot_id).ok());  // not live
  auto names = [&](const std::string& digest) {
    std::set<std::string> out;
    auto h = reg_->ArtefactHolders(digest, std::chrono::seconds(5));
    EXPECT_TRUE(h.ok()) << h.status().message();
    if (h.ok()) {
      for (const auto& x : *h) out.insert(x.name);
    }
    return out;
  };
  EXPECT_EQ(names(d), (std::set<std::string>{"a", "c"}));
  EXPECT_EQ(names(e), (std::set<std::string>{"a"}));
  EXPECT_TRUE(names(std::string(64, 'f')).empty());
  auto h = reg_->ArtefactHolders(e, std::chrono::seconds(5));
  ASSERT_TRUE(h.ok());
  EXPECT_EQ((*h)[0].address, a.address);
  // A node that registers again still holds its files (its disk kept them).
  n.boot_id = RandomHex(8);
  ASSERT_TRUE(reg_->RegisterNode(n, {}).ok());
  EXPECT_EQ(names(d), (std::set<std::string>{"a", "c", "n"}));
  // An upsert, then a node forgets its own row (twice: no error).
  ASSERT_TRUE(reg_->RecordArtefact("a", d, 200).ok());
  auto size = reg_->pool().Exec("SELECT size FROM node_artefacts WHERE node = 'a' AND digest = $1", {d});
  ASSERT_TRUE(size.ok() && !size->empty());
  EXPECT_EQ(size->Text(0, 0), "200");
  ASSERT_TRUE(reg_->ForgetArtefact("a", d).ok());
  ASSERT_TRUE(reg_->ForgetArtefact("a", d).ok());
  EXPECT_EQ(names(d), (std::set<std::string>{"c", "n"}));
  EXPECT_EQ(names(e), (std::set<std::string>{"a"}));
  // Digests are SHA-256 hex, lower case.
  for (const std::string& bad : {std::string(63, 'a'), std::string(64, 'A'), std::string(64, 'g'), std::string()}) {
    EXPECT_EQ(reg_->RecordArtefact("a", bad, 1).code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(reg_->ForgetArtefact("a", bad).code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(reg_->ArtefactHolders(bad, std::chrono::seconds(5)).status().code(), StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(reg_->RecordArtefact("a", d, -1).code(), StatusCode::kInvalidArgument);
}

TEST_F(ClusterRegistryTest, AnArtefactGrantIsForOneHolderAndOneArtefactUntilItExpires) {
  const std::string d(64, 'd'), e(64, 'e');
  auto token = reg_->GrantArtefact("req", "h1", d);
  ASSERT_TRUE(token.ok()) << token.status().message();
  ASSERT_EQ(token->size(), 32u);
  EXPECT_EQ(token->find_first_not_of("0123456789abcdef"), std::string::npos);
  // Any number of reads (a resumed fetch's range requests).
  EXPECT_TRUE(reg_->CheckArtefactGrant("h1", *token, d).ok());
  EXPECT_TRUE(reg_->CheckArtefactGrant("h1", *token, d).ok());
  auto refused = [&](const std::string& holder, const std::string& tok, const std::string& digest,
                     const std::string& why) {
    Status st = reg_->CheckArtefactGrant(holder, tok, digest);
    EXPECT_EQ(st.code(), StatusCode::kPermissionDenied) << why;
    EXPECT_NE(st.message().find(why), std::string::npos) << st.message();
    EXPECT_EQ(st.message().find(tok), std::string::npos) << "the token is never echoed: " << st.message();
  };
  refused("h2", *token, d, "for node h1, not h2");
  refused("h1", *token, e, "for another artefact");
  refused("h1", RandomHex(16), d, "not a grant this cluster holds");
  auto other = reg_->GrantArtefact("req", "h1", d);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*other, *token);
  ASSERT_TRUE(reg_->pool()
                  .Exec("UPDATE artefact_grants SET made_at = now() - interval '11 minutes' WHERE token = $1", {*token})
                  .ok());
  refused("h1", *token, d, "expired");
  EXPECT_TRUE(reg_->CheckArtefactGrant("h1", *other, d).ok());
  // Grants older than twice the TTL go with the next grant.
  ASSERT_TRUE(reg_->pool()
                  .Exec("UPDATE artefact_grants SET made_at = now() - interval '21 minutes' WHERE token = $1", {*token})
                  .ok());
  ASSERT_TRUE(reg_->GrantArtefact("req", "h1", e).ok());
  auto left = reg_->pool().Exec("SELECT count(*) FROM artefact_grants WHERE token = $1", {*token});
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(left->Text(0, 0), "0");
  refused("h1", *token, d, "not a grant this cluster holds");
  // Shapes.
  for (const std::string& bad : {std::string("xyz"), std::string(32, 'A'), std::string(33, 'a'), std::string()}) {
    EXPECT_EQ(reg_->CheckArtefactGrant("h1", bad, d).code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(reg_->CheckArtefactGrant("h1", *other, "abc").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reg_->GrantArtefact("req", "h1", std::string(64, 'G')).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reg_->GrantArtefact("", "h1", d).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reg_->GrantArtefact("req", "", d).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ClusterRegistryTest, PlacementFallsBackToNodesWithoutTheTemplateOnlyWhenAsked) {
  NodeInfo a = Node("a", 1), b = Node("b", 2);
  a.templates = {"custom"};
  ASSERT_TRUE(reg_->RegisterNode(a, {}).ok());
  ASSERT_TRUE(reg_->RegisterNode(b, {}).ok());
  const auto lapse = std::chrono::seconds(60);
  // Preferred: the node that lists it, with or without the flag.
  auto first = reg_->Place("custom", 2, lapse, "", "", true);
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ(first->node, "a");
  // a is full: only the flag lets b take it.
  EXPECT_EQ(reg_->Place("custom", 2, lapse).status().code(), StatusCode::kResourceExhausted);
  auto fell = reg_->Place("custom", 2, lapse, "", "", true);
  ASSERT_TRUE(fell.ok()) << fell.status().message();
  EXPECT_EQ(fell->node, "b");
  ASSERT_TRUE(reg_->Release("b", fell->reservation).ok());
  // a has room again but drains: the same.
  ASSERT_TRUE(reg_->Release("a", first->reservation).ok());
  ASSERT_TRUE(reg_->SetDraining("a", true).ok());
  EXPECT_EQ(reg_->Place("custom", 2, lapse).status().code(), StatusCode::kResourceExhausted);
  fell = reg_->Place("custom", 2, lapse, "", "", true);
  ASSERT_TRUE(fell.ok()) << fell.status().message();
  EXPECT_EQ(fell->node, "b");
  EXPECT_EQ(Reserved("a"), 0);
  // only_node is that node only, flag or not.
  EXPECT_EQ(reg_->Place("custom", 2, lapse, "", "b", true)->node, "b");
  EXPECT_EQ(Reserved("b"), 2);
  auto none = reg_->Place("custom", 2, lapse, "", "", true);
  EXPECT_EQ(none.status().code(), StatusCode::kResourceExhausted) << "every node full or draining";
  ASSERT_TRUE(reg_->SetDraining("a", false).ok());
  auto back = reg_->Place("custom", 2, lapse, "", "", true);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->node, "a");
}

TEST_F(ClusterRegistryTest, ClusterSecretsArePublishedReplacedTombstonedAndFoundByNameOrTime) {
  ASSERT_TRUE(reg_->PublishSecret("TOKEN", "c2VhbGVk", R"({"size":8})", "n1").ok());
  ASSERT_TRUE(reg_->PublishSecret("db-password", "b3RoZXI=", "", "n2").ok());
  auto got = reg_->SecretsNamed({"TOKEN", "missing", "bad name", "db-password"});
  ASSERT_TRUE(got.ok()) << got.status().message();
  ASSERT_EQ(got->size(), 2u);  // oldest first
  EXPECT_EQ((*got)[0].name, "TOKEN");
  EXPECT_EQ((*got)[0].sealed, "c2VhbGVk");
  EXPECT_EQ((*got)[0].info, R"({"size":8})");
  EXPECT_EQ((*got)[0].publisher, "n1");
  EXPECT_GT((*got)[0].updated_ms, 0);
  EXPECT_EQ((*got)[1].name, "db-password");
  EXPECT_EQ((*got)[1].info, "{}");  // "" is stored as {}
  EXPECT_TRUE(reg_->SecretsNamed({})->empty());
  EXPECT_TRUE(reg_->SecretsNamed({"nope"})->empty());
  // SecretsSince: rows updated at or after the time, the row's own ms included.
  const int64_t first_ms = (*got)[0].updated_ms;
  auto since = reg_->SecretsSince(first_ms);
  ASSERT_TRUE(since.ok());
  ASSERT_GE(since->size(), 1u);
  EXPECT_EQ(since->front().name, "TOKEN");
  EXPECT_EQ(reg_->SecretsSince(0)->size(), 2u);
  EXPECT_TRUE(reg_->SecretsSince((*got)[1].updated_ms + 1)->empty());
  // A new publish replaces the row (another publisher, value, info) and moves it last.
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(reg_->PublishSecret("TOKEN", "bmV3", R"({"size":3})", "n3").ok());
  auto all = reg_->SecretsSince(0);
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ(all->back().name, "TOKEN");
  EXPECT_EQ(all->back().publisher, "n3");
  EXPECT_EQ(all->back().sealed, "bmV3");
  EXPECT_GT(all->back().updated_ms, first_ms);
  EXPECT_TRUE(reg_->SecretsSince(all->back().updated_ms + 1)->empty());
  // A delete is a tombstone (sealed NULL), found like any row.
  ASSERT_TRUE(reg_->PublishSecret("TOKEN", "", R"({"updatedAtMs":1})", "n1").ok());
  got = reg_->SecretsNamed({"TOKEN"});
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].sealed, "");
  EXPECT_EQ((*got)[0].publisher, "n1");
  auto null = reg_->pool().Exec("SELECT sealed IS NULL FROM cluster_secrets WHERE name = 'TOKEN'");
  ASSERT_TRUE(null.ok());
  EXPECT_EQ(null->Text(0, 0), "t");
  EXPECT_EQ(reg_->PublishSecret("bad name", "x", "{}", "n1").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reg_->PublishSecret("TOKEN", "x", "{}", "").code(), StatusCode::kInvalidArgument);
}

// Two nodes' secret stores (two SQLite databases with their own
// secrets.key) and their replicas over this registry, sharing one cluster key.
class SecretReplicaTest : public ClusterRegistryTest {
 protected:
  struct Node {
    std::unique_ptr<secrets::SecretStore> store;
    std::unique_ptr<SecretReplica> replica;
    std::vector<std::pair<std::string, std::string>> imported;  // what on_imported heard
    std::mutex mu;
  };
  void SetUp() override {
    ClusterRegistryTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    dir_.path = test_util::MakeTempDir("secret-replica");
    ASSERT_FALSE(dir_.path.empty());
    key_ = *secrets::NewSealKey();
  }
  void TearDown() override {
    for (auto& n : nodes_) n->replica.reset();  // before their stores
  }
  // A node `name`; `observe`: the store's changes go to its replica (a daemon's wiring).
  Node& Start(const std::string& name, const std::string& key, bool observe = true) {
    auto n = std::make_unique<Node>();
    const std::string d = dir_.path + "/" + name;
    std::filesystem::create_directories(d);
    auto s = secrets::SecretStore::Open(d + "/airlock.db", d + "/secrets.key");
    EXPECT_TRUE(s.ok()) << s.status().message();
    n->store = std::move(*s);
    Node* raw = n.get();
    SecretReplicaConfig c{name, key, std::chrono::milliseconds(50)};
    n->replica = std::make_unique<SecretReplica>(
        *reg_, [raw]() -> StatusOr<secrets::SecretStore*> { return raw->store.get(); }, c,
        [raw](const std::string& secret, const std::string& value) {
          std::lock_guard<std::mutex> l(raw->mu);
          raw->imported.emplace_back(secret, value);
        });
    if (observe) n->store->SetOnChange([raw](const std::string& secret) { raw->replica->Changed(secret); });
    nodes_.push_back(std::move(n));
    return *nodes_.back();
  }
  static std::string ValueOf(secrets::SecretStore& s, const std::string& name) {
    auto v = s.Get(name);
    return v.ok() ? *v : "";
  }
  test_util::ScopedDir dir_;
  std::string key_;
  std::vector<std::unique_ptr<Node>> nodes_;
};

TEST_F(SecretReplicaTest, ASecretStoredOnOneNodeIsUsableOnAnotherAndItsDeleteToo) {
  Node& a = Start("a", key_);
  Node& b = Start("b", key_);
  const std::string canary = "replica-canary-0d1f4e";
  secrets::SecretPolicy policy;
  policy.scope = secrets::Scope::kBrokered;
  policy.hosts = {"api.example.com", "*.corp.test"};
  policy.teams = {"acme"};
  secrets::ApiAttributes api{"sec_0abcdefghijklmnopqrstuvwxy", "acme", 1, {{"description", "gh"}}};
  ASSERT_TRUE(a.store->Create("github_token", canary, policy, api).ok());
  a.replica->Flush();
  // In the registry: sealed, never in clear (nor as plain base64 of the value).
  auto rows = reg_->SecretsNamed({"github_token"});
  ASSERT_TRUE(rows.ok() && rows->size() == 1u);
  const ClusterSecretRow row = rows->front();
  EXPECT_EQ(row.publisher, "a");
  EXPECT_EQ(row.sealed.find(canary), std::string::npos);
  EXPECT_EQ(row.sealed.find(secrets::EncodeBase64(canary)), std::string::npos);
  EXPECT_EQ(row.info.find(canary), std::string::npos);
  auto raw = reg_->pool().Exec("SELECT sealed || info FROM cluster_secrets");
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ(raw->Text(0, 0).find(canary), std::string::npos);
  auto opened = secrets::Unseal(key_, secrets::ClusterSecretAad("github_token", row.info), *secrets::DecodeBase64(row.sealed));
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  EXPECT_EQ(*opened, canary);

  // Before a create on b uses it: imported with its value, policy, attributes and times.
  ASSERT_TRUE(b.replica->Refresh({"github_token"}).ok());
  auto got = b.store->Get("github_token");
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(*got, canary);
  auto ia = a.store->Info("github_token"), ib = b.store->Info("github_token");
  ASSERT_TRUE(ia.ok() && ib.ok());
  EXPECT_EQ(ib->policy.scope, secrets::Scope::kBrokered);
  EXPECT_EQ(ib->policy.hosts, policy.hosts);
  EXPECT_EQ(ib->policy.teams, policy.teams);
  EXPECT_EQ(ib->api.id, api.id);
  EXPECT_EQ(ib->api.owner, "acme");
  EXPECT_EQ(ib->api.version, 1);
  EXPECT_EQ(ib->api.metadata, api.metadata);
  EXPECT_EQ(ib->created_at_ms, ia->created_at_ms);
  EXPECT_EQ(ib->updated_at_ms, ia->updated_at_ms);
  {
    std::lock_guard<std::mutex> l(b.mu);
    ASSERT_EQ(b.imported.size(), 1u);  // the redactor learns the value
    EXPECT_EQ(b.imported[0], std::make_pair(std::string("github_token"), canary));
  }
  // b did not publish it back: the row is still a's.
  b.replica->Flush();
  EXPECT_EQ(reg_->SecretsNamed({"github_token"})->front().publisher, "a");
  // Refreshing again imports nothing new.
  ASSERT_TRUE(b.replica->Refresh({"github_token", "missing"}).ok());
  {
    std::lock_guard<std::mutex> l(b.mu);
    EXPECT_EQ(b.imported.size(), 1u);
  }

  // An update on b (it serves /secrets now) reaches a by the periodic import.
  api.version = 2;
  ASSERT_TRUE(b.store->Set("github_token", canary + "-v2", policy, &api).ok());
  b.replica->Flush();
  EXPECT_EQ(reg_->SecretsNamed({"github_token"})->front().publisher, "b");
  EXPECT_TRUE(WaitFor([&] { return ValueOf(*a.store, "github_token") == canary + "-v2"; }, std::chrono::seconds(10)));
  EXPECT_EQ(a.store->Info("github_token")->api.version, 2);

  // A delete on a: a tombstone, and b's copy goes (periodic import).
  ASSERT_TRUE(a.store->Remove("github_token").ok());
  a.replica->Flush();
  rows = reg_->SecretsNamed({"github_token"});
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_NE(rows->front().info.find("\"deleted\":true"), std::string::npos) << rows->front().info;
  EXPECT_FALSE(rows->front().sealed.empty()) << "a tombstone is sealed too";
  EXPECT_TRUE(WaitFor([&] { return b.store->Info("github_token").status().code() == StatusCode::kNotFound; },
                      std::chrono::seconds(10)));
  // The tombstone is not published back by b, and a stays without it.
  b.replica->Flush();
  EXPECT_EQ(reg_->SecretsNamed({"github_token"})->front().publisher, "a");
  EXPECT_EQ(a.store->Info("github_token").status().code(), StatusCode::kNotFound);
}

TEST_F(SecretReplicaTest, ARowSealedWithAnotherClusterKeyIsSkipped) {
  Node& a = Start("a", key_);
  Node& c = Start("c", *secrets::NewSealKey());  // given another --cluster-secrets-key
  ASSERT_TRUE(a.store->Set("TOKEN", "value-of-a-123").ok());
  a.replica->Flush();
  ASSERT_TRUE(c.replica->Refresh({"TOKEN"}).ok());  // skipped with a warning, not an error
  EXPECT_EQ(c.store->Info("TOKEN").status().code(), StatusCode::kNotFound);
  {
    std::lock_guard<std::mutex> l(c.mu);
    EXPECT_TRUE(c.imported.empty());
  }
  // A row changed in the registry does not unseal either (the tag).
  auto rows = reg_->SecretsNamed({"TOKEN"});
  ASSERT_EQ(rows->size(), 1u);
  std::string sealed = *secrets::DecodeBase64(rows->front().sealed);
  sealed[20] ^= 1;
  ASSERT_TRUE(reg_->PublishSecret("TOKEN", secrets::EncodeBase64(sealed), rows->front().info, "x").ok());
  Node& b = Start("b", key_);
  ASSERT_TRUE(b.replica->Refresh({"TOKEN"}).ok());
  EXPECT_EQ(b.store->Info("TOKEN").status().code(), StatusCode::kNotFound);
  // Nor does a value moved onto another name (the additional data).
  ASSERT_TRUE(a.store->Set("OTHER", "value-other-123").ok());
  a.replica->Flush();
  ASSERT_TRUE(reg_->PublishSecret("MOVED", reg_->SecretsNamed({"OTHER"})->front().sealed, "{}", "x").ok());
  ASSERT_TRUE(b.replica->Refresh({"MOVED", "OTHER"}).ok());
  EXPECT_EQ(b.store->Info("MOVED").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*b.store->Get("OTHER"), "value-other-123");
  // A registry writer without the key can neither give it another policy
  // (the info is sealed with the value) nor delete it (a tombstone is sealed too).
  auto other = reg_->SecretsNamed({"OTHER"})->front();
  const std::string loosened = R"({"policy":{"scope":"env","teams":["evil"]},"updatedAtMs":99999999999999})";
  ASSERT_TRUE(reg_->PublishSecret("OTHER", other.sealed, loosened, "x").ok());
  ASSERT_TRUE(b.replica->Refresh({"OTHER"}).ok());
  EXPECT_TRUE(b.store->PolicyOf("OTHER")->teams.empty());
  ASSERT_TRUE(reg_->PublishSecret("OTHER", "", R"({"deleted":true,"updatedAtMs":99999999999999})", "x").ok());
  ASSERT_TRUE(b.replica->Refresh({"OTHER"}).ok());
  EXPECT_EQ(*b.store->Get("OTHER"), "value-other-123");
}

// At start (Changed("")): secrets stored while the node was outside the
// cluster (or the registry unreachable) are published, unless another
// node's row is as new; this node's rows of secrets deleted meanwhile are
// tombstoned; other nodes' secrets are imported.
TEST_F(SecretReplicaTest, AtStartANodePublishesWhatItHasAndImportsTheRest) {
  Node& a = Start("a", key_);
  ASSERT_TRUE(a.store->Set("FROM_A", "value-from-a-1").ok());
  ASSERT_TRUE(a.store->Set("SHARED", "shared-from-a-1").ok());
  ASSERT_TRUE(a.store->Set("GONE_LATER", "value-gone-123").ok());
  a.replica->Flush();
  // b's store, filled before it joined (later than a's: another ms); its replica is made after.
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const std::string d = dir_.path + "/b";
  std::filesystem::create_directories(d);
  {
    auto s = secrets::SecretStore::Open(d + "/airlock.db", d + "/secrets.key");
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->Set("FROM_B", "value-from-b-1").ok());
    ASSERT_TRUE((*s)->Set("SHARED", "shared-from-b-1").ok());  // newer than a's
  }
  Node& b = Start("b", key_);
  b.replica->Changed("");
  b.replica->Flush();
  auto row = [&](const std::string& name) { return reg_->SecretsNamed({name})->front(); };
  EXPECT_EQ(row("FROM_B").publisher, "b");
  EXPECT_EQ(row("SHARED").publisher, "b");
  EXPECT_EQ(row("FROM_A").publisher, "a");
  EXPECT_TRUE(WaitFor([&] { return ValueOf(*b.store, "FROM_A") == "value-from-a-1"; }, std::chrono::seconds(10)));
  EXPECT_EQ(*b.store->Get("SHARED"), "shared-from-b-1");
  EXPECT_TRUE(WaitFor([&] { return ValueOf(*a.store, "SHARED") == "shared-from-b-1"; }, std::chrono::seconds(10)));
  EXPECT_TRUE(WaitFor([&] { return ValueOf(*a.store, "FROM_B") == "value-from-b-1"; }, std::chrono::seconds(10)));
  // A restart of a with nothing changed publishes nothing.
  const int64_t shared_ms = row("SHARED").updated_ms, from_a_ms = row("FROM_A").updated_ms;
  a.replica.reset();
  a.store->SetOnChange(nullptr);
  // Deleted while a's daemon was down (no observer): tombstoned at its start.
  ASSERT_TRUE(a.store->Remove("GONE_LATER").ok());
  a.replica = std::make_unique<SecretReplica>(
      *reg_, [&a]() -> StatusOr<secrets::SecretStore*> { return a.store.get(); },
      SecretReplicaConfig{"a", key_, std::chrono::milliseconds(50)}, nullptr);
  a.replica->Changed("");
  a.replica->Flush();
  EXPECT_NE(row("GONE_LATER").info.find("\"deleted\":true"), std::string::npos);
  EXPECT_EQ(row("SHARED").updated_ms, shared_ms);
  EXPECT_EQ(row("SHARED").publisher, "b");
  EXPECT_EQ(row("FROM_A").updated_ms, from_a_ms);
  EXPECT_TRUE(WaitFor([&] { return b.store->Info("GONE_LATER").status().code() == StatusCode::kNotFound; },
                      std::chrono::seconds(10)));
}

TEST_F(SecretReplicaTest, AReplicaWithAKeyOfTheWrongSizeDoesNothing) {
  Node& a = Start("a", "short");
  ASSERT_TRUE(a.store->Set("TOKEN", "value-of-a-123").ok());
  a.replica->Flush();
  EXPECT_TRUE(reg_->SecretsNamed({"TOKEN"})->empty());
  EXPECT_EQ(a.replica->Refresh({"TOKEN"}).code(), StatusCode::kFailedPrecondition);
}

TEST_F(ClusterRegistryTest, AnUnreachableDatabaseIsAClearError) {
  auto r = ClusterRegistry::Open("postgresql:///postgres?host=/nonexistent-dir&user=postgres", 1);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("cannot connect"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace airlock::cluster
