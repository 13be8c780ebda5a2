// The control API's route table (server/routes.h): every row has an audit
// action of its own and is reachable as written (no earlier row shadows
// it); the calls the official SDKs make resolve to the right row.
#include "server/routes.h"

#include <gtest/gtest.h>

#include <set>

#include "http/url.h"

namespace airlock::server {
namespace {

using M = http::Method;

// The pattern with each "{…}" replaced by p0, p1, …
std::string Instance(std::string_view pattern) {
  std::string out;
  int n = 0;
  for (const auto& s : http::PathSegments(pattern)) {
    out += "/";
    out += s.front() == '{' ? "p" + std::to_string(n++) : s;
  }
  return out;
}

TEST(RoutesTest, EveryRouteIsReachableAndAuditedUnderItsOwnAction) {
  std::set<std::pair<int, std::string>> seen;
  for (const Route& r : ControlRoutes()) {
    SCOPED_TRACE(std::string(r.pattern));
    EXPECT_TRUE(seen.insert({static_cast<int>(r.method), std::string(r.pattern)}).second) << "listed twice";
    ASSERT_FALSE(r.action.empty());
    EXPECT_NE(r.action, kUnknownRouteAction);
    EXPECT_NE(r.action.find('.'), std::string_view::npos) << "actions are <object>.<verb>: " << r.action;
    const std::string path = Instance(r.pattern);
    RouteMatch m = MatchControlRoute(r.method, path, path);
    ASSERT_EQ(m.route, &r) << "shadowed by " << (m.route ? m.route->pattern : "nothing");
    EXPECT_EQ(m.action(), r.action);
    if (r.sandbox) {
      ASSERT_FALSE(m.params.empty());
      EXPECT_EQ(m.params[0], "p0");
      EXPECT_NE(r.pattern.find("sandboxes/{id}"), std::string_view::npos);
    }
  }
}

struct Call {
  M method;
  const char* target;
  const char* action;
  std::vector<std::string> params;
};

TEST(RoutesTest, SdkCallsResolveToTheirActions) {
  const Call calls[] = {
      {M::kPost, "/v2/sandboxes", "sandbox.create", {}},
      {M::kGet, "/v2/sandboxes?state=running", "sandbox.list", {}},
      {M::kPost, "/v2/sandboxes/sb1/connect", "sandbox.connect", {"sb1"}},
      {M::kDelete, "/sandboxes/sb1", "sandbox.kill", {"sb1"}},
      {M::kGet, "/sandboxes/metrics?sandbox_ids=a", "sandbox.metrics_batch", {}},
      {M::kGet, "/v2/sandboxes/sb1/logs?limit=5", "sandbox.logs", {"sb1"}},
      {M::kDelete, "/sandboxes/sb1/checkpoints/cp1", "sandbox.checkpoint.delete", {"sb1", "cp1"}},
      {M::kGet, "/snapshots?sandboxID=sb1", "snapshot.list", {}},
      {M::kPost, "/v3/templates", "template.build.request", {}},
      {M::kGet, "/templates/t1/files/abc", "template.files.link", {"t1", "abc"}},
      {M::kPost, "/v2/templates/t1/builds/b1", "template.build.start", {"t1", "b1"}},
      {M::kGet, "/templates/t1/builds/b1/status?logsOffset=0", "template.build.status", {"t1", "b1"}},
      {M::kGet, "/templates/aliases/app%3Av2", "template.alias.get", {"app:v2"}},
      // A name with "%2F" stays one segment of the templates API.
      {M::kGet, "/templates/team%2Fapp", "template.get", {"team/app"}},
      // A literal row wins only for its own methods.
      {M::kGet, "/templates/tags", "template.get", {"tags"}},
      {M::kPost, "/templates/tags", "template.tags.assign", {}},
      {M::kDelete, "/templates/snap1", "template.delete", {"snap1"}},
      {M::kPatch, "/v2/templates/t1", "template.publish", {"t1"}},
      {M::kPost, "/secrets/s1", "secret.update", {"s1"}},
  };
  for (const Call& c : calls) {
    SCOPED_TRACE(c.target);
    std::string target = c.target;
    auto [path, query] = http::SplitTarget(target);
    RouteMatch m = MatchControlRoute(c.method, path, target);
    ASSERT_NE(m.route, nullptr);
    EXPECT_EQ(m.action(), c.action);
    EXPECT_EQ(m.params, c.params);
  }
}

TEST(RoutesTest, UnknownRoutesAre404And405) {
  // A made-up action under a sandbox is not audited under a name the caller chose.
  RouteMatch bogus = MatchControlRoute(M::kPost, "/sandboxes/sb1/bogus", "/sandboxes/sb1/bogus");
  EXPECT_EQ(bogus.route, nullptr);
  EXPECT_FALSE(bogus.other_method);
  EXPECT_EQ(bogus.action(), kUnknownRouteAction);
  RouteMatch wrong_method = MatchControlRoute(M::kPut, "/sandboxes/sb1/timeout", "/sandboxes/sb1/timeout");
  EXPECT_EQ(wrong_method.route, nullptr);
  EXPECT_TRUE(wrong_method.other_method);
  // "/v2" is part of a route's pattern, not stripped from every path.
  EXPECT_EQ(MatchControlRoute(M::kGet, "/v2/audit", "/v2/audit").route, nullptr);
  EXPECT_EQ(MatchControlRoute(M::kPut, "/v2/sandboxes/sb1/network", "/v2/sandboxes/sb1/network").route, nullptr);
  EXPECT_EQ(MatchControlRoute(M::kGet, "/", "/").route, nullptr);
  // A decoded "/" in a sandbox id splits the path: no sandbox row takes it.
  EXPECT_EQ(MatchControlRoute(M::kGet, "/sandboxes/a/b", "/sandboxes/a%2Fb").route, nullptr);
}

}  // namespace
}  // namespace airlock::server
