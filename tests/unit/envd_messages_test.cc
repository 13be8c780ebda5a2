// The JSON test vectors of spec §3.6, both directions.
#include <gtest/gtest.h>

#include "envd/messages.h"

namespace airlock::envd {
namespace {

Json P(std::string_view s) { return *ParseJsonObject(s); }

TEST(Vectors, StartRequest) {
  const char* v1 = R"({"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"]},"stdin":false})";
  auto r = StartRequestFromJson(P(v1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->process.cmd, "/bin/bash");
  EXPECT_EQ(r->process.args, (std::vector<std::string>{"-l", "-c", "echo hi"}));
  EXPECT_EQ(r->stdin, false);
  EXPECT_EQ(Dump(ToJson(*r)), v1);
  const char* v2 =
      R"({"process":{"cmd":"/bin/bash","args":["-l","-c","pwd"],"envs":{"X":"y"},"cwd":"/tmp"},"stdin":true})";
  auto r2 = StartRequestFromJson(P(v2));
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->process.envs.at("X"), "y");
  EXPECT_EQ(r2->process.cwd, "/tmp");
  EXPECT_EQ(Dump(ToJson(*r2)), v2);
  auto pty = StartRequestFromJson(P(R"({"process":{"cmd":"/bin/bash"},"pty":{"size":{"cols":80,"rows":24}}})"));
  ASSERT_TRUE(pty.ok());
  EXPECT_EQ(pty->pty->cols, 80u);
}

TEST(Vectors, StartResponses) {
  struct V {
    ProcessEvent ev;
    const char* json;
  } vs[] = {
      {StartEvent{1234, std::nullopt}, R"({"event":{"start":{"pid":1234}}})"},
      {StartEvent{1234, OutputOffsets{}}, R"({"event":{"start":{"pid":1234,"offsets":{}}}})"},
      {StartEvent{7, OutputOffsets{12, 0, 5}}, R"({"event":{"start":{"pid":7,"offsets":{"stdout":"12","pty":"5"}}}})"},
      {DataEvent{DataEvent::Stream::kStderr, "err\n", 4096},
       R"({"event":{"data":{"stderr":"ZXJyCg==","offset":"4096"}}})"},
      {DataEvent{DataEvent::Stream::kStdout, "hi\n"}, R"({"event":{"data":{"stdout":"aGkK"}}})"},
      {DataEvent{DataEvent::Stream::kStderr, "err\n"}, R"({"event":{"data":{"stderr":"ZXJyCg=="}}})"},
      {EndEventFromExit(0, std::nullopt), R"({"event":{"end":{"exited":true,"status":"exit status 0"}}})"},
      {EndEventFromExit(3, std::nullopt),
       R"({"event":{"end":{"exitCode":3,"exited":true,"status":"exit status 3","error":"exit status 3"}}})"},
      {EndEventFromExit(std::nullopt, 9),
       R"({"event":{"end":{"exitCode":-1,"status":"signal: killed","error":"signal: killed"}}})"},
      {KeepAliveEvent{}, R"({"event":{"keepalive":{}}})"},
  };
  for (const auto& v : vs) {
    EXPECT_EQ(EventResponsePayload(v.ev), v.json);
    auto back = ParseEventResponse(v.json);
    ASSERT_TRUE(back.ok()) << v.json;
    EXPECT_EQ(EventResponsePayload(*back), v.json);
  }
  auto end = ParseEventResponse(R"({"event":{"end":{"exit_code":"3","exited":true}}})");
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(std::get<EndEvent>(*end).exit_code, 3);
  EXPECT_EQ(EndEventFromExit(std::nullopt, 15).status, "signal: terminated");
}

TEST(Vectors, UnaryRequests) {
  auto sig = SendSignalRequestFromJson(P(R"({"process":{"pid":1234},"signal":"SIGNAL_SIGKILL"})"));
  ASSERT_TRUE(sig.ok());
  EXPECT_EQ(*sig->process.pid, 1234u);
  EXPECT_EQ(sig->signal, Signal::kSigkill);
  auto in = SendInputRequestFromJson(P(R"({"process":{"pid":1234},"input":{"stdin":"YWJjCg=="}})"));
  ASSERT_TRUE(in.ok());
  EXPECT_EQ(in->input.data, "abc\n");
  EXPECT_EQ(in->input.kind, ProcessInput::Kind::kStdin);
  EXPECT_EQ(sig->scope, SignalScope::kUnspecified);
  for (const char* scope : {R"("SIGNAL_SCOPE_PROCESS")", R"("process")", "1"}) {
    auto s = SendSignalRequestFromJson(P(std::string(R"({"process":{"pid":1},"signal":9,"scope":)") + scope + "}"));
    ASSERT_TRUE(s.ok()) << scope;
    EXPECT_EQ(s->scope, SignalScope::kProcess);
  }
  auto grp = SendSignalRequestFromJson(P(R"({"process":{"pid":1},"signal":9,"scope":"SIGNAL_SCOPE_GROUP"})"));
  ASSERT_TRUE(grp.ok());
  EXPECT_EQ(grp->scope, SignalScope::kGroup);
  for (const char* bad : {R"("SIGNAL_SCOPE_TREE")", "7", "true"}) {
    auto s = SendSignalRequestFromJson(P(std::string(R"({"process":{"pid":1},"signal":9,"scope":)") + bad + "}"));
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  auto con = ConnectRequestFromJson(P(R"({"process":{"tag":"t"},"resumeFrom":{"stdout":"10","stderr":3}})"));
  ASSERT_TRUE(con.ok());
  EXPECT_EQ(*con->process.tag, "t");
  ASSERT_TRUE(con->resume_from);
  EXPECT_EQ(*con->resume_from, (OutputOffsets{10, 3, 0}));
  auto plain = ConnectRequestFromJson(P(R"({"process":{"pid":5}})"));
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->resume_from);
  EXPECT_FALSE(ConnectRequestFromJson(P(R"({"process":{"pid":5},"resumeFrom":{"stdout":-1}})")).ok());
  EXPECT_FALSE(ConnectRequestFromJson(P(R"({"process":{"pid":5},"resumeFrom":[1]})")).ok());
  auto sel = SelectorRequestFromJson(P(R"({"process":{"pid":1234}})"));
  ASSERT_TRUE(sel.ok());
  EXPECT_EQ(*sel->pid, 1234u);
  EXPECT_EQ(Dump(ToJson(*sel)), R"({"pid":1234})");
  auto upd = UpdateRequestFromJson(P(R"({"process":{"pid":1234},"pty":{"size":{"cols":80,"rows":24}}})"));
  ASSERT_TRUE(upd.ok());
  EXPECT_EQ(upd->pty->rows, 24u);
  auto ld = ListDirRequestFromJson(P(R"({"path":"/home/user","depth":1})"));
  ASSERT_TRUE(ld.ok());
  EXPECT_EQ(ld->depth, 1u);
  auto mv = MoveRequestFromJson(P(R"({"source":"/home/user/a","destination":"/home/user/b"})"));
  ASSERT_TRUE(mv.ok());
  EXPECT_EQ(mv->destination, "/home/user/b");
  auto wd = WatchDirRequestFromJson(P(R"({"path":"/home/user"})"));
  ASSERT_TRUE(wd.ok());
  EXPECT_FALSE(wd->recursive);
}

TEST(Vectors, ListResponse) {
  ProcessInfo p;
  p.config.cmd = "/bin/bash";
  p.config.args = {"-l", "-c", "sleep 30"};
  p.pid = 1234;
  OJson j = {{"processes", OJson::array({ToJson(p)})}};
  const char* v = R"({"processes":[{"config":{"cmd":"/bin/bash","args":["-l","-c","sleep 30"]},"pid":1234}]})";
  EXPECT_EQ(Dump(j), v);
  auto back = ProcessInfoFromJson(P(v)["processes"][0]);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->pid, 1234u);
}

TEST(Vectors, StatResponse) {
  const char* v =
      R"({"entry":{"name":"a.txt","type":"FILE_TYPE_FILE","path":"/home/user/a.txt","size":"11","mode":420,"permissions":"-rw-r--r--","owner":"user","group":"user","modifiedTime":"2026-01-02T03:04:05.500Z"}})";
  auto e = EntryInfoFromJson(P(v)["entry"]);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->size, 11);
  EXPECT_EQ(e->mode, 0644u);
  EXPECT_EQ(e->type, FileType::kFile);
  EXPECT_FALSE(e->symlink_target.has_value());
  EXPECT_EQ(Dump(OJson{{"entry", ToJson(*e)}}), v);
}

