#include "interpreter/output.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <utility>

namespace airlock::interpreter {

using json = nlohmann::json;

std::string DumpAscii(const json& j) { return j.dump(-1, ' ', true, json::error_handler_t::replace); }

std::string TimestampNow() {
  auto now = std::chrono::system_clock::now();
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(us / 1000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long long>(us % 1000000));
  return buf;
}

std::string StripQuotes(std::string_view t) {
  if (t.size() >= 2 && (t.front() == '\'' || t.front() == '"') && t.back() == t.front())
    return std::string(t.substr(1, t.size() - 2));
  return std::string(t);
}

std::string StreamLine(std::string_view name, std::string_view text, std::string_view timestamp) {
  return DumpAscii(json{{"type", name}, {"text", text}, {"timestamp", timestamp}});
}

std::string ResultLine(const json& data, bool is_main_result) {
  static const std::pair<const char*, const char*> kKeys[] = {
      {"text/html", "html"},          {"text/markdown", "markdown"},     {"image/svg+xml", "svg"},
      {"image/png", "png"},           {"image/jpeg", "jpeg"},            {"application/pdf", "pdf"},
      {"text/latex", "latex"},        {"application/json", "json"},      {"application/javascript", "javascript"},
      {"e2b/data", "data"},           {"e2b/chart", "chart"}};
  json line = json::object();
  line["type"] = "result";
  json extra = json::object();
  if (data.is_object()) {
    for (auto it = data.begin(); it != data.end(); ++it) {
      const std::string& mime = it.key();
      if (mime == "text/plain") {
        line["text"] = it->is_string() ? json(StripQuotes(it->get_ref<const std::string&>())) : *it;
        continue;
      }
      const char* key = nullptr;
      for (const auto& [m, k] : kKeys) {
        if (mime == m) key = k;
      }
      if (key) line[key] = *it;
      else extra[mime] = *it;
    }
  }
  line["extra"] = std::move(extra);
  line["is_main_result"] = is_main_result;
  return DumpAscii(line);
}

std::string ErrorLine(std::string_view name, std::string_view value, std::string_view traceback) {
  return DumpAscii(json{{"type", "error"}, {"name", name}, {"value", value}, {"traceback", traceback}});
}

std::string ErrorLineFromContent(const json& c) {
  auto str = [&](const char* k) -> std::string {
    auto it = c.find(k);
    if (it == c.end() || it->is_null()) return "";
    return it->is_string() ? it->get<std::string>() : it->dump(-1, ' ', false, json::error_handler_t::replace);
  };
  std::string tb;
  if (auto it = c.find("traceback"); it != c.end()) {
    if (it->is_array()) {
      bool first = true;
      for (const auto& l : *it) {
        if (!first) tb += '\n';
        first = false;
        tb += l.is_string() ? l.get<std::string>() : l.dump(-1, ' ', false, json::error_handler_t::replace);
      }
    } else if (it->is_string()) {
      tb = it->get<std::string>();
    }
  }
  return ErrorLine(str("ename"), str("evalue"), tb);
}

std::string NumberOfExecutionsLine(long long count) {
  return DumpAscii(json{{"type", "number_of_executions"}, {"execution_count", count}});
}
std::string KeepaliveLine() { return R"({"type":"keepalive"})"; }
std::string EndOfExecutionLine() { return R"({"type":"end_of_execution"})"; }

std::optional<std::string> LineForIopub(std::string_view msg_type, const json& content) {
  if (!content.is_object()) return std::nullopt;
  if (msg_type == "stream") {
    std::string name = content.value("name", "stdout");
    if (name != "stderr") name = "stdout";
    auto it = content.find("text");
    if (it == content.end() || !it->is_string()) return std::nullopt;
    return StreamLine(name, it->get_ref<const std::string&>(), TimestampNow());
  }
  if (msg_type == "execute_result" || msg_type == "display_data") {
    auto it = content.find("data");
    return ResultLine(it == content.end() ? json::object() : *it, msg_type == "execute_result");
  }
  if (msg_type == "error") return ErrorLineFromContent(content);
  if (msg_type == "execute_input") {
    auto it = content.find("execution_count");
    if (it == content.end() || !it->is_number_integer()) return std::nullopt;
    return NumberOfExecutionsLine(it->get<long long>());
  }
  return std::nullopt;
}

std::vector<std::string_view> StreamPieces(std::string_view text, size_t max_bytes) {
  std::vector<std::string_view> pieces;
  do {
    size_t n = std::min(text.size(), max_bytes);
    if (n < text.size()) {
      size_t nl = text.rfind('\n', n - 1);
      if (nl != std::string_view::npos && nl > 0) {
        n = nl + 1;
      } else {
        // Back to the start of the character at `n`; a piece holds at least
        // one (a UTF-8 character is at most 4 bytes, max_bytes > 4).
        size_t cut = n;
        while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
        if (cut > 0) n = cut;
      }
    }
    pieces.push_back(text.substr(0, n));
    text.remove_prefix(n);
  } while (!text.empty());
  return pieces;
}

std::optional<std::string> TruncatedStreamLine(std::string_view name, std::string_view text, size_t max_bytes) {
  std::string ts = TimestampNow();
  size_t n = text.size();
  while (true) {
    while (n > 0 && n < text.size() && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
    std::string line = StreamLine(name, text.substr(0, n), ts);
    if (line.size() <= max_bytes) return line;
    if (n == 0) return std::nullopt;
    size_t over = line.size() - max_bytes;
    // Each source byte is at least one output byte: cutting `over` of them
    // is enough (one more round at most, after the boundary adjustment).
    n = n > over ? n - over : 0;
  }
}

}  // namespace airlock::interpreter
