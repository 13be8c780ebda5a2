// Custom templates: the request model (names, the build body, the hash
// chain, the pure step helpers) and the store (aliases, tags, logs, layers).
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <functional>
#include <fstream>

#include "agent/services.h"
#include "image/image.h"
#include "templates/build_spec.h"
#include "templates/builder.h"
#include "templates/template_store.h"
#include "templates/upload_ttl.h"

namespace airlock::templates {
namespace {

using nlohmann::json;

TEST(TemplateName, ParsesAliasTagAndNamespace) {
  auto n = ParseName("  My-App:V1 ");
  ASSERT_TRUE(n.ok()) << n.status().message();
  EXPECT_EQ(n->alias, "my-app");
  EXPECT_EQ(n->tag, "v1");
  EXPECT_EQ(n->ns, "");
  n = ParseName("team/app");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->ns, "team");
  EXPECT_EQ(n->alias, "app");
  n = ParseName("app:default");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->tag, "");
  n = ParseName("app:0b5c3c2e-52c0-4d4b-9a3e-1f2a3b4c5d6e");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->tag, "0b5c3c2e-52c0-4d4b-9a3e-1f2a3b4c5d6e");
  for (const char* bad : {"", "a b", "app:", "../x", "app:t@g", "a/b/c", "é"}) {
    EXPECT_FALSE(ParseName(bad).ok()) << bad;
  }
  EXPECT_FALSE(ValidateTag("0b5c3c2e-52c0-4d4b-9a3e-1f2a3b4c5d6e").ok());
  EXPECT_TRUE(ValidateTag("v1.2_x-y").ok());
}

TEST(BuildStart, ParsesTheCapturedBody) {
  json body = json::parse(R"({"startCmd":"python -m http.server 8000","readyCmd":"true",
    "steps":[{"type":"RUN","args":["apt-get update","root"],"force":false},
      {"type":"COPY","args":["app","/app/","",""],"force":false,"filesHash":"9911593d1c8d51f10547f894efa6e91d6dec57864dd6afeb35760ef4b82775d4","gzip":false,"resolveSymlinks":true},
      {"type":"ENV","args":["FOO","bar","PATH","$PATH:/opt/bin"],"force":false},
      {"type":"workdir","args":["/app"]},{"type":"ADD","args":["x","/x"],"filesHash":"9911593d1c8d51f10547f894efa6e91d6dec57864dd6afeb35760ef4b82775d4"},
      {"type":"RUN","args":["python -V"],"force":true},{"type":"USER","args":["user"],"force":false}],
    "force":false,"fromImage":"python:3.12","unknownField":1})");
  auto b = ParseBuildStart(body);
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b->steps.size(), 7u);
  EXPECT_EQ(b->steps[3].type, StepType::kWorkdir);
  EXPECT_EQ(b->steps[4].type, StepType::kCopy);
  // skipCache from step 6 on: 6 and 7 are forced.
  EXPECT_EQ(ForcedSteps(*b), (std::vector<bool>{false, false, false, false, false, true, true}));
  b->force = true;
  EXPECT_EQ(ForcedSteps(*b), std::vector<bool>(7, true));
}

