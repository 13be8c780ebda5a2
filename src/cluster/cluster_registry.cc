#include "cluster/cluster_registry.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "image/hash.h"

namespace airlock::cluster {
namespace {

// pg_advisory_xact_lock key of migrations ("airl" in ASCII, big-endian).
constexpr const char* kMigrationLock = "1634300524";

// Migration N is kMigrations[N-1]; never edit one that has shipped, add the next.
const char* const kMigrations[] = {
    R"sql(
CREATE TABLE nodes (
  name          text PRIMARY KEY,
  address       text NOT NULL,
  capacity      integer NOT NULL CHECK (capacity >= 0),
  reserved      integer NOT NULL DEFAULT 0 CHECK (reserved >= 0),
  draining      boolean NOT NULL DEFAULT false,
  live          boolean NOT NULL DEFAULT true,
  boot_id       text NOT NULL,
  heartbeat     timestamptz NOT NULL DEFAULT now(),
  registered_at timestamptz NOT NULL DEFAULT now(),
  version       text NOT NULL DEFAULT ''
);
CREATE TABLE node_templates (
  node     text NOT NULL REFERENCES nodes(name) ON DELETE CASCADE,
  template text NOT NULL,
  PRIMARY KEY (node, template)
);
CREATE INDEX node_templates_template ON node_templates (template);
CREATE TABLE sandboxes (
  id         text PRIMARY KEY,
  node       text NOT NULL REFERENCES nodes(name) ON DELETE CASCADE,
  created_at timestamptz NOT NULL DEFAULT now(),
  lost_at    timestamptz
);
CREATE INDEX sandboxes_node ON sandboxes (node);
CREATE TABLE api_keys (
  id            text PRIMARY KEY,
  name          text NOT NULL,
  prefix        text NOT NULL,
  hash          text NOT NULL UNIQUE,
  created_at_ms bigint NOT NULL,
  team          text NOT NULL,
  admin         boolean NOT NULL DEFAULT false
);
CREATE TABLE cluster_meta (key text PRIMARY KEY, value text NOT NULL);
CREATE SEQUENCE api_keys_version;
CREATE FUNCTION airlock_api_keys_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM nextval('api_keys_version'); RETURN NULL; END $$;
CREATE TRIGGER api_keys_changed AFTER INSERT OR UPDATE OR DELETE ON api_keys
  FOR EACH STATEMENT EXECUTE FUNCTION airlock_api_keys_bump();
-- Fronts cache sandbox -> node; a moved, lost or removed sandbox is announced.
CREATE FUNCTION airlock_sandbox_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_notify('airlock_sandbox', OLD.id); RETURN NULL; END $$;
CREATE TRIGGER sandboxes_changed AFTER UPDATE OR DELETE ON sandboxes
  FOR EACH ROW EXECUTE FUNCTION airlock_sandbox_changed();
)sql",
    // 2: reservations with their time (issue 32): a front's slot is freed only
    // by the node's refusal, used by the node's record, or dropped after the
    // TTL; each heartbeat recounts `reserved` from them and the sandboxes.
    R"sql(
CREATE TABLE reservations (
  id      bigserial PRIMARY KEY,
  node    text NOT NULL REFERENCES nodes(name) ON DELETE CASCADE,
  made_at timestamptz NOT NULL DEFAULT now(),
  used_at timestamptz
);
CREATE INDEX reservations_node ON reservations (node, made_at);
-- The oldest unused one of a node (a record, a release) and their count.
CREATE INDEX reservations_unused ON reservations (node, id) WHERE used_at IS NULL;
-- Slots reserved by fronts of schema 1 have no row: recounted at the next heartbeat.
)sql",
    // 3: a reservation is bound to its create (issue 38 item 4): the front
    // gives the node a random token, not a shared secret; the node claims
    // it once, for its own name, for the body it was made for, within the
    // TTL (ClaimReservation), and marks that very row used. Until the node
    // claims it, the front that made it renews its lease (lease_until): a
    // front that dies lets its slots go within kReservationLease.
    R"sql(
ALTER TABLE reservations ADD COLUMN token text, ADD COLUMN body_sha256 text, ADD COLUMN claimed_at timestamptz,
  ADD COLUMN lease_until timestamptz;
CREATE UNIQUE INDEX reservations_token ON reservations (token);
DELETE FROM cluster_meta WHERE key = 'reservation_secret';
-- The node a create with an Idempotency-Key went to (24 h): a retry
-- through any front goes there, where the key is remembered.
CREATE TABLE idempotency_routes (
  team    text NOT NULL,
  key     text NOT NULL,
  node    text NOT NULL REFERENCES nodes(name) ON DELETE CASCADE,
  made_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (team, key)
);
CREATE INDEX idempotency_routes_made_at ON idempotency_routes (made_at);
)sql",
    // 4: custom templates on every node (issue 38 item 1): the node that
    // builds a template publishes its bundle (bundle NULL: deleted), every
    // node records the content-addressed files (images) it holds, and a
    // node fetching one from another carries a short-lived grant. Secrets
    // on every node (issue 38 item 3): each node publishes its secrets
    // sealed with the cluster key.
    R"sql(
