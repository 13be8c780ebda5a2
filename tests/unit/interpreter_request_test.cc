// Request bodies (interpreter/request.h) and the kernel table.
#include "interpreter/request.h"

#include <gtest/gtest.h>

#include "common/interpreter_access.h"
#include "interpreter/kernel_spec.h"

namespace airlock::interpreter {
namespace {

TEST(InterpreterRequest, NormalizeLanguage) {
  EXPECT_EQ(NormalizeLanguage("python"), "python");
  EXPECT_EQ(NormalizeLanguage("  PyThOn\n"), "python");
  EXPECT_EQ(NormalizeLanguage("js"), "javascript");
  EXPECT_EQ(NormalizeLanguage(" JS "), "javascript");
  EXPECT_EQ(NormalizeLanguage("ts"), "typescript");
  EXPECT_EQ(NormalizeLanguage("TypeScript"), "typescript");
  EXPECT_EQ(NormalizeLanguage("Bash"), "bash");
  EXPECT_EQ(NormalizeLanguage(""), "");
}

TEST(InterpreterRequest, ExecuteHappyPath) {
  auto p = ParseExecuteRequest(R"({"code":"1+1","env_vars":{"A":"b","C":""},"language":"JS"})");
  ASSERT_TRUE(p.ok()) << p.error.message;
  EXPECT_EQ(p.value->code, "1+1");
  EXPECT_EQ(p.value->language, "javascript");
  EXPECT_FALSE(p.value->context_id);
  EXPECT_EQ(p.value->env_vars.size(), 2u);
  EXPECT_EQ(p.value->env_vars.at("A"), "b");
  auto q = ParseExecuteRequest(R"({"code":"","context_id":"abc","language":null,"env_vars":null})");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q.value->context_id, "abc");
  EXPECT_FALSE(q.value->language);
}

TEST(InterpreterRequest, ExecuteErrors) {
  struct Case {
    const char* body;
    int status;
    const char* message;
  } cases[] = {
      {"", 400, "The request body must be a JSON object"},
      {"[]", 400, "The request body must be a JSON object"},
      {"{bad", 400, "The request body must be a JSON object"},
      {"{}", 400, "Field 'code' (a string) is required"},
      {R"({"code":1})", 400, "Field 'code' (a string) is required"},
      {R"({"code":"x","context_id":"c","language":"python"})", 400,
       "Only one of context_id or language can be provided"},
      {R"({"code":"x","context_id":5})", 400, "Field 'context_id' must be a string"},
      {R"({"code":"x","language":[]})", 400, "Field 'language' must be a string"},
      {R"({"code":"x","env_vars":[]})", 400, "Field 'env_vars' must be an object of strings"},
      {R"({"code":"x","env_vars":{"A":1}})", 400, "Field 'env_vars' must be an object of strings"},
      {R"({"code":"x","env_vars":{"":"v"}})", 400, "An env_vars name must not be empty"},
      {R"({"code":"x","env_vars":{"A=B":"v"}})", 400, "env_vars names must not contain '=' or NUL, nor values NUL"},
      {R"({"code":"x","env_vars":{"A":"v\u0000w"}})", 400,
       "env_vars names must not contain '=' or NUL, nor values NUL"},
      {R"({"code":"x","env_vars":{"A\u0000":"v"}})", 400,
       "env_vars names must not contain '=' or NUL, nor values NUL"},
      {"{\"code\":\"\xff\"}", 400, "The request body must be a JSON object"},  // invalid UTF-8
  };
  for (const auto& c : cases) {
    auto p = ParseExecuteRequest(c.body);
    EXPECT_FALSE(p.ok()) << c.body;
    EXPECT_EQ(p.error.status, c.status) << c.body;
    EXPECT_EQ(p.error.message, c.message) << c.body;
  }
}

TEST(InterpreterRequest, CreateContext) {
  auto e = ParseCreateContextRequest("");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e.value->language, "python");
  EXPECT_FALSE(e.value->cwd);
  auto p = ParseCreateContextRequest(R"({"language":"ts","cwd":"/tmp"})");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p.value->language, "typescript");
  EXPECT_EQ(p.value->cwd, "/tmp");
  EXPECT_EQ(ParseCreateContextRequest("{}").value->language, "python");
  EXPECT_FALSE(ParseCreateContextRequest("[1]").ok());
  EXPECT_FALSE(ParseCreateContextRequest(R"({"cwd":1})").ok());
}