TEST(Vectors, WatchDirResponses) {
  OJson ev = {{"filesystem", {{"name", "a.txt"}, {"type", std::string(EventTypeName(EventType::kWrite))}}}};
  EXPECT_EQ(Dump(ev), R"({"filesystem":{"name":"a.txt","type":"EVENT_TYPE_WRITE"}})");
}

TEST(Messages, MalformedInputIsAnError) {
  EXPECT_FALSE(ParseJsonObject("{").ok());
  EXPECT_FALSE(ParseJsonObject("[]").ok());
  EXPECT_FALSE(StartRequestFromJson(P(R"({"process":{"cmd":5}})")).ok());
  EXPECT_FALSE(StartRequestFromJson(P(R"({"process":{"args":"x"}})")).ok());
  EXPECT_FALSE(StartRequestFromJson(P(R"({"process":{"envs":{"a":1}}})")).ok());
  EXPECT_FALSE(StartRequestFromJson(P(R"({})")).ok());
  EXPECT_FALSE(SelectorRequestFromJson(P(R"({"process":{}})")).ok());
  EXPECT_FALSE(SelectorRequestFromJson(P(R"({"process":{"pid":-1}})")).ok());
  EXPECT_FALSE(SendInputRequestFromJson(P(R"({"process":{"pid":1},"input":{"stdin":"!!"}})")).ok());
  EXPECT_FALSE(ParseEventResponse(R"({"event":{}})").ok());
  // Unknown fields are ignored; snake_case accepted.
  auto e = EntryInfoFromJson(P(R"({"name":"x","symlink_target":"y","bogus":[1]})"));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->symlink_target, "y");
}

}  // namespace
}  // namespace airlock::envd