CREATE TABLE template_bundles (
  template_id text PRIMARY KEY,
  team        text NOT NULL,
  names       text[] NOT NULL,
  publisher   text NOT NULL,
  bundle      text,
  updated_at  timestamptz NOT NULL DEFAULT now()
);
-- names @> ARRAY[$1]: a lookup by any alias.
CREATE INDEX template_bundles_names ON template_bundles USING gin (names);
-- No reference to nodes: a node's files outlive its row's changes.
CREATE TABLE node_artefacts (
  node    text NOT NULL,
  digest  text NOT NULL,
  size    bigint NOT NULL CHECK (size >= 0),
  made_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (node, digest)
);
CREATE INDEX node_artefacts_digest ON node_artefacts (digest);
CREATE TABLE artefact_grants (
  id        bigserial PRIMARY KEY,
  token     text NOT NULL UNIQUE,
  digest    text NOT NULL,
  holder    text NOT NULL,
  requester text NOT NULL,
  made_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX artefact_grants_made_at ON artefact_grants (made_at);
-- Secrets on every node (issue 38 item 3): each value sealed with the
-- cluster key (AES-256-GCM, nonce|ciphertext|tag in base64; never in
-- clear); sealed NULL: deleted. info: its policy, API attributes, size and
-- times (JSON).
CREATE TABLE cluster_secrets (
  name       text PRIMARY KEY,
  sealed     text,
  info       text NOT NULL,
  publisher  text NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX cluster_secrets_updated_at ON cluster_secrets (updated_at);
)sql",
};
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) == kSchemaVersion);

// A PostgreSQL text[] literal of `items`, each quoted.
std::string ArrayLiteral(const std::vector<std::string>& items) {
  std::string out = "{";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ',';
    out += '"';
    for (char ch : items[i]) {
      if (ch == '"' || ch == '\\') out += '\\';
      out += ch;
    }
    out += '"';
  }
  return out + "}";
}

std::string Ms(std::chrono::milliseconds d) { return std::to_string(d.count()); }

// The node's node_templates rows become `templates` (inside a transaction).
Status ReplaceTemplates(PgPool::Lease& c, const std::string& node, const std::vector<std::string>& templates) {
  RETURN_IF_ERROR(c->Exec("DELETE FROM node_templates WHERE node = $1", {node}).status());
  return c
      ->Exec("INSERT INTO node_templates (node, template) SELECT $1, unnest($2::text[]) ON CONFLICT DO NOTHING",
             {node, ArrayLiteral(templates)})
      .status();
}

// Runs `body` in one transaction on one connection; rolls back on error.
template <typename F>
Status InTx(PgPool& pool, F body) {
  ASSIGN_OR_RETURN(auto c, pool.Acquire());
  RETURN_IF_ERROR(c->Exec("BEGIN").status());
  Status st = body(c);
  if (!st.ok()) {
    (void)c->Exec("ROLLBACK");
    return st;
  }
  return c->Exec("COMMIT").status();
}

constexpr const char* kFresh = "heartbeat > now() - make_interval(secs => $LAPSE::float8 / 1000)";

// Takes the node row's lock for the rest of the transaction: every change
// of a node's count (reservations, records, the heartbeat's recount) goes
// one at a time, so two records never take the same reservation and a
// recount sees every change committed before it.
Status LockNode(PgPool::Lease& c, const std::string& node) {
  return c->Exec("SELECT 1 FROM nodes WHERE name = $1 FOR UPDATE", {node}).status();
}

std::string WithLapse(std::string sql, const std::string& param) {
  for (size_t p; (p = sql.find("$LAPSE")) != std::string::npos;) sql.replace(p, 6, param);
  return sql;
}

// The columns ReadNodeRows reads, of `nodes n`.
constexpr const char* kNodeColumns =
    "n.name, n.address, n.boot_id, n.capacity, n.reserved, n.draining, n.live, "
    "(extract(epoch FROM now() - n.heartbeat) * 1000)::bigint, n.version, "
    "array_to_string(array(SELECT template FROM node_templates t WHERE t.node = n.name ORDER BY 1), ',')";

std::vector<NodeInfo> ReadNodeRows(const PgRows& r) {
  std::vector<NodeInfo> out;
  for (size_t i = 0; i < r.rows.size(); ++i) {
    NodeInfo n;
    n.name = r.Text(i, 0);
    n.address = r.Text(i, 1);
    n.boot_id = r.Text(i, 2);
    n.capacity = std::stoi(r.Text(i, 3));
    n.reserved = std::stoi(r.Text(i, 4));
    n.draining = r.Text(i, 5) == "t";
    n.live = r.Text(i, 6) == "t";
    n.heartbeat_age_ms = std::stoll(r.Text(i, 7));
    n.version = r.Text(i, 8);
    std::string t = r.Text(i, 9);
    for (size_t p = 0; !t.empty() && p <= t.size();) {
      size_t q = t.find(',', p);
      if (q == std::string::npos) q = t.size();
      n.templates.push_back(t.substr(p, q - p));
      p = q + 1;
    }
    out.push_back(std::move(n));
  }
  return out;
}

bool LowerHexOfSize(const std::string& s, size_t size) {
  return s.size() == size && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

Status CheckArtefactDigest(const std::string& digest) {
  if (LowerHexOfSize(digest, 64)) return OkStatus();
  return InvalidArgument("an artefact digest is 64 lower-case hex digits (SHA-256), got " +
                         std::to_string(digest.size()) + " characters");
}

}  // namespace