TEST(BuildStart, RefusesBadBodies) {
  const char* bad[] = {
      R"({"steps":[]})",                                                            // no base
      R"({"fromImage":"a","fromTemplate":"b"})",                                    // both
      R"({"fromTemplate":"b","steps":[{"type":"FROB","args":["x"]}]})",             // unknown type
      R"({"fromTemplate":"b","steps":[{"type":"ENV","args":["A"]}]})",              // odd ENV
      R"({"fromTemplate":"b","steps":[{"type":"COPY","args":["a","b"]}]})",         // no filesHash
      R"({"fromTemplate":"b","steps":[{"type":"COPY","args":["a","b","","999"],"filesHash":"9911593d1c8d51f10547f894efa6e91d6dec57864dd6afeb35760ef4b82775d4"}]})",
      R"({"fromTemplate":"b","steps":[{"type":"RUN","args":["a","b","c"]}]})",      // 3 args
      R"({"fromTemplate":"b","steps":[{"type":"RUN","args":["ls","bad user"]}]})",  // user
      R"({"fromTemplate":"b","steps":[{"type":"USER","args":[]}]})",
      R"({"fromTemplate":"b","steps":[{"type":"WORKDIR","args":["a","b"]}]})",
      R"({"fromTemplate":"b","steps":"x"})",
      R"({"fromTemplate":"b","steps":[{"type":"RUN","args":[1]}]})",
      R"({"fromTemplate":"b","force":"yes"})",
  };
  for (const char* text : bad) {
    auto b = ParseBuildStart(json::parse(text));
    EXPECT_FALSE(b.ok()) << text;
    if (!b.ok()) EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(BuildSpec, HashChainChangesWithEveryInput) {
  Step run{StepType::kRun, {"echo hi"}, false, ""};
  Step copy{StepType::kCopy, {"app", "/app/"}, false, std::string(64, 'a')};
  Step copy2 = copy;
  copy2.files_hash = std::string(64, 'b');
  EXPECT_EQ(StepHash("p", run), StepHash("p", run));
  EXPECT_NE(StepHash("p", run), StepHash("q", run));
  EXPECT_NE(StepHash("p", copy), StepHash("p", copy2));
  EXPECT_EQ(HashKeys({"a", "b"}).size(), 64u);
  EXPECT_NE(HashKeys({"a", "b"}), HashKeys({"a;b"}).substr(0, 63) + "x");
}

TEST(BuildSpec, StepHelpers) {
  EXPECT_EQ(CopySourceBase("app"), "app");
  EXPECT_EQ(CopySourceBase("app/*.py"), "app");
  EXPECT_EQ(CopySourceBase("a/b/**/c"), "a/b");
  EXPECT_EQ(CopySourceBase("*.txt"), "");
  EXPECT_EQ(CopySourceBase("./req.txt"), "req.txt");
  EXPECT_EQ(EscapeEnvValue("$PATH:/x"), "$PATH:/x");
  EXPECT_EQ(EscapeEnvValue("a\"b`c$(id)\\"), "a\\\"b\\`c\\$(id)\\\\");
  EXPECT_EQ(JoinWorkdir("", "app"), "/app");
  EXPECT_EQ(JoinWorkdir("/app", "sub/../x"), "/app/x");
  EXPECT_EQ(JoinWorkdir("/app", "/opt"), "/opt");
  EXPECT_EQ(JoinWorkdir("/", "../../.."), "/");
  EXPECT_TRUE(ValidUserName("user"));
  EXPECT_FALSE(ValidUserName("Root"));
  EXPECT_FALSE(ValidUserName("a;b"));
  BuildContext ctx;
  ctx.env["PATH"] = "/opt/bin";
  EXPECT_EQ(StepEnv(ctx)["PATH"], "/opt/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
  EXPECT_EQ(ImageNameOf("0b5c3c2e-52c0-4d4b-9a3e-1f2a3b4c5d6e"), "b0b5c3c2e52c04d4b9a3e1f2a3b4c5d6e");
}

TEST(BuildSpec, ReadyLinesAgreeWithTheAgent) {
  // builder.cc's copies of the agent's readiness lines.
  EXPECT_EQ(agent::ServiceReadyLine("start"), "airlock-agent: service start ready");
  EXPECT_EQ(agent::ServiceFailedLine("start"), "airlock-agent: service start ended before ready:");
  // image.h's, for the desktop template's service.
  EXPECT_EQ(agent::ServiceReadyLine("desktop"), image::kDesktopReadyMarker);
  EXPECT_EQ(agent::ServiceFailedLine("desktop"), image::kDesktopFailedMarker);
  EXPECT_EQ(image::ReadinessOf("desktop").console_marker, image::kDesktopReadyMarker);
  EXPECT_EQ(agent::ServiceReadyLine("docker"), image::kDockerReadyMarker);
  EXPECT_EQ(agent::ServiceFailedLine("docker"), image::kDockerFailedMarker);
  EXPECT_EQ(image::ReadinessOf("docker").console_failure, image::kDockerFailedMarker);
}

TEST(BuilderMessages, HideHostPathsUnderTheStateDir) {
  EXPECT_EQ(HideHostPaths("open /var/lib/airlock/layers/ab12/disk.qcow2: No such file", "/var/lib/airlock"),
            "open <host path>: No such file");
  EXPECT_EQ(HideHostPaths("'/var/lib/airlock/x' and \"/var/lib/airlock\" (/var/lib/airlock/y)", "/var/lib/airlock/"),
            "'<host path>' and \"<host path>\" (<host path>)");
  EXPECT_EQ(HideHostPaths("/var/lib/airlock2/z stays; /usr/bin/tar stays", "/var/lib/airlock"),
            "/var/lib/airlock2/z stays; /usr/bin/tar stays");
  EXPECT_EQ(HideHostPaths("no paths", "/var/lib/airlock"), "no paths");
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("airlock-tstore-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    auto s = TemplateStore::Open((dir_ / "t.db").string());
    ASSERT_TRUE(s.ok()) << s.status().message();
    store_ = std::move(*s);
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  std::filesystem::path dir_;
  std::unique_ptr<TemplateStore> store_;
};

TEST_F(StoreTest, AliasesTagsAndResolution) {
  auto b1 = store_->RequestBuild("team-a", "app", {"v1"}, 2, 1024, 0, "tpl00000000000000001");
  ASSERT_TRUE(b1.ok()) << b1.status().message();
  EXPECT_EQ(b1->tags, std::vector<std::string>{"v1"});
  ASSERT_TRUE(store_->StartBuild(b1->build_id, json::object()).ok());
  EXPECT_FALSE(store_->StartBuild(b1->build_id, json::object()).ok());  // not twice
  // Same alias, same team: the same template; another team's "app" is
  // another template in its own namespace (never a 403 that reveals it); an
  // id: 409.
  auto b2 = store_->RequestBuild("team-a", "app", {}, 2, 1024, 0, "tpl00000000000000002");
  ASSERT_TRUE(b2.ok());
  EXPECT_EQ(b2->template_id, b1->template_id);
  EXPECT_EQ(b2->tags, std::vector<std::string>{"default"});
  auto other = store_->RequestBuild("team-b", "app", {}, 2, 1024, 0, "tplbbbbbbbbbbbbbbbb1");
  ASSERT_TRUE(other.ok()) << other.status().message();
  EXPECT_EQ(other->template_id, "tplbbbbbbbbbbbbbbbb1");
  EXPECT_EQ(*store_->FindAlias("team-a", "app"), b1->template_id);
  EXPECT_EQ(*store_->FindAlias("team-b", "app"), "tplbbbbbbbbbbbbbbbb1");
  EXPECT_FALSE(store_->FindAlias("team-c", "app").ok());
  EXPECT_EQ(store_->RequestBuild("team-b", b1->template_id, {}, 2, 1024, 0, "x").status().code(),
            StatusCode::kAlreadyExists);
  // Nothing ready: no tag resolves.
  EXPECT_FALSE(ResolveBuild(*store_, "app:v1", "team-a", false).ok());
  BuildRow r = *store_->GetBuild(b1->build_id);
  r.status = kReady;
  r.image = "img1";
  ASSERT_TRUE(store_->FinishBuild(r).ok());
  auto got = ResolveBuild(*store_, "app:v1", "team-a", false);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(got->build.image, "img1");
  EXPECT_EQ(got->alias, "app");
  // By id, and by build UUID as the tag.
  EXPECT_TRUE(ResolveBuild(*store_, b1->template_id + ":v1", "team-a", false).ok());
  EXPECT_TRUE(ResolveBuild(*store_, "app:" + b1->build_id, "team-a", false).ok());
  // Another team sees nothing until it is public, and then only by the
  // owner's namespace or the id: its bare "app" is its own.
  EXPECT_EQ(ResolveBuild(*store_, "team-a/app:v1", "team-b", false).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ResolveBuild(*store_, "app:v1", "team-c", false).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(store_->SetPublic(b1->template_id, true).ok());
  EXPECT_TRUE(ResolveBuild(*store_, "team-a/app:v1", "team-b", false).ok());
  EXPECT_TRUE(ResolveBuild(*store_, b1->template_id + ":v1", "team-b", false).ok());
  EXPECT_EQ(ResolveTemplate(*store_, "app", "team-b", false)->tmpl.id, "tplbbbbbbbbbbbbbbbb1");
  EXPECT_EQ(ResolveBuild(*store_, "app:v1", "team-c", false).status().code(), StatusCode::kNotFound);
  // The default tag's build (b2) is not ready: no default.
  EXPECT_FALSE(ResolveBuild(*store_, "app", "team-a", false).ok());
  // Move a tag, remove it.
  ASSERT_TRUE(store_->AssignTags(b1->template_id, b1->build_id, {"prod"}).ok());
  EXPECT_TRUE(ResolveBuild(*store_, "app:prod", "team-a", false).ok());
  ASSERT_TRUE(store_->RemoveTags(b1->template_id, {"prod"}).ok());
  EXPECT_FALSE(ResolveBuild(*store_, "app:prod", "team-a", false).ok());
  auto tags = store_->TagsOf(b1->template_id);
  ASSERT_TRUE(tags.ok());
  ASSERT_EQ(tags->size(), 2u);  // default (b2), v1 (b1)
  EXPECT_EQ((*tags)[0].tag, "default");
  EXPECT_EQ((*tags)[1].tag, "v1");
}

// A registry from before per-team aliases: its global aliases move into
// their templates' teams' namespaces when the store opens.
TEST_F(StoreTest, GlobalAliasesOfAnOlderRegistryMoveToTheirTeams) {
  store_.reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir_ / "t.db").string().c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "INSERT INTO templates (id, team, public, created_at, updated_at)"
                         " VALUES ('tplold0000000000001', 'team-a', 0, 1, 1);"
                         "INSERT INTO template_aliases (alias, template_id) VALUES ('old-app', 'tplold0000000000001');",
                         nullptr, nullptr, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(db);
  sqlite3_close(db);
  auto s = TemplateStore::Open((dir_ / "t.db").string());
  ASSERT_TRUE(s.ok()) << s.status().message();
  store_ = std::move(*s);
  EXPECT_EQ(*store_->FindAlias("team-a", "old-app"), "tplold0000000000001");
  EXPECT_FALSE(store_->FindAlias("team-b", "old-app").ok());
  EXPECT_EQ(store_->GetTemplate("tplold0000000000001")->aliases, std::vector<std::string>{"old-app"});
}

TEST_F(StoreTest, LogsPageByOffsetAndUnstartedBuildsAreSuperseded) {
  auto b1 = store_->RequestBuild("t", "app", {}, 2, 1024, 0, "tpl00000000000000001");
  ASSERT_TRUE(b1.ok());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(store_->AppendLog(b1->build_id, {i, "info", "line " + std::to_string(i), ""}).ok());
  auto page = store_->Logs(b1->build_id, 3, 100);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->size(), 2u);
  EXPECT_EQ((*page)[0].message, "line 3");
  EXPECT_TRUE(store_->Logs(b1->build_id, 5, 100)->empty());
  auto b2 = store_->RequestBuild("t", "app", {}, 2, 1024, 0, "unused");
  ASSERT_TRUE(b2.ok());
  EXPECT_EQ(store_->GetBuild(b1->build_id)->status, kError);
  EXPECT_EQ(store_->GetBuild(b2->build_id)->status, kWaiting);
  auto deleted = store_->DeleteTemplate(b1->template_id);
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(deleted->size(), 2u);
  EXPECT_FALSE(store_->FindAlias("t", "app").ok());
  EXPECT_TRUE(store_->Logs(b1->build_id, 0, 100)->empty());
}

// The upload TTL (upload_ttl.h) with times passed in: an upload past the TTL
// goes (row and file) unless a build in flight names its hash; a files link
// that finds it starts the TTL again; a file gone from disk is not present.
TEST_F(StoreTest, UploadsExpireAfterTheTtlUnlessABuildInFlightUsesThem) {
  const std::string h1(64, '1'), h2(64, '2'), h3(64, '3');
  auto put = [&](const std::string& team, const std::string& hash) {
    std::string path = (dir_ / (team + "-" + hash.substr(0, 4) + ".tar")).string();
    std::ofstream(path) << "archive";
    EXPECT_TRUE(store_->PutFile(team, hash, path, 7).ok());
    return path;
  };
  const std::string p1 = put("t", h1), p2 = put("t", h2), p3 = put("u", h3);
  auto rows = store_->AllFileRows();
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 3u);
  const int64_t created = 1'000'000;  // the TTL counts from here for all three
  for (const auto& r : *rows) ASSERT_TRUE(store_->TouchFile(r.team, r.hash, created).ok());
  const int64_t ttl = 24 * 3600 * 1000;

  // A started build of team t copies h2: h2 stays while it is in flight.
  auto b = store_->RequestBuild("t", "app", {}, 2, 1024, 0, "tpl00000000000000001");
  ASSERT_TRUE(b.ok());
  json spec = {{"fromImage", "e2bdev/base"},
               {"steps", {{{"type", "COPY"}, {"args", {"app", "/app/"}}, {"filesHash", h2}}}}};
  ASSERT_TRUE(store_->StartBuild(b->build_id, spec).ok());
  EXPECT_EQ(UploadsInUse(*store_), (std::set<std::pair<std::string, std::string>>{{"t", h2}}));

  EXPECT_EQ(CollectExpiredUploads(*store_, created + ttl - 1, ttl).removed, 0);
  EXPECT_TRUE(store_->FindFile("t", h1).ok());
  UploadSweep sweep = CollectExpiredUploads(*store_, created + ttl + 1, ttl);
  EXPECT_EQ(sweep.removed, 2);
  EXPECT_EQ(sweep.bytes, 14);
  EXPECT_FALSE(std::filesystem::exists(p1));
  EXPECT_FALSE(std::filesystem::exists(p3));
  EXPECT_EQ(store_->FindFile("t", h1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->FindFile("u", h3).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(store_->FindFile("t", h2).ok());
  EXPECT_TRUE(std::filesystem::exists(p2));

  // The build ends; a files link found h2 later: its TTL counts from there.
  ASSERT_TRUE(store_->SetStatus(b->build_id, kError).ok());
  ASSERT_TRUE(store_->TouchFile("t", h2, created + ttl).ok());
  EXPECT_EQ(CollectExpiredUploads(*store_, created + ttl + 1, ttl).removed, 0);
  EXPECT_EQ(CollectExpiredUploads(*store_, created + 2 * ttl + 1, ttl).removed, 1);
  EXPECT_FALSE(std::filesystem::exists(p2));
  EXPECT_TRUE(store_->AllFileRows()->empty());

  // A row whose file was removed by hand is not present; 0: no TTL.
  const std::string p4 = put("t", h1);
  std::filesystem::remove(p4);
  EXPECT_EQ(store_->FindFile("t", h1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(CollectExpiredUploads(*store_, created + 100 * ttl, 0).removed, 0);
}

// ---- a template across a cluster's nodes: ExportTemplate/ImportTemplate ----

// A build's image is named by its id (ImageNameOf); the tests call it by a
// label ("img-1"), which Label() gives back.
std::map<std::string, std::string>& ImageLabels() {
  static std::map<std::string, std::string> labels;
  return labels;
}
std::string Label(const std::string& image) {
  auto it = ImageLabels().find(image);
  return it == ImageLabels().end() ? image : it->second;
}

// Starts `r`'s build and finishes it ready with its image, labelled `label`.
void MakeReady(TemplateStore& store, const RequestedBuild& r, const std::string& label) {
  ASSERT_TRUE(store.StartBuild(r.build_id, json::object()).ok());
  BuildRow b = *store.GetBuild(r.build_id);
  b.status = kReady;
  b.image = ImageNameOf(r.build_id);
  ImageLabels()[b.image] = label;
  b.final_context = {{"context", {{"user", "root"}, {"workdir", "/app"}}}, {"startCmd", "serve"}, {"readyCmd", ""}};
  ASSERT_TRUE(store.FinishBuild(b).ok());
}

class BundleTest : public StoreTest {
 protected:
  void SetUp() override {
    StoreTest::SetUp();
    auto s = TemplateStore::Open((dir_ / "other.db").string());
    ASSERT_TRUE(s.ok()) << s.status().message();
    other_ = std::move(*s);
  }
  void TearDown() override {
    other_.reset();
    StoreTest::TearDown();
  }
  // What `ref` resolves to for `team` in `store`: "image@build", or the error code.
  static std::string Resolves(TemplateStore& store, const std::string& ref, const std::string& team = "team-a") {
    auto r = ResolveBuild(store, ref, team, false);
    if (!r.ok()) return "error " + std::to_string(static_cast<int>(r.status().code()));
    return Label(r->build.image) + "@" + r->build.id;
  }
  std::unique_ptr<TemplateStore> other_;  // another node's store
};

TEST_F(BundleTest, AnExportedTemplateResolvesTheSameInAnotherStore) {
  const std::string id = "tpl00000000000000001";
  auto b1 = store_->RequestBuild("team-a", "app", {"v1", "default"}, 2, 1024, 0, id);
  ASSERT_TRUE(b1.ok());
  MakeReady(*store_, *b1, "img-1");
  auto b2 = store_->RequestBuild("team-a", "app", {}, 4, 2048, 512, "unused");
  ASSERT_TRUE(b2.ok());
  MakeReady(*store_, *b2, "img-2");
  ASSERT_TRUE(store_->AssignTags(id, b1->build_id, {"prod"}).ok());
  ASSERT_TRUE(store_->SetPublic(id, true).ok());
  // In progress here: v1 still serves b1 (and the bundle says so).
  auto b3 = store_->RequestBuild("team-a", "app", {"v1"}, 2, 1024, 0, "unused");
  ASSERT_TRUE(b3.ok());

  auto bundle = store_->ExportTemplate(id);
  ASSERT_TRUE(bundle.ok()) << bundle.status().message();
  EXPECT_EQ((*bundle)["version"], 1);
  EXPECT_EQ((*bundle)["template"]["id"], id);
  EXPECT_EQ((*bundle)["template"]["team"], "team-a");
  EXPECT_EQ((*bundle)["template"]["public"], true);
  EXPECT_EQ((*bundle)["template"]["aliases"], json::array({"app"}));
  ASSERT_EQ((*bundle)["builds"].size(), 2u) << bundle->dump();
  EXPECT_EQ((*bundle)["builds"][1]["id"], b2->build_id);
  EXPECT_EQ((*bundle)["builds"][1]["cpuCount"], 4);
  EXPECT_EQ((*bundle)["builds"][1]["memoryMB"], 2048);
  EXPECT_EQ((*bundle)["builds"][1]["diskMB"], 512);
  EXPECT_EQ((*bundle)["builds"][1]["image"], ImageNameOf(b2->build_id));
  EXPECT_EQ((*bundle)["builds"][1]["finalContext"]["startCmd"], "serve");
  json tags = json::array();
  for (const auto& t : (*bundle)["tags"]) tags.push_back({t["tag"], t["buildID"]});
  EXPECT_EQ(tags, json::parse("[[\"default\",\"" + b2->build_id + "\"],[\"prod\",\"" + b1->build_id +
                              "\"],[\"v1\",\"" + b1->build_id + "\"]]"));

  ASSERT_TRUE(other_->ImportTemplate(*bundle).ok());
  for (const std::string& ref : {std::string("app"), std::string("app:v1"), std::string("app:prod"),
                                 std::string("app:default"), id, id + ":prod", "app:" + b1->build_id,
                                 std::string("team-a/app:v1"), std::string("app:nope"), "app:" + b3->build_id}) {
    EXPECT_EQ(Resolves(*other_, ref), Resolves(*store_, ref)) << ref;
  }
  EXPECT_EQ(Resolves(*other_, "app"), "img-2@" + b2->build_id);
  EXPECT_EQ(Resolves(*other_, "app:v1"), "img-1@" + b1->build_id);
  // Public: another team by the owner's namespace or the id.
  EXPECT_EQ(Resolves(*other_, "team-a/app:prod", "team-b"), "img-1@" + b1->build_id);
  EXPECT_EQ(Resolves(*other_, id, "team-b"), "img-2@" + b2->build_id);
  auto t = other_->GetTemplate(id);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->team, "team-a");
  EXPECT_TRUE(t->is_public);
  EXPECT_EQ(t->created_at_ms, store_->GetTemplate(id)->created_at_ms);
  EXPECT_EQ(t->aliases, std::vector<std::string>{"app"});
  auto imported = other_->GetBuild(b2->build_id);
  ASSERT_TRUE(imported.ok());
  EXPECT_EQ(imported->status, kReady);
  EXPECT_TRUE(imported->started);
  EXPECT_EQ(imported->final_context["startCmd"], "serve");
  EXPECT_EQ(imported->finished_at_ms, store_->GetBuild(b2->build_id)->finished_at_ms);
  EXPECT_EQ(other_->GetBuild(b3->build_id).status().code(), StatusCode::kNotFound) << "not ready: not shared";
  // The copy exports the same bundle (a node that imported it can publish it).
  EXPECT_EQ(*other_->ExportTemplate(id), *bundle);
  // Importing again changes nothing.
  ASSERT_TRUE(other_->ImportTemplate(*bundle).ok());
  EXPECT_EQ(*other_->ExportTemplate(id), *bundle);
  EXPECT_EQ(store_->ExportTemplate("tplnosuchtemplate000").status().code(), StatusCode::kNotFound);
}

TEST_F(BundleTest, AReimportFollowsAMovedTagAndKeepsALocalBuildInProgress) {
  const std::string id = "tpl00000000000000001";
  auto b1 = store_->RequestBuild("team-a", "app", {"default", "v1"}, 2, 1024, 0, id);
  ASSERT_TRUE(b1.ok());
  MakeReady(*store_, *b1, "img-1");
  ASSERT_TRUE(other_->ImportTemplate(*store_->ExportTemplate(id)).ok());
  EXPECT_EQ(Resolves(*other_, "app:v1"), "img-1@" + b1->build_id);
  // A build of the same template started on the other node.
  auto local = other_->RequestBuild("team-a", "app", {"beta"}, 2, 1024, 0, "unused");
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(local->template_id, id);
  // Here: a new default, v1 removed.
  auto b2 = store_->RequestBuild("team-a", "app", {}, 2, 1024, 0, "unused");
  ASSERT_TRUE(b2.ok());
  MakeReady(*store_, *b2, "img-2");
  ASSERT_TRUE(store_->RemoveTags(id, {"v1"}).ok());
  ASSERT_TRUE(other_->ImportTemplate(*store_->ExportTemplate(id)).ok());
  EXPECT_EQ(Resolves(*other_, "app"), "img-2@" + b2->build_id);
  EXPECT_EQ(Resolves(*other_, "app:v1"), Resolves(*store_, "app:v1"));
  EXPECT_EQ(Resolves(*other_, "app:" + b1->build_id), "img-1@" + b1->build_id) << "its builds stay";
  // The local build is left alone and takes its tag when it is ready.
  EXPECT_EQ(other_->GetBuild(local->build_id)->status, kWaiting);
  MakeReady(*other_, *local, "img-local");
  EXPECT_EQ(Resolves(*other_, "app:beta"), "img-local@" + local->build_id);
  EXPECT_EQ(Resolves(*other_, "app"), "img-2@" + b2->build_id);
}

TEST_F(BundleTest, AnImportTakesItsAliasFromAnotherLocalTemplateOfItsTeam) {
  const std::string id = "tpl00000000000000001";
  auto b1 = store_->RequestBuild("team-a", "app", {}, 2, 1024, 0, id);
  ASSERT_TRUE(b1.ok());
  MakeReady(*store_, *b1, "img-1");
  // The other node made its own "app" meanwhile (and team-b has one).
  auto mine = other_->RequestBuild("team-a", "app", {}, 2, 1024, 0, "tplzzzzzzzzzzzzzzzzz");
  auto theirs = other_->RequestBuild("team-b", "app", {}, 2, 1024, 0, "tplbbbbbbbbbbbbbbbb1");
  ASSERT_TRUE(mine.ok() && theirs.ok());
  json bundle = *store_->ExportTemplate(id);
  bundle["template"]["aliases"] = {"app", "web"};
  ASSERT_TRUE(other_->ImportTemplate(bundle).ok());
  EXPECT_EQ(*other_->FindAlias("team-a", "app"), id);
  EXPECT_EQ(*other_->FindAlias("team-a", "web"), id);
  EXPECT_EQ(*other_->FindAlias("team-b", "app"), "tplbbbbbbbbbbbbbbbb1");
  EXPECT_TRUE(other_->GetTemplate("tplzzzzzzzzzzzzzzzzz")->aliases.empty());
  EXPECT_EQ(Resolves(*other_, "web"), "img-1@" + b1->build_id);
  // An alias the bundle no longer has goes.
  bundle["template"]["aliases"] = {"web"};
  ASSERT_TRUE(other_->ImportTemplate(bundle).ok());
  EXPECT_EQ(other_->FindAlias("team-a", "app").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(other_->GetTemplate(id)->aliases, std::vector<std::string>{"web"});
}

TEST_F(BundleTest, AMalformedBundleIsRefusedWithNothingWritten) {
  const std::string id = "tpl00000000000000001";
  auto b1 = store_->RequestBuild("team-a", "app", {"v1"}, 2, 1024, 0, id);
  ASSERT_TRUE(b1.ok());
  MakeReady(*store_, *b1, "img-1");
  const json good = *store_->ExportTemplate(id);
  ASSERT_EQ(good["tags"].size(), 1u);
  using Edit = std::function<void(json&)>;
  const std::vector<std::pair<const char*, Edit>> bad = {
      {"not an object", [](json& j) { j = json::array(); }},
      {"version", [](json& j) { j["version"] = 2; }},
      {"no version", [](json& j) { j.erase("version"); }},
      {"no template", [](json& j) { j.erase("template"); }},
      {"id upper case", [](json& j) { j["template"]["id"] = "TPL1"; }},
      {"id with a slash", [](json& j) { j["template"]["id"] = "../x"; }},
      {"id empty", [](json& j) { j["template"]["id"] = ""; }},
      {"team", [](json& j) { j["template"]["team"] = "a team"; }},
      {"public", [](json& j) { j["template"]["public"] = "yes"; }},
      {"createdAt", [](json& j) { j["template"]["createdAt"] = -1; }},
      {"updatedAt", [](json& j) { j["template"]["updatedAt"] = 1.5; }},
      {"aliases", [](json& j) { j["template"]["aliases"] = "app"; }},
      {"alias chars", [](json& j) { j["template"]["aliases"] = {"a b"}; }},
      {"alias case", [](json& j) { j["template"]["aliases"] = {"App"}; }},
      {"alias length", [](json& j) { j["template"]["aliases"] = {std::string(129, 'a')}; }},
      {"builds", [](json& j) { j["builds"] = json::object(); }},
      {"build id", [](json& j) { j["builds"][0]["id"] = "not-a-uuid"; }},
      {"build id upper", [&](json& j) {
         std::string u = b1->build_id;
         for (char& c : u) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
         j["builds"][0]["id"] = u;
       }},
      {"build twice", [](json& j) { j["builds"].push_back(j["builds"][0]); }},
      {"image path", [](json& j) { j["builds"][0]["image"] = "../etc"; }},
      {"image empty", [](json& j) { j["builds"][0]["image"] = ""; }},
      {"image long", [](json& j) { j["builds"][0]["image"] = std::string(65, 'a'); }},
      {"cpuCount", [](json& j) { j["builds"][0]["cpuCount"] = "2"; }},
      {"memoryMB", [](json& j) { j["builds"][0]["memoryMB"] = int64_t{1} << 40; }},
      {"finishedAt", [](json& j) { j["builds"][0].erase("finishedAt"); }},
      {"finalContext", [](json& j) { j["builds"][0]["finalContext"] = "ctx"; }},
      {"tags", [](json& j) { j["tags"] = nullptr; }},
      {"tag uuid", [&](json& j) { j["tags"][0]["tag"] = b1->build_id; }},
      {"tag chars", [](json& j) { j["tags"][0]["tag"] = "t@g"; }},
      {"tag empty", [](json& j) { j["tags"][0]["tag"] = ""; }},
      {"tag twice", [](json& j) { j["tags"].push_back(j["tags"][0]); }},
      {"tag of no build", [](json& j) { j["tags"][0]["buildID"] = "0b5c3c2e-52c0-4d4b-9a3e-1f2a3b4c5d6e"; }},
      {"tag createdAt", [](json& j) { j["tags"][0]["createdAt"] = "now"; }},
  };
  for (const auto& [what, edit] : bad) {
    json j = good;
    edit(j);
    Status st = other_->ImportTemplate(j);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << what << ": " << st.message();
  }
  // A build's image must be its own (never a built-in's, nor another build's).
  for (const std::string bad : {"base", "desktop", "b00000000000000000000000000000000"}) {
    json j = good;
    j["builds"][0]["image"] = bad;
    EXPECT_EQ(other_->ImportTemplate(j).code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_TRUE(other_->ListTemplates("", true)->empty());
  EXPECT_FALSE(other_->GetBuild(b1->build_id).ok());
  // A build id that is another local template's: refused, nothing written.
  auto local = other_->RequestBuild("team-a", "other", {}, 2, 1024, 0, "tplzzzzzzzzzzzzzzzzz");
  ASSERT_TRUE(local.ok());
  json clash = good;
  clash["builds"][0]["id"] = local->build_id;
  clash["builds"][0]["image"] = ImageNameOf(local->build_id);
  clash["tags"][0]["buildID"] = local->build_id;
  EXPECT_EQ(other_->ImportTemplate(clash).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(other_->GetTemplate(id).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(other_->GetBuild(local->build_id)->template_id, "tplzzzzzzzzzzzzzzzzz");
  // Unknown fields (another node's extras) are ignored.
  json extra = good;
  extra["builds"][0]["artefact"] = {{"digest", std::string(64, 'a')}};
  extra["more"] = 1;
  EXPECT_TRUE(other_->ImportTemplate(extra).ok());
}

TEST_F(BundleTest, TheObserverSeesEveryCommittedChangeButNotAnImport) {
  std::vector<std::string> seen;
  auto observe = [&](TemplateStore& store) {
    store.SetOnChange([&seen, &store](const std::string& id) {
      seen.push_back(id);
      (void)store.GetTemplate(id);  // outside the store's lock: no deadlock
    });
  };
  observe(*store_);
  observe(*other_);
  const std::string id = "tpl00000000000000001";
  auto b1 = store_->RequestBuild("team-a", "app", {}, 2, 1024, 0, id);
  ASSERT_TRUE(b1.ok());
  EXPECT_EQ(seen, std::vector<std::string>{id});
  ASSERT_TRUE(store_->StartBuild(b1->build_id, json::object()).ok());
  ASSERT_TRUE(store_->SetStatus(b1->build_id, kBuilding).ok());
  BuildRow done = *store_->GetBuild(b1->build_id);
  done.status = kReady;
  done.image = ImageNameOf(b1->build_id);
  done.template_id.clear();  // the store knows its template
  ASSERT_TRUE(store_->FinishBuild(done).ok());
  ASSERT_TRUE(store_->AssignTags(id, b1->build_id, {"prod"}).ok());
  ASSERT_TRUE(store_->RemoveTags(id, {"prod"}).ok());
  ASSERT_TRUE(store_->SetPublic(id, true).ok());
  EXPECT_EQ(seen, std::vector<std::string>(7, id));
  // No change, no call: a refused start, an unknown template or build.
  EXPECT_FALSE(store_->StartBuild(b1->build_id, json::object()).ok());
  ASSERT_TRUE(store_->SetPublic("tplnosuchtemplate000", true).ok());
  ASSERT_TRUE(store_->SetStatus("0b5c3c2e-52c0-4d4b-9a3e-1f2a3b4c5d6e", kError).ok());
  EXPECT_EQ(seen.size(), 7u);
  // An import is another node's change: never announced.
  ASSERT_TRUE(other_->ImportTemplate(*store_->ExportTemplate(id)).ok());
  EXPECT_EQ(seen.size(), 7u);
  ASSERT_TRUE(store_->DeleteTemplate(id).ok());
  EXPECT_EQ(seen.size(), 8u);
  ASSERT_TRUE(store_->DeleteTemplate(id).ok());  // gone already
  EXPECT_EQ(seen.size(), 8u);
}

}  // namespace
}  // namespace airlock::templates
