// Custom template builds reach package mirrors through the build allowlist,
// hermetically (issue 16, "network during builds"): a fake internet in
// network namespaces this test makes (tests/integration/fake_internet.h)
// serves a local apt repository (made with dpkg-deb and apt-ftparchive), a
// PyPI-style simple index with one wheel, and an npm tarball on
// allowed.test; `airlock serve --build-allow allowed.test` runs behind it;
// the official e2b SDK (tests/e2e/template_packages.mjs, run in the
// daemon's namespace) builds a template with aptInstall, pipInstall and
// npmInstall, and a sandbox of it has all three. A host not on the
// allowlist is refused to the build and the refusal is in the audit trail.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/subprocess.h"
#include "tests/integration/daemon.h"
#include "tests/unit/scoped_dir.h"
#include "tests/integration/fake_internet.h"

namespace airlock {
namespace {

namespace fs = std::filesystem;
using test_util::FakeInternet;

void Write(const std::string& path, const std::string& text, fs::perms perms = fs::perms::none) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
  if (perms != fs::perms::none) fs::permissions(path, perms);
}

// The mirror's tree: apt/ (a flat repository), simple/ + files/ (PyPI's
// simple API), npm/ (a tarball).
Status MakeMirror(const std::string& work, const std::string& root) {
  const std::string deb = work + "/debroot";
  Write(deb + "/DEBIAN/control",
        "Package: airlock-test-apt\nVersion: 1.0\nArchitecture: all\nMaintainer: airlock tests <tests@airlock.invalid>\n"
        "Description: a package of the template tests\n");
  Write(deb + "/usr/share/airlock-test-apt/hello.txt", "apt-ok\n");
  fs::create_directories(root + "/apt");
  RETURN_IF_ERROR(RunChecked({"dpkg-deb", "--root-owner-group", "--build", deb, root + "/apt/airlock-test-apt_1.0_all.deb"}).status());
  RETURN_IF_ERROR(RunChecked({"sh", "-c", "cd '" + root + "/apt' && apt-ftparchive packages . > Packages && "
                                                          "apt-ftparchive release . > Release"}).status());
  // A wheel: a zip with the module and its dist-info.
  const std::string wheel = "airlock_test_wheel-1.0-py3-none-any.whl";
  fs::create_directories(root + "/files");
  RETURN_IF_ERROR(RunChecked({"/usr/bin/python3", "-c",
                              "import sys, zipfile\n"
                              "z = zipfile.ZipFile(sys.argv[1], 'w')\n"
                              "d = 'airlock_test_wheel-1.0.dist-info/'\n"
                              "z.writestr('airlock_test_wheel/__init__.py', 'VALUE = 42\\n')\n"
                              "z.writestr(d + 'METADATA', 'Metadata-Version: 2.1\\nName: airlock-test-wheel\\nVersion: 1.0\\n')\n"
                              "z.writestr(d + 'WHEEL', 'Wheel-Version: 1.0\\nGenerator: airlock-tests\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n')\n"
                              "z.writestr(d + 'RECORD', 'airlock_test_wheel/__init__.py,,\\n' + d + 'METADATA,,\\n' + d + 'WHEEL,,\\n' + d + 'RECORD,,\\n')\n"
                              "z.close()\n",
                              root + "/files/" + wheel})
                      .status());
  Write(root + "/simple/airlock-test-wheel/index.html",
        "<!DOCTYPE html><html><body><a href=\"../../files/" + wheel + "\">" + wheel + "</a></body></html>\n");
  // An npm package tarball with a bin.
  const std::string npm = work + "/npm/package";
  Write(npm + "/package.json",
        R"({"name":"airlock-test-npm","version":"1.0.0","bin":{"airlock-test-npm":"cli.js"}})"
        "\n");
  Write(npm + "/cli.js", "#!/usr/bin/env node\nconsole.log('npm-ok')\n", fs::perms(0755));
  fs::create_directories(root + "/npm");
  return RunChecked({"tar", "-czf", root + "/npm/airlock-test-npm-1.0.0.tgz", "-C", work + "/npm", "package"}).status();
}

TEST(TemplatePackages, AptPipAndNpmThroughTheBuildAllowlistAndNothingElse) {
  if (std::string why = testing::SkipReason(); !why.empty()) GTEST_SKIP() << why;
  for (const char* tool : {"ip", "nft", "openssl", "node", "dpkg-deb", "apt-ftparchive"}) {
    if (!FindExecutable(tool).ok()) GTEST_SKIP() << "needs " << tool;
  }
  const std::string script = std::string(AIRLOCK_SOURCE_DIR) + "/tests/e2e/template_packages.mjs";
  if (!fs::exists(std::string(AIRLOCK_SOURCE_DIR) + "/tests/e2e/node_modules/e2b"))
    GTEST_SKIP() << "the e2b SDK is not installed (npm ci in tests/e2e)";
  ::signal(SIGPIPE, SIG_IGN);
  test_util::ScopedDir dir{test_util::MakeTempDir("airlock-tplpkg")};
  ASSERT_TRUE(MakeMirror(dir.path + "/work", dir.path + "/mirror").ok());
  auto fi = FakeInternet::Start(dir.path);
  ASSERT_TRUE(fi.ok()) << fi.status().ToString();
  std::unique_ptr<FakeInternet> inet = std::move(*fi);
  inet->ServeFiles(dir.path + "/mirror");
  ASSERT_TRUE(inet->Enter().ok());
  struct Leave {
    FakeInternet* f;
    ~Leave() { f->Leave(); }
  } leave{inet.get()};
  const std::string ddir = dir.path + "/daemon";
  fs::create_directories(ddir);
  {
    testing::TestDaemon d(ddir, {"--dns-upstream", FakeInternet::kDnsServer, "--build-allow", "allowed.test"});
    ASSERT_FALSE(d.key().empty()) << testing::Slurp(ddir + "/daemon.log");
    // In the daemon's namespace (this thread's): the SDK reaches it on loopback.
    auto r = airlock::Run({"env", "E2B_API_URL=http://127.0.0.1:" + std::to_string(d.port()), "E2B_API_KEY=" + d.key(),
                  "NO_UPDATE_NOTIFIER=1", "node", script},
                 -1, 64 << 20);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const size_t at = r->out.rfind("{\"logs\"");
    ASSERT_NE(at, std::string::npos) << r->out << r->err;
    auto j = nlohmann::json::parse(r->out.substr(at), nullptr, false);
    ASSERT_TRUE(j.is_object()) << r->out << r->err;
    std::string logs;
    for (const auto& l : j.value("logs", nlohmann::json::array())) logs += l.get<std::string>() + "\n";
    ASSERT_FALSE(j.contains("error")) << j["error"] << "\n" << logs;
    EXPECT_EQ(j.value("apt", ""), "apt-ok\n1.0") << logs;
    EXPECT_EQ(j.value("pip", ""), "42") << logs;
    EXPECT_EQ(j.value("npm", ""), "npm-ok") << logs;
    EXPECT_NE(logs.find("[stdout]: denied-refused"), std::string::npos) << logs;
    EXPECT_EQ(logs.find("[stdout]: denied-reached"), std::string::npos) << logs;
    // The mirror served all three.
    auto served = inet->FilesServed();
    auto asked = [&](const std::string& name) {
      return std::any_of(served.begin(), served.end(), [&](const std::string& p) { return p.ends_with(name); });
    };
    EXPECT_TRUE(asked("/airlock-test-apt_1.0_all.deb"));
    EXPECT_TRUE(asked("files/airlock_test_wheel-1.0-py3-none-any.whl"));
    EXPECT_TRUE(asked("npm/airlock-test-npm-1.0.0.tgz"));
  }
  // The refusal is an audit record of the build sandbox.
  std::string audit;
  for (auto& e : fs::recursive_directory_iterator(ddir + "/audit")) {
    if (e.is_regular_file()) audit += testing::Slurp(e.path().string());
  }
  bool denied = false, allowed = false;
  std::istringstream in(audit);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || j.value("action", "") != "egress") continue;
    std::string dump = j.dump();
    if (dump.find("denied.test") != std::string::npos && j.value("decision", "") == "deny") denied = true;
    if (dump.find("allowed.test") != std::string::npos && j.value("decision", "") == "allow") allowed = true;
  }
  EXPECT_TRUE(denied) << "no deny record for denied.test";
  EXPECT_TRUE(allowed) << "no allow record for allowed.test";
}

}  // namespace
}  // namespace airlock