StatusOr<std::unique_ptr<ClusterRegistry>> ClusterRegistry::Open(const std::string& url, size_t pool) {
  std::unique_ptr<ClusterRegistry> r(new ClusterRegistry(url, std::max<size_t>(pool, 1)));
  RETURN_IF_ERROR(r->Migrate());
  return r;
}

Status ClusterRegistry::Migrate() {
  return InTx(pool_, [](PgPool::Lease& c) -> Status {
    RETURN_IF_ERROR(c->Exec(std::string("SELECT pg_advisory_xact_lock(") + kMigrationLock + ")").status());
    RETURN_IF_ERROR(c->ExecScript(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, "
        "applied_at timestamptz NOT NULL DEFAULT now())"));
    ASSIGN_OR_RETURN(auto v, c->Exec("SELECT coalesce(max(version), 0) FROM schema_migrations"));
    int have = std::stoi(v.Text(0, 0));
    if (have > kSchemaVersion) {
      return FailedPrecondition("the cluster registry has schema version " + std::to_string(have) +
                                ", newer than this airlock's " + std::to_string(kSchemaVersion) +
                                ": upgrade this binary");
    }
    for (int n = have + 1; n <= kSchemaVersion; ++n) {
      if (Status st = c->ExecScript(kMigrations[n - 1]); !st.ok()) {
        return Status(st.code(), "migration " + std::to_string(n) + ": " + st.message());
      }
      RETURN_IF_ERROR(c->Exec("INSERT INTO schema_migrations (version) VALUES ($1)", {std::to_string(n)}).status());
    }
    return OkStatus();
  });
}

Status ClusterRegistry::RegisterNode(const NodeInfo& node, const std::vector<std::string>& sandbox_ids) {
  const std::string ids = ArrayLiteral(sandbox_ids);
  return InTx(pool_, [&](PgPool::Lease& c) -> Status {
    RETURN_IF_ERROR(c->Exec("INSERT INTO nodes (name, address, capacity, reserved, live, boot_id, heartbeat, version) "
                            "VALUES ($1, $2, $3, 0, true, $4, now(), $5) ON CONFLICT (name) DO UPDATE SET "
                            "address = EXCLUDED.address, capacity = EXCLUDED.capacity, live = true, "
                            "boot_id = EXCLUDED.boot_id, heartbeat = now(), version = EXCLUDED.version",
                            {node.name, node.address, std::to_string(node.capacity), node.boot_id, node.version})
                        .status());
    RETURN_IF_ERROR(
        c->Exec("DELETE FROM sandboxes WHERE node = $1 AND NOT (id = ANY($2::text[]))", {node.name, ids}).status());
    // Creates in flight to an earlier boot are gone with it; one still
    // recorded later is counted then (no reservation left to use).
    RETURN_IF_ERROR(c->Exec("DELETE FROM reservations WHERE node = $1", {node.name}).status());
    RETURN_IF_ERROR(c->Exec("INSERT INTO sandboxes (id, node) SELECT unnest($2::text[]), $1 ON CONFLICT (id) "
                            "DO UPDATE SET node = EXCLUDED.node, lost_at = NULL",
                            {node.name, ids})
                        .status());
    RETURN_IF_ERROR(c->Exec("UPDATE nodes SET reserved = (SELECT count(*) FROM sandboxes WHERE node = $1) "
                            "WHERE name = $1",
                            {node.name})
                        .status());
    return ReplaceTemplates(c, node.name, node.templates);
  });
}

StatusOr<Beat> ClusterRegistry::Heartbeat(const std::string& name, const std::string& boot_id,
                                          std::chrono::milliseconds reservation_ttl) {
  Beat beat;
  RETURN_IF_ERROR(InTx(pool_, [&](PgPool::Lease& c) -> Status {
    // The beat takes the row's lock, so the recount below (a statement of
    // its own, with a snapshot taken after the lock) sees every change.
    ASSIGN_OR_RETURN(auto b, c->Exec("UPDATE nodes SET heartbeat = now() WHERE name = $1 AND boot_id = $2 AND live "
                                     "RETURNING reserved",
                                     {name, boot_id}));
    if (b.empty()) return OkStatus();
    beat.registered = true;
    beat.reserved_was = std::stoi(b.Text(0, 0));
    // A reservation still holds its slot while unused and younger than the
    // TTL, and, until the node claims it, while its front renews its lease;
    // the rest are dropped (a front that died mid-create) and counted.
    ASSIGN_OR_RETURN(
        auto r,
        c->Exec("WITH old AS (DELETE FROM reservations WHERE node = $1 AND used_at IS NULL AND "
                "(made_at < now() - make_interval(secs => $2::float8 / 1000) OR "
                "(claimed_at IS NULL AND lease_until IS NOT NULL AND lease_until <= now())) RETURNING 1) "
                "UPDATE nodes SET reserved = (SELECT count(*) FROM sandboxes WHERE node = $1 AND lost_at IS NULL) + "
                "(SELECT count(*) FROM reservations WHERE node = $1 AND used_at IS NULL AND "
                "made_at >= now() - make_interval(secs => $2::float8 / 1000) AND "
                "(claimed_at IS NOT NULL OR lease_until IS NULL OR lease_until > now())) WHERE name = $1 "
                "RETURNING reserved, (SELECT count(*) FROM old)",
                {name, Ms(reservation_ttl)}));
    beat.reserved = r.empty() ? 0 : std::stoi(r.Text(0, 0));
    beat.dropped = r.empty() ? 0 : std::stoi(r.Text(0, 1));
    // Used reservations are history once their sandbox is recorded.
    RETURN_IF_ERROR(c->Exec("DELETE FROM reservations WHERE node = $1 AND used_at < now() - "
                            "make_interval(secs => $2::float8 / 1000)",
                            {name, Ms(reservation_ttl)})
                        .status());
    return OkStatus();
  }));
  return beat;
}