TEST(InterpreterKernelTable, ParsesAndSubstitutes) {
  auto t = ParseKernelTable(
      R"({"python":{"argv":["python3","-m","ipykernel_launcher","-f","{connection_file}"]},
          "bash":{"argv":["python3","{dir}/bash_kernel.py","-f","{connection_file}"],"env":{"K":"V"}}})",
      "/k", "test");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->Languages(), "bash, python");
  const KernelSpec* b = t->Find("bash");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->env.at("K"), "V");
  auto argv = t->Argv(*b, "/run/c.json");
  EXPECT_EQ(argv, (std::vector<std::string>{"python3", "/k/bash_kernel.py", "-f", "/run/c.json"}));
  EXPECT_EQ(t->Find("r"), nullptr);
  for (const char* bad : {"[]", "{}", R"({"p":1})", R"({"p":{"argv":[]}})", R"({"p":{"argv":[1]}})",
                          R"({"p":{"argv":["x"],"env":{"a":1}}})", "nope"}) {
    EXPECT_FALSE(ParseKernelTable(bad, "/k", "test").ok()) << bad;
  }
}

// Port 49999's rule, shared by the daemon and the interpreter (issue 32):
// /execute needs the token; the routes the official SDK calls without one
// take none, or the right one.
TEST(InterpreterAccess, ExecuteNeedsTheTokenContextsTakeNoneOrTheRightOne) {
  const std::string tok = "0123456789abcdef";
  EXPECT_EQ(InterpreterAccessError("POST", "/execute", "", tok), "missing X-Access-Token");
  EXPECT_EQ(InterpreterAccessError("POST", "/execute", "wrong", tok), "invalid X-Access-Token");
  EXPECT_EQ(InterpreterAccessError("POST", "/execute", "0123456789abcdeF", tok), "invalid X-Access-Token");
  EXPECT_EQ(InterpreterAccessError("POST", "/execute", tok, tok), "");
  // An empty token (the daemon's side) matches nothing.
  EXPECT_EQ(InterpreterAccessError("POST", "/execute", "", ""), "missing X-Access-Token");
  EXPECT_EQ(InterpreterAccessError("POST", "/execute", "x", ""), "invalid X-Access-Token");
  // What the SDK sends without a token.
  for (auto [m, p] : {std::pair{"GET", "/contexts"}, {"POST", "/contexts"}, {"DELETE", "/contexts/abc"},
                      {"POST", "/contexts/abc/restart"}, {"GET", "/health"}, {"HEAD", "/health"}}) {
    EXPECT_EQ(InterpreterAccessError(m, p, "", tok), "") << m << " " << p;
    EXPECT_EQ(InterpreterAccessError(m, p, tok, tok), "") << m << " " << p;
    if (std::string_view(p) != "/health") {
      EXPECT_EQ(InterpreterAccessError(m, p, "wrong", tok), "invalid X-Access-Token") << m << " " << p;
    }
  }
  // Anything else, other methods, and look-alike paths need it.
  for (auto [m, p] : {std::pair{"GET", "/execute"}, {"PUT", "/contexts"}, {"GET", "/contexts/abc"},
                      {"DELETE", "/contexts/a/b"}, {"POST", "/contexts/a/b/restart"}, {"POST", "/contexts//restart"},
                      {"DELETE", "/contexts/"}, {"POST", "/health"}, {"GET", "/"}, {"GET", "/contexts/../execute"},
                      {"POST", "/execute/"}, {"POST", "/Execute"}}) {
    EXPECT_EQ(InterpreterAccessError(m, p, "", tok), "missing X-Access-Token") << m << " " << p;
  }
  EXPECT_EQ(kInterpreterPort, 49999);
}

}  // namespace
}  // namespace airlock::interpreter
