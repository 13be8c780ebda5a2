// Env-var snippets (interpreter/env_snippet.h): values with quotes,
// newlines, backslashes, $(...) and backticks round-trip exactly through
// real python3 / bash / node (each skipped when absent), run nothing, and the
// restore snippet puts back the old value or removes the variable.
#include "interpreter/env_snippet.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace airlock::interpreter {
namespace {

using json = nlohmann::json;

std::string ReadFile(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class InterpreterEnvSnippetRoundTrip : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/interp-env-XXXXXX";
    dir_ = mkdtemp(tmpl);
    marker_ = dir_ + "/pwned";
    tricky_ = "it's \"q\" \\ back\\\\slash\nnew line\t$(touch " + marker_ + ") `touch " + marker_ +
              "` ${HOME} $HOME '\\'' caf\xc3\xa9 \xf0\x9f\x98\x80 %s {0}";
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  // Runs `interpreter script` with PRE_EXISTING=orig in the environment;
  // the script writes JSON {"set": {...}, "restored": {...}} to dir_/out.
  json Run(const std::string& interpreter, const std::string& script, const std::string& ext) {
    std::string path = dir_ + "/script" + ext;
    std::ofstream(path) << script;
    std::string cmd = "cd " + dir_ + " && PRE_EXISTING=orig " + interpreter + " " + path + " > " + dir_ +
                      "/log 2>&1";
    int rc = std::system(cmd.c_str());
    EXPECT_EQ(rc, 0) << ReadFile(dir_ + "/log");
    return json::parse(ReadFile(dir_ + "/out"), nullptr, false);
  }
  EnvVars Vars() const { return {{"AIRLOCK_TRICKY", tricky_}, {"PRE_EXISTING", "changed"}, {"EMPTY", ""}}; }
  void Check(const json& j) {
    ASSERT_TRUE(j.is_object()) << ReadFile(dir_ + "/log");
    EXPECT_EQ(j["set"]["AIRLOCK_TRICKY"], tricky_);
    EXPECT_EQ(j["set"]["PRE_EXISTING"], "changed");
    EXPECT_EQ(j["set"]["EMPTY"], "");
    EXPECT_TRUE(j["restored"]["AIRLOCK_TRICKY"].is_null());
    EXPECT_EQ(j["restored"]["PRE_EXISTING"], "orig");
    EXPECT_TRUE(j["restored"]["EMPTY"].is_null());
    struct stat st;
    EXPECT_NE(stat(marker_.c_str(), &st), 0) << "a value was executed";
  }

  std::string dir_, marker_, tricky_;
};

TEST(InterpreterEnvSnippet, Base64AndQuoting) {
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(BashQuote("a'b"), "'a'\\''b'");
  EXPECT_TRUE(IsShellName("_A1"));
  EXPECT_FALSE(IsShellName("1A"));
  EXPECT_FALSE(IsShellName("A-B"));
  EXPECT_FALSE(IsShellName("A;rm"));
  EXPECT_EQ(SetEnvSnippet("r", {{"A", "b"}}, true), "");
  EXPECT_EQ(SetEnvSnippet("python", {}, true), "");
  // python/js snippets carry the values only as base64.
  std::string s = SetEnvSnippet("python", {{"A';import os;'", "x'\"\n"}}, true);
  EXPECT_EQ(s.find("import os"), std::string::npos);
  EXPECT_EQ(s.find('\n'), s.size() - 1);
  EXPECT_EQ(ReseedSnippet("bash"), "");
  EXPECT_NE(ReseedSnippet("python").find("seed()"), std::string::npos);
  // bash leaves out names it cannot hold.
  EXPECT_EQ(SetEnvSnippet("bash", {{"A;touch x", "v"}}, true), "");
}

TEST_F(InterpreterEnvSnippetRoundTrip, PythonRoundTrip) {
  if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3";
  std::string dump =
      "import os, json\n"
      "def snap(): return {k: os.environ.get(k) for k in ('AIRLOCK_TRICKY', 'PRE_EXISTING', 'EMPTY')}\n";
  std::string script = dump + SetEnvSnippet("python", Vars(), true) + "s = snap()\n" +
                       RestoreEnvSnippet("python", Vars()) +
                       "assert not hasattr(os, '_airlock_saved_env')\n"
                       "open('out', 'w').write(json.dumps({'set': s, 'restored': snap()}))\n" +
                       ReseedSnippet("python");
  Check(Run("/usr/bin/python3", script, ".py"));
  // Permanent form.
  std::string perm = dump + SetEnvSnippet("python", Vars(), false) +
                     "open('out', 'w').write(json.dumps({'set': snap(), 'restored': {}}))\n";
  json j = Run("/usr/bin/python3", perm, ".py");
  EXPECT_EQ(j["set"]["AIRLOCK_TRICKY"], tricky_);
}

TEST_F(InterpreterEnvSnippetRoundTrip, BashRoundTrip) {
  if (access("/bin/bash", X_OK) != 0) GTEST_SKIP() << "no bash";
  // The values are read back with python's json (bash has no JSON encoder).
  std::string snap = "python3 -c 'import os,json,sys; json.dump({k: os.environ.get(k) for k in "
                     "(\"AIRLOCK_TRICKY\",\"PRE_EXISTING\",\"EMPTY\")}, open(sys.argv[1],\"w\"))' ";
  std::string script = SetEnvSnippet("bash", Vars(), true) + snap + "set.json\n" +
                       RestoreEnvSnippet("bash", Vars()) + snap + "restored.json\n" +
                       "python3 -c 'import json; json.dump({\"set\": json.load(open(\"set.json\")), "
                       "\"restored\": json.load(open(\"restored.json\"))}, open(\"out\",\"w\"))'\n";
  Check(Run("/bin/bash", script, ".sh"));
}

TEST_F(InterpreterEnvSnippetRoundTrip, JavascriptRoundTrip) {
  if (access("/usr/bin/node", X_OK) != 0) GTEST_SKIP() << "no node";
  std::string snap =
      "const snap = () => Object.fromEntries(['AIRLOCK_TRICKY','PRE_EXISTING','EMPTY'].map(k => [k, k in "
      "process.env ? process.env[k] : null]));\n";
  std::string script = snap + SetEnvSnippet("javascript", Vars(), true) + "const s = snap();\n" +
                       RestoreEnvSnippet("javascript", Vars()) +
                       "if ('__airlockSavedEnv' in globalThis) throw new Error('left behind');\n"
                       "require('fs').writeFileSync('out', JSON.stringify({set: s, restored: snap()}));\n";
  Check(Run("/usr/bin/node", script, ".js"));
}

}  // namespace
}  // namespace airlock::interpreter