Status ClusterRegistry::SetTemplates(const std::string& name, const std::vector<std::string>& templates) {
  return InTx(pool_, [&](PgPool::Lease& c) { return ReplaceTemplates(c, name, templates); });
}

Status ClusterRegistry::SetDraining(const std::string& name, bool draining) {
  ASSIGN_OR_RETURN(auto r, pool_.Exec("UPDATE nodes SET draining = $2 WHERE name = $1",
                                      {name, std::string(draining ? "true" : "false")}));
  if (r.affected == 0) return NotFound("node " + name + " is not registered");
  return OkStatus();
}

StatusOr<std::vector<NodeInfo>> ClusterRegistry::Nodes() {
  ASSIGN_OR_RETURN(auto r, pool_.Exec(std::string("SELECT ") + kNodeColumns + " FROM nodes n ORDER BY name"));
  return ReadNodeRows(r);
}

Status ClusterRegistry::Leave(const std::string& name, const std::string& boot_id) {
  return pool_
      .Exec("WITH gone AS (UPDATE nodes SET live = false, reserved = 0 WHERE name = $1 AND boot_id = $2 AND live "
            "RETURNING name), dropped AS (DELETE FROM reservations WHERE node IN (SELECT name FROM gone)) "
            "UPDATE sandboxes SET lost_at = now() WHERE lost_at IS NULL AND node IN (SELECT name FROM gone)",
            {name, boot_id})
      .status();
}

StatusOr<std::vector<std::string>> ClusterRegistry::MarkLapsed(std::chrono::milliseconds lapse) {
  ASSIGN_OR_RETURN(auto r,
                   pool_.Exec("WITH lapsed AS (UPDATE nodes SET live = false, reserved = 0 WHERE live AND "
                              "heartbeat < now() - make_interval(secs => $1::float8 / 1000) RETURNING name), "
                              "lost AS (UPDATE sandboxes SET lost_at = now() WHERE lost_at IS NULL AND "
                              "node IN (SELECT name FROM lapsed) RETURNING 1), "
                              "dropped AS (DELETE FROM reservations WHERE node IN (SELECT name FROM lapsed)) "
                              "SELECT name, (SELECT count(*) FROM lost) FROM lapsed",
                              {Ms(lapse)}));
  std::vector<std::string> out;
  for (size_t i = 0; i < r.rows.size(); ++i) out.push_back(r.Text(i, 0));
  return out;
}

