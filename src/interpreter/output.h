// The NDJSON lines of POST /execute (shared/spec/e2b-code-interpreter.md
// §B.2) and how kernel IOPub messages map onto them. Every line is one JSON
// object, ASCII-only (non-ASCII as \uXXXX, surrogate pairs above the BMP;
// invalid UTF-8 as \ufffd) so a client that decodes each network chunk on its
// own never sees a split character, and never empty. Lines carry no '\n';
// the caller appends it.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace airlock::interpreter {

// ASCII-only compact JSON: dump(-1, ' ', true, error_handler_t::replace).
std::string DumpAscii(const nlohmann::json& j);

// ISO 8601 UTC with microseconds ("2026-01-02T03:04:05.123456Z").
std::string TimestampNow();

// One pair of surrounding quotes ('...' or "...") removed, if present.
std::string StripQuotes(std::string_view text);

// {"type":"stdout"|"stderr","text","timestamp"}
std::string StreamLine(std::string_view name, std::string_view text, std::string_view timestamp);
// {"type":"result", <mapped MIME keys>, "extra":{...}, "is_main_result"} from
// a display_data / execute_result `data` object (text/plain → text with the
// quotes stripped, application/json → json, e2b/chart → chart, e2b/data →
// data, image/png → png, ...; unknown MIME types into extra).
std::string ResultLine(const nlohmann::json& data, bool is_main_result);
// {"type":"error","name","value","traceback"}
std::string ErrorLine(std::string_view name, std::string_view value, std::string_view traceback);
// From an `error` IOPub message or an execute_reply with status error:
// ename, evalue, traceback (array of strings, joined with '\n').
std::string ErrorLineFromContent(const nlohmann::json& content);
std::string NumberOfExecutionsLine(long long count);
std::string KeepaliveLine();
std::string EndOfExecutionLine();

// What an IOPub message of one execution becomes: the line to send, if any.
// stream → stdout/stderr; execute_result → result (main); display_data →
// result (not main); error → error; execute_input → number_of_executions.
// Everything else (status, clear_output, ...) → nullopt.
std::optional<std::string> LineForIopub(std::string_view msg_type, const nlohmann::json& content);

// Stream text cut into pieces of at most `max_bytes` (> 4) each, so one
// IOPub stream message of megabytes becomes several stdout/stderr lines of
// bounded size. Why: the official SDKs read /execute's NDJSON into a string
// they search for '\n' again after every network chunk (JS readLines), so a
// line of L bytes costs them O(L^2 / chunk): a 10 MiB line took the JS SDK
// 3-13 s of CPU, 64 KiB pieces a few ms (measured). A piece ends after its
// last '\n' when it has one, else at a UTF-8 character boundary; joined,
// the pieces are `text`. Empty text: one empty piece.
std::vector<std::string_view> StreamPieces(std::string_view text, size_t max_bytes);

// The same stream line with its text cut so the whole line is at most
// `max_bytes` (cut at a UTF-8 character boundary); nullopt if even an empty
// text does not fit.
std::optional<std::string> TruncatedStreamLine(std::string_view name, std::string_view text, size_t max_bytes);

}  // namespace airlock::interpreter
