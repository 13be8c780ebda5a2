// NDJSON lines (interpreter/output.h): MIME mapping, quote stripping,
// ASCII-only JSON (emoji as surrogate pairs, invalid UTF-8 replaced), the
// truncated stream line.
#include "interpreter/output.h"

#include <gtest/gtest.h>

namespace airlock::interpreter {
namespace {

using json = nlohmann::json;

bool Ascii(const std::string& s) {
  for (unsigned char c : s) {
    if (c >= 0x80 || c == '\n') return false;
  }
  return true;
}

TEST(InterpreterOutput, StripQuotes) {
  EXPECT_EQ(StripQuotes("'abc'"), "abc");
  EXPECT_EQ(StripQuotes("\"abc\""), "abc");
  EXPECT_EQ(StripQuotes("''"), "");
  EXPECT_EQ(StripQuotes("'"), "'");
  EXPECT_EQ(StripQuotes("'abc\""), "'abc\"");
  EXPECT_EQ(StripQuotes("''abc''"), "'abc'");  // one pair only
  EXPECT_EQ(StripQuotes("42"), "42");
  EXPECT_EQ(StripQuotes(""), "");
}

TEST(InterpreterOutput, ResultMapsMimeKeys) {
  json data = {{"text/plain", "'hi'"},
               {"text/html", "<b>hi</b>"},
               {"text/markdown", "**hi**"},
               {"image/svg+xml", "<svg/>"},
               {"image/png", "iVBOR"},
               {"image/jpeg", "/9j/"},
               {"application/pdf", "JVBER"},
               {"text/latex", "$x$"},
               {"application/json", {{"a", 1}}},
               {"application/javascript", "alert(1)"},
               {"e2b/data", {{"col", {1, 2}}}},
               {"e2b/chart", {{"type", "line"}}},
               {"application/vnd.custom+json", {{"z", true}}}};
  std::string line = ResultLine(data, true);
  ASSERT_TRUE(Ascii(line));
  json j = json::parse(line);
  EXPECT_EQ(j["type"], "result");
  EXPECT_EQ(j["is_main_result"], true);
  EXPECT_EQ(j["text"], "hi");
  EXPECT_EQ(j["html"], "<b>hi</b>");
  EXPECT_EQ(j["markdown"], "**hi**");
  EXPECT_EQ(j["svg"], "<svg/>");
  EXPECT_EQ(j["png"], "iVBOR");
  EXPECT_EQ(j["jpeg"], "/9j/");
  EXPECT_EQ(j["pdf"], "JVBER");
  EXPECT_EQ(j["latex"], "$x$");
  EXPECT_EQ(j["json"], (json{{"a", 1}}));
  EXPECT_EQ(j["javascript"], "alert(1)");
  EXPECT_EQ(j["data"], (json{{"col", {1, 2}}}));
  EXPECT_EQ(j["chart"], (json{{"type", "line"}}));
  EXPECT_EQ(j["extra"], (json{{"application/vnd.custom+json", {{"z", true}}}}));
  EXPECT_EQ(j.size(), 15u);  // nothing stray: 12 keys + type, extra, is_main_result
}

TEST(InterpreterOutput, DisplayDataIsNotMainAndExtraAlwaysThere) {
  json j = json::parse(*LineForIopub("display_data", {{"data", {{"text/plain", "<Figure>"}}}}));
  EXPECT_EQ(j["is_main_result"], false);
  EXPECT_EQ(j["extra"], json::object());
  EXPECT_EQ(j["text"], "<Figure>");
  j = json::parse(*LineForIopub("execute_result", {{"data", {{"text/plain", "2"}}}, {"execution_count", 1}}));
  EXPECT_EQ(j["is_main_result"], true);
}

TEST(InterpreterOutput, IopubMapping) {
  json s = json::parse(*LineForIopub("stream", {{"name", "stderr"}, {"text", "oops\n"}}));
  EXPECT_EQ(s["type"], "stderr");
  EXPECT_EQ(s["text"], "oops\n");
  EXPECT_TRUE(s["timestamp"].is_string());
  json e = json::parse(*LineForIopub("error", {{"ename", "E"}, {"evalue", "v"}, {"traceback", {"l1", "l2"}}}));
  EXPECT_EQ(e, (json{{"type", "error"}, {"name", "E"}, {"value", "v"}, {"traceback", "l1\nl2"}}));
  json n = json::parse(*LineForIopub("execute_input", {{"code", "1"}, {"execution_count", 7}}));
  EXPECT_EQ(n, (json{{"type", "number_of_executions"}, {"execution_count", 7}}));
  EXPECT_FALSE(LineForIopub("status", {{"execution_state", "busy"}}));
  EXPECT_FALSE(LineForIopub("clear_output", json::object()));
  EXPECT_FALSE(LineForIopub("stream", {{"name", "stdout"}, {"text", 5}}));  // hostile shapes: nothing
  EXPECT_FALSE(LineForIopub("stream", json::array()));
  EXPECT_TRUE(LineForIopub("error", {{"ename", 1}, {"traceback", "x"}}));  // odd types still a line
}

TEST(InterpreterOutput, AsciiOnlyWithSurrogatePairs) {
  std::string line = StreamLine("stdout", "caf\xc3\xa9 \xf0\x9f\x98\x80 \x01", "t");
  EXPECT_TRUE(Ascii(line)) << line;
  EXPECT_NE(line.find("caf\\u00e9 \\ud83d\\ude00 \\u0001"), std::string::npos) << line;
  EXPECT_EQ(json::parse(line)["text"], "caf\xc3\xa9 \xf0\x9f\x98\x80 \x01");
}

TEST(InterpreterOutput, InvalidUtf8BecomesReplacementCharacter) {
  std::string line = StreamLine("stdout", "a\xff\xfe b \xc3", "t");
  EXPECT_TRUE(Ascii(line)) << line;
  EXPECT_NE(line.find("\\ufffd"), std::string::npos) << line;
  EXPECT_FALSE(json::parse(line, nullptr, false).is_discarded());
}

TEST(InterpreterOutput, FixedLines) {
  EXPECT_EQ(KeepaliveLine(), R"({"type":"keepalive"})");
  EXPECT_EQ(EndOfExecutionLine(), R"({"type":"end_of_execution"})");
  EXPECT_EQ(ErrorLine("A", "b", ""), R"({"name":"A","traceback":"","type":"error","value":"b"})");
}

TEST(InterpreterOutput, TruncatedStreamLineFits) {
  std::string text(10000, 'x');
  for (size_t max : {80u, 100u, 500u, 9999u}) {
    auto l = TruncatedStreamLine("stdout", text, max);
    ASSERT_TRUE(l) << max;
    EXPECT_LE(l->size(), max);
    EXPECT_GT(l->size(), max - 10);
  }
  EXPECT_FALSE(TruncatedStreamLine("stdout", text, 10));
  // Never cut inside a character: the emoji is whole or absent.
  std::string emoji;
  for (int i = 0; i < 100; ++i) emoji += "\xf0\x9f\x98\x80";
  for (size_t max = 70; max < 400; ++max) {
    auto l = TruncatedStreamLine("stdout", emoji, max);
    ASSERT_TRUE(l) << max;
    EXPECT_LE(l->size(), max);
    std::string t = json::parse(*l)["text"];
    EXPECT_EQ(t.size() % 4, 0u);
    EXPECT_EQ(t.find("\xef\xbf\xbd"), std::string::npos);
  }
}

TEST(InterpreterOutput, StreamPiecesAreBoundedWholeCharactersAndJoinToTheText) {
  EXPECT_EQ(StreamPieces("", 64), std::vector<std::string_view>{""});
  EXPECT_EQ(StreamPieces("short", 64), std::vector<std::string_view>{"short"});
  // Lines: a piece ends after its last newline.
  std::string lines;
  for (int i = 0; i < 10; ++i) lines += std::string(9, 'a' + i) + "\n";
  auto p = StreamPieces(lines, 25);
  ASSERT_EQ(p.size(), 5u);
  for (auto piece : p) EXPECT_EQ(piece.size(), 20u);
  // No newline: cut at a character boundary, never inside a 4-byte emoji.
  std::string emoji;
  for (int i = 0; i < 100; ++i) emoji += "\xf0\x9f\x98\x80";
  for (size_t max = 5; max < 40; ++max) {
    std::string joined;
    for (auto piece : StreamPieces(emoji, max)) {
      EXPECT_LE(piece.size(), max);
      EXPECT_EQ(piece.size() % 4, 0u) << max;
      joined += piece;
    }
    EXPECT_EQ(joined, emoji);
  }
  // Invalid UTF-8 (continuation bytes only) is still cut, never looped on.
  std::string bad(1000, '\x80');
  size_t total = 0;
  for (auto piece : StreamPieces(bad, 64)) total += piece.size();
  EXPECT_EQ(total, bad.size());
}

}  // namespace
}  // namespace airlock::interpreter