StatusOr<Placement> ClusterRegistry::Place(const std::string& template_name, int k, std::chrono::milliseconds lapse,
                                           const std::string& body_sha256, const std::string& only_node,
                                           bool any_node_fallback) {
  // only_node (a retry of an Idempotency-Key's create): that node, draining
  // or not (its answer is the first call's), and its templates are its own.
  ASSIGN_OR_RETURN(
      auto r, pool_.Exec(WithLapse(std::string("SELECT name, capacity - reserved FROM nodes n WHERE live AND "
                                               "(NOT draining OR n.name = $3::text) AND ") +
                                       kFresh +
                                       " AND reserved < capacity AND ($3::text = '' OR n.name = $3::text) AND "
                                       "($3::text <> '' OR NOT EXISTS (SELECT 1 FROM node_templates "
                                       "WHERE template = $1) OR EXISTS (SELECT 1 FROM node_templates t WHERE "
                                       "t.node = n.name AND t.template = $1))",
                                   "$2"),
                         {template_name, Ms(lapse), only_node}));
  struct Candidate {
    std::string name;
    int free;
  };
  auto candidates = [this](const PgRows& rows) {
    std::vector<Candidate> out;
    for (size_t i = 0; i < rows.rows.size(); ++i) out.push_back({rows.Text(i, 0), std::stoi(rows.Text(i, 1))});
    std::lock_guard<std::mutex> l(rng_mu_);
    std::shuffle(out.begin(), out.end(), rng_);
    return out;
  };
  std::vector<Candidate> all = candidates(r);
  // The slot and its reservation row (with its time) in one statement.
  const std::string reserve =
      WithLapse(std::string("WITH n AS (UPDATE nodes SET reserved = reserved + 1 WHERE name = $1 AND "
                            "live AND (NOT draining OR name = $6::text) AND ") +
                    kFresh +
                    " AND reserved + 1 <= capacity RETURNING name, address), "
                    "r AS (INSERT INTO reservations (node, token, body_sha256, lease_until) SELECT name, $3::text, "
                    "$4::text, now() + $5 * interval '1 millisecond' FROM n RETURNING id) "
                    "SELECT n.address, r.id FROM n, r",
                "$2");
  int tried = 0;
  // Tries `set` K at a time; nullopt when every one refused.
  auto try_in_turn = [&](std::vector<Candidate>& set) -> StatusOr<std::optional<Placement>> {
    for (size_t start = 0; start < set.size(); start += static_cast<size_t>(std::max(k, 1))) {
      size_t end = std::min(set.size(), start + static_cast<size_t>(std::max(k, 1)));
      // Of the K sampled, the one with the most free slots first.
      std::stable_sort(set.begin() + static_cast<long>(start), set.begin() + static_cast<long>(end),
                       [](const Candidate& a, const Candidate& b) { return a.free > b.free; });
      for (size_t i = start; i < end; ++i) {
        const std::string token = RandomHex(16);  // 16 bytes, 32 hex digits
        if (token.size() != 32) return Internal("no randomness for a reservation token");
        ASSIGN_OR_RETURN(auto u, pool_.Exec(reserve, {set[i].name, Ms(lapse), token, body_sha256,
                                                      Ms(kReservationLease), only_node}));
        if (!u.empty()) {
          return std::optional<Placement>(Placement{set[i].name, u.Text(0, 0), tried, std::stoll(u.Text(0, 1)), token});
        }
        ++tried;
      }
    }
    return std::optional<Placement>();
  };
  ASSIGN_OR_RETURN(auto placed, try_in_turn(all));
  if (placed) return *std::move(placed);
  size_t seen = all.size();
  if (any_node_fallback && only_node.empty()) {
    // The nodes that do not list the template (they fetch it), those
    // already tried excepted.
    std::vector<std::string> names;
    for (const auto& c : all) names.push_back(c.name);
    ASSIGN_OR_RETURN(auto o, pool_.Exec(WithLapse(std::string("SELECT name, capacity - reserved FROM nodes n WHERE "
                                                              "live AND NOT draining AND ") +
                                                      kFresh +
                                                      " AND reserved < capacity AND NOT (n.name = ANY($2::text[]))",
                                                  "$1"),
                                        {Ms(lapse), ArrayLiteral(names)}));
    std::vector<Candidate> rest = candidates(o);
    seen += rest.size();
    ASSIGN_OR_RETURN(placed, try_in_turn(rest));
    if (placed) return *std::move(placed);
  }
  return ResourceExhausted(seen == 0 ? "no live node has free capacity" +
                                           std::string(template_name.empty() ? "" : " for template " + template_name)
                                     : "no capacity: " + std::to_string(tried) +
                                           " candidate node(s) filled up while placing");
}

StatusOr<std::string> ClusterRegistry::IdempotencyNode(const std::string& team, const std::string& key) {
  ASSIGN_OR_RETURN(auto r, pool_.Exec("SELECT i.node FROM idempotency_routes i JOIN nodes n ON n.name = i.node WHERE "
                                      "i.team = $1 AND i.key = $2 AND i.made_at > now() - interval '24 hours' AND "
                                      "n.live",
                                      {team, key}));
  return r.empty() ? std::string() : r.Text(0, 0);
}

StatusOr<std::string> ClusterRegistry::RecordIdempotencyNode(const std::string& team, const std::string& key,
                                                             const std::string& node) {
  // A row of a node that is gone or lost, or older than the window, is
  // replaced; a live one (a concurrent create through another front) wins.
  ASSIGN_OR_RETURN(auto r, pool_.Exec("INSERT INTO idempotency_routes (team, key, node) VALUES ($1, $2, $3) "
                                      "ON CONFLICT (team, key) DO UPDATE SET node = EXCLUDED.node, made_at = now() "
                                      "WHERE idempotency_routes.made_at <= now() - interval '24 hours' OR NOT EXISTS "
                                      "(SELECT 1 FROM nodes WHERE name = idempotency_routes.node AND live) "
                                      "RETURNING node",
                                      {team, key, node}));
  if (!r.empty()) return r.Text(0, 0);
  ASSIGN_OR_RETURN(auto w, pool_.Exec("SELECT node FROM idempotency_routes WHERE team = $1 AND key = $2", {team, key}));
  return w.empty() ? node : w.Text(0, 0);
}

Status ClusterRegistry::ForgetOldIdempotencyRoutes() {
  return pool_.Exec("DELETE FROM idempotency_routes WHERE made_at < now() - interval '24 hours'").status();
}

Status ClusterRegistry::Release(const std::string& node, int64_t reservation) {
  // Its own row, while unused. Gone (dropped by its lease, the TTL or a
  // lapse; released already, by the node or the front) or used: nothing,
  // so a slot is never freed twice.
  return InTx(pool_, [&](PgPool::Lease& c) -> Status {
    RETURN_IF_ERROR(LockNode(c, node));
    return c
        ->Exec("WITH own AS (DELETE FROM reservations WHERE id = $2 AND node = $1 AND used_at IS NULL RETURNING 1) "
               "UPDATE nodes SET reserved = greatest(0, reserved - (SELECT count(*) FROM own)) WHERE name = $1",
               {node, std::to_string(reservation)})
        .status();
  });
}

Status ClusterRegistry::RenewLeases(const std::vector<int64_t>& reservations, std::chrono::milliseconds lease) {
  if (reservations.empty()) return OkStatus();
  std::string ids = "{";
  for (size_t i = 0; i < reservations.size(); ++i) ids += (i ? "," : "") + std::to_string(reservations[i]);
  ids += "}";
  return pool_
      .Exec("UPDATE reservations SET lease_until = now() + $2 * interval '1 millisecond' WHERE id = ANY($1::bigint[]) "
            "AND claimed_at IS NULL AND used_at IS NULL",
            {ids, Ms(lease)})
      .status();
}

StatusOr<int64_t> ClusterRegistry::ClaimReservation(const std::string& node, const std::string& token,
                                                    const std::string& body_sha256, std::chrono::milliseconds ttl) {
  if (token.empty() || token.size() > 128) return PermissionDenied("the create's reservation is not one this cluster made");
  ASSIGN_OR_RETURN(auto r, pool_.Exec("UPDATE reservations SET claimed_at = now() WHERE token = $1 AND node = $2 AND "
                                      "claimed_at IS NULL AND used_at IS NULL AND body_sha256 = $3 AND "
                                      "made_at > now() - $4 * interval '1 millisecond' AND "
                                      "(lease_until IS NULL OR lease_until > now()) RETURNING id",
                                      {token, node, body_sha256, Ms(ttl)}));
  if (!r.empty()) return std::stoll(r.Text(0, 0));
  // Why not, for the refusal (the token is the front's secret: never echoed).
  ASSIGN_OR_RETURN(auto w, pool_.Exec("SELECT node, claimed_at IS NOT NULL OR used_at IS NOT NULL, body_sha256 = $2, "
                                      "made_at > now() - $3 * interval '1 millisecond' AND "
                                      "(lease_until IS NULL OR lease_until > now()) FROM reservations WHERE "
                                      "token = $1",
                                      {token, body_sha256, Ms(ttl)}));
  if (w.empty()) return PermissionDenied("the create's reservation is not one this cluster holds (unknown, released or dropped)");
  if (w.Text(0, 0) != node) return PermissionDenied("the create's reservation is for node " + w.Text(0, 0) + ", not " + node);
  if (w.Text(0, 1) == "t") return PermissionDenied("the create's reservation was already used");
  if (w.Text(0, 2) != "t") return PermissionDenied("the create's reservation was made for another create");
  return PermissionDenied("the create's reservation expired (its front stopped renewing it, or it is older than the TTL)");
}

Status ClusterRegistry::AddSandbox(const std::string& id, const std::string& node, int64_t reservation) {
  if (reservation == kWithinCapacity) {
    // A fork child: counted only while the node has a free slot (no front
    // reserved one for it), so a fork never takes a node past its capacity.
    return InTx(pool_, [&](PgPool::Lease& c) -> Status {
      RETURN_IF_ERROR(LockNode(c, node));
      ASSIGN_OR_RETURN(auto r, c->Exec("SELECT reserved, capacity, EXISTS (SELECT 1 FROM sandboxes WHERE id = $1) "
                                       "FROM nodes WHERE name = $2",
                                       {id, node}));
      if (r.empty()) return NotFound("node " + node + " is not in the cluster registry");
      if (r.Text(0, 2) == "t") return OkStatus();  // counted already (the sync's)
      if (std::stoll(r.Text(0, 0)) + 1 > std::stoll(r.Text(0, 1)))
        return ResourceExhausted("node " + node + " is at its capacity (" + r.Text(0, 1) +
                                 " sandboxes): no room for a fork child");
      return c
          ->Exec("WITH ins AS (INSERT INTO sandboxes (id, node) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING "
                 "RETURNING 1) UPDATE nodes SET reserved = reserved + (SELECT count(*) FROM ins) WHERE name = $2",
                 {id, node})
          .status();
    });
  }
  if (reservation == 0) {
    // A fork child or the sync's: counted when inserted, once.
    return pool_
        .Exec("WITH ins AS (INSERT INTO sandboxes (id, node) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING RETURNING 1) "
              "UPDATE nodes SET reserved = reserved + (SELECT count(*) FROM ins) WHERE name = $2",
              {id, node})
        .status();
  }
  // A front holds its slot: the row replaces the create's own reservation
  // (claimed by ClaimReservation) in the count (+1 inserted, -1 used).
  // Already there (the sync counted it first): the reservation's slot is
  // freed. The reservation gone meanwhile (dropped): counted.
  return InTx(pool_, [&](PgPool::Lease& c) -> Status {
    RETURN_IF_ERROR(LockNode(c, node));
    return c
        ->Exec("WITH ins AS (INSERT INTO sandboxes (id, node) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING RETURNING 1), "
               "used AS (UPDATE reservations SET used_at = now() WHERE id = $3 AND node = $2 AND used_at IS NULL "
               "RETURNING 1) "
               "UPDATE nodes SET reserved = greatest(0, reserved + (SELECT count(*) FROM ins) - "
               "(SELECT count(*) FROM used)) WHERE name = $2",
               {id, node, std::to_string(reservation)})
        .status();
  });
}

Status ClusterRegistry::RemoveSandbox(const std::string& id, const std::string& node) {
  return pool_
      .Exec("WITH d AS (DELETE FROM sandboxes WHERE id = $1 AND node = $2 RETURNING lost_at) "
            "UPDATE nodes SET reserved = greatest(0, reserved - (SELECT count(*) FROM d WHERE lost_at IS NULL)) "
            "WHERE name = $2",
            {id, node})
      .status();
}

StatusOr<std::optional<SandboxLocation>> ClusterRegistry::Locate(const std::string& id) {
  ASSIGN_OR_RETURN(auto r, pool_.Exec("SELECT s.node, n.address, s.lost_at IS NOT NULL, "
                                      "coalesce((extract(epoch FROM s.lost_at) * 1000)::bigint, 0) "
                                      "FROM sandboxes s JOIN nodes n ON n.name = s.node WHERE s.id = $1",
                                      {id}));
  if (r.empty()) return std::optional<SandboxLocation>();
  SandboxLocation l{r.Text(0, 0), r.Text(0, 1), r.Text(0, 2) == "t", std::stoll(r.Text(0, 3))};
  return std::optional<SandboxLocation>(std::move(l));
}

Status ClusterRegistry::PublishTemplate(const std::string& template_id, const std::string& team,
                                        const std::vector<std::string>& names, const std::string& publisher,
                                        const std::string& bundle) {
  if (template_id.empty() || team.empty() || publisher.empty())
    return InvalidArgument("a published template needs its id, team and publisher");
  std::vector<std::string> all = names;
  if (std::find(all.begin(), all.end(), template_id) == all.end()) all.insert(all.begin(), template_id);
  return pool_
      .Exec("INSERT INTO template_bundles (template_id, team, names, publisher, bundle, updated_at) "
            "VALUES ($1, $2, $3::text[], $4, $5, now()) ON CONFLICT (template_id) DO UPDATE SET "
            "team = EXCLUDED.team, names = EXCLUDED.names, publisher = EXCLUDED.publisher, "
            "bundle = EXCLUDED.bundle, updated_at = now()",
            {template_id, team, ArrayLiteral(all), publisher, bundle.empty() ? PgParam() : PgParam(bundle)})
      .status();
}

StatusOr<std::vector<TemplateBundle>> ClusterRegistry::TemplateBundlesNamed(const std::string& name) {
  return TemplateBundlesWhere("template_id = $1 OR names @> ARRAY[$1::text]", name);
}

StatusOr<std::vector<TemplateBundle>> ClusterRegistry::TemplateBundlesSince(int64_t since_ms) {
  return TemplateBundlesWhere("updated_at >= to_timestamp($1::float8 / 1000)", std::to_string(since_ms));
}

StatusOr<std::vector<TemplateBundle>> ClusterRegistry::TemplateBundlesWhere(const std::string& where,
                                                                           const std::string& arg) {
  // array_to_json: the names without text[]'s quoting rules.
  ASSIGN_OR_RETURN(auto r, pool_.Exec("SELECT template_id, team, publisher, array_to_json(names)::text, bundle, "
                                      "(extract(epoch FROM updated_at) * 1000)::bigint FROM template_bundles "
                                      "WHERE " + where + " ORDER BY updated_at, template_id",
                                      {arg}));
  std::vector<TemplateBundle> out;
  for (size_t i = 0; i < r.rows.size(); ++i) {
    TemplateBundle b;
    b.template_id = r.Text(i, 0);
    b.team = r.Text(i, 1);
    b.publisher = r.Text(i, 2);
    auto names = nlohmann::json::parse(r.Text(i, 3), nullptr, false);
    if (names.is_array()) {
      for (const auto& n : names) {
        if (n.is_string()) b.names.push_back(n.get<std::string>());
      }
    }
    b.bundle = r.Text(i, 4);  // NULL: ""
    b.updated_ms = std::stoll(r.Text(i, 5));
    out.push_back(std::move(b));
  }
  return out;
}

Status ClusterRegistry::RecordArtefact(const std::string& node, const std::string& digest, int64_t size) {
  RETURN_IF_ERROR(CheckArtefactDigest(digest));
  if (node.empty() || size < 0) return InvalidArgument("an artefact record needs its node and a size >= 0");
  return pool_
      .Exec("INSERT INTO node_artefacts (node, digest, size) VALUES ($1, $2, $3) ON CONFLICT (node, digest) "
            "DO UPDATE SET size = EXCLUDED.size, made_at = now()",
            {node, digest, std::to_string(size)})
      .status();
}

Status ClusterRegistry::ForgetArtefact(const std::string& node, const std::string& digest) {
  RETURN_IF_ERROR(CheckArtefactDigest(digest));
  return pool_.Exec("DELETE FROM node_artefacts WHERE node = $1 AND digest = $2", {node, digest}).status();
}

StatusOr<std::vector<NodeInfo>> ClusterRegistry::ArtefactHolders(const std::string& digest,
                                                                 std::chrono::milliseconds lapse) {
  RETURN_IF_ERROR(CheckArtefactDigest(digest));
  ASSIGN_OR_RETURN(auto r, pool_.Exec(WithLapse(std::string("SELECT ") + kNodeColumns +
                                                    " FROM nodes n JOIN node_artefacts a ON a.node = n.name "
                                                    "WHERE a.digest = $1 AND n.live AND n." +
                                                    kFresh,
                                                "$2"),
                                      {digest, Ms(lapse)}));
  std::vector<NodeInfo> out = ReadNodeRows(r);
  std::lock_guard<std::mutex> l(rng_mu_);
  std::shuffle(out.begin(), out.end(), rng_);
  return out;
}

StatusOr<std::string> ClusterRegistry::GrantArtefact(const std::string& requester, const std::string& holder,
                                                     const std::string& digest) {
  RETURN_IF_ERROR(CheckArtefactDigest(digest));
  if (requester.empty() || holder.empty()) return InvalidArgument("an artefact grant needs its requester and holder");
  const std::string token = RandomHex(16);  // 16 bytes, 32 hex digits
  if (!LowerHexOfSize(token, 32)) return Internal("no randomness for an artefact grant");
  // The old grants go on the way (twice the TTL: a check racing the
  // expiry still finds its row and says "expired").
  RETURN_IF_ERROR(pool_
                      .Exec("WITH old AS (DELETE FROM artefact_grants WHERE made_at < now() - "
                            "$5::float8 * 2 * interval '1 millisecond') "
                            "INSERT INTO artefact_grants (token, digest, holder, requester) VALUES ($1, $2, $3, $4)",
                            {token, digest, holder, requester, Ms(kArtefactGrantTtl)})
                      .status());
  return token;
}

Status ClusterRegistry::CheckArtefactGrant(const std::string& holder, const std::string& token,
                                           const std::string& digest) {
  if (!LowerHexOfSize(token, 32)) return InvalidArgument("an artefact grant is 32 lower-case hex digits");
  RETURN_IF_ERROR(CheckArtefactDigest(digest));
  ASSIGN_OR_RETURN(auto r, pool_.Exec("SELECT holder, digest = $2, made_at > now() - $3 * interval '1 millisecond' "
                                      "FROM artefact_grants WHERE token = $1",
                                      {token, digest, Ms(kArtefactGrantTtl)}));
  // Why not, for the refusal (the token is the requester's secret: never echoed).
  if (r.empty()) return PermissionDenied("the artefact grant is not a grant this cluster holds (unknown or expired long ago)");
  if (r.Text(0, 0) != holder)
    return PermissionDenied("the artefact grant is for node " + r.Text(0, 0) + ", not " + holder);
  if (r.Text(0, 1) != "t") return PermissionDenied("the artefact grant is for another artefact");
  if (r.Text(0, 2) != "t") return PermissionDenied("the artefact grant expired");
  return OkStatus();
}

StatusOr<std::pair<ApiKeyRecord, std::string>> ClusterRegistry::CreateApiKey(const std::string& name,
                                                                             const std::string& team, bool admin) {
  ASSIGN_OR_RETURN(auto made, NewApiKey(name, team, admin));
  const ApiKeyRecord& rec = made.first;
  const std::string& key = made.second;
  RETURN_IF_ERROR(pool_
                      .Exec("INSERT INTO api_keys (id, name, prefix, hash, created_at_ms, team, admin) "
                            "VALUES ($1, $2, $3, $4, $5, $6, $7)",
                            {rec.id, rec.name, rec.prefix, image::Sha256Hex(key), std::to_string(rec.created_at_ms),
                             rec.team, std::string(admin ? "true" : "false")})
                      .status());
  return made;
}

StatusOr<std::vector<ApiKeyRecord>> ClusterRegistry::ListApiKeys() {
  ASSIGN_OR_RETURN(auto rows, ApiKeysByHash());
  std::vector<ApiKeyRecord> out;
  for (auto& [hash, rec] : rows) out.push_back(std::move(rec));
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.created_at_ms < b.created_at_ms; });
  return out;
}

Status ClusterRegistry::RemoveApiKey(const std::string& id_or_name) {
  ASSIGN_OR_RETURN(auto r, pool_.Exec("DELETE FROM api_keys WHERE id = $1 OR name = $1", {id_or_name}));
  if (r.affected == 0) return NotFound("no API key with id or name " + id_or_name);
  return OkStatus();
}

StatusOr<std::vector<std::pair<std::string, ApiKeyRecord>>> ClusterRegistry::ApiKeysByHash() {
  ASSIGN_OR_RETURN(auto r, pool_.Exec("SELECT hash, id, name, prefix, created_at_ms, team, admin FROM api_keys"));
  std::vector<std::pair<std::string, ApiKeyRecord>> out;
  for (size_t i = 0; i < r.rows.size(); ++i) {
    ApiKeyRecord k{r.Text(i, 1), r.Text(i, 2), r.Text(i, 3), std::stoll(r.Text(i, 4)), r.Text(i, 5),
                   r.Text(i, 6) == "t"};
    out.emplace_back(r.Text(i, 0), std::move(k));
  }
  return out;
}

StatusOr<int64_t> ClusterRegistry::KeyVersion() {
  ASSIGN_OR_RETURN(auto r, pool_.Exec("SELECT last_value * 2 + is_called::int FROM api_keys_version"));
  return std::stoll(r.Text(0, 0));
}

}  // namespace airlock::cluster
