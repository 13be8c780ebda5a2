// Typed messages of process.proto and filesystem.proto (spec §3.5) with
// their proto3-JSON forms. Output uses nlohmann::ordered_json so keys come
// out in field-number order, lowerCamelCase, a oneof as one key, defaults
// omitted like connect-go (except explicit-presence fields, which are
// emitted whenever set). Parsers accept lowerCamelCase or snake_case names,
// ignore unknown fields, and return invalid_argument on wrong types; they
// never throw.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "envd/proto_json.h"

namespace airlock::envd {

using OJson = nlohmann::ordered_json;
using Json = nlohmann::json;

// Parses a request body; invalid_argument on malformed JSON or a non-object.
StatusOr<Json> ParseJsonObject(std::string_view body);
// Compact dump; invalid UTF-8 in strings is replaced, never thrown.
std::string Dump(const OJson& j);

// ---- process ----

struct ProcessConfig {
  std::string cmd;
  std::vector<std::string> args;
  std::map<std::string, std::string> envs;
  std::optional<std::string> cwd;
};
OJson ToJson(const ProcessConfig& c);
StatusOr<ProcessConfig> ProcessConfigFromJson(const Json& j);

struct PtySize {
  uint32_t cols = 0;
  uint32_t rows = 0;
};

struct ProcessSelector {
  std::optional<uint32_t> pid;
  std::optional<std::string> tag;
};
OJson ToJson(const ProcessSelector& s);
// invalid_argument when neither pid nor tag is set.
StatusOr<ProcessSelector> ProcessSelectorFromJson(const Json& j);

struct StartRequest {
  ProcessConfig process;
  std::optional<PtySize> pty;
  std::optional<std::string> tag;
  std::optional<bool> stdin;
};
OJson ToJson(const StartRequest& r);
StatusOr<StartRequest> StartRequestFromJson(const Json& j);

// {"process":{...}} for Connect, CloseStdin.
StatusOr<ProcessSelector> SelectorRequestFromJson(const Json& j);

// Byte counts into a process's output streams, indexed by
// DataEvent::Stream (stdout, stderr, pty): how much of each the process has
// written since it started. Resumable output (docs/agent.md "Resumable
// output"): the JSON message {"stdout":"N","stderr":"N","pty":"N"}, uint64
// as strings, zeros omitted.
using OutputOffsets = std::array<uint64_t, 3>;
OJson ToJson(const OutputOffsets& o);
StatusOr<OutputOffsets> OutputOffsetsFromJson(const Json& j);

// ConnectRequest: {"process":{...}, "resumeFrom":{...}}. With resumeFrom
// the stream replays the held output after those offsets before the live
// output; without it, only what the process writes from now on.
struct ConnectRequest {
  ProcessSelector process;
  std::optional<OutputOffsets> resume_from;
};
StatusOr<ConnectRequest> ConnectRequestFromJson(const Json& j);

// Whom SendSignal reaches (the JSON enum SignalScope; names
// SIGNAL_SCOPE_PROCESS / SIGNAL_SCOPE_GROUP, or "process" / "group", or
// 1 / 2). Unspecified is the group.
enum class SignalScope { kUnspecified = 0, kProcess = 1, kGroup = 2 };
struct SendSignalRequest {
  ProcessSelector process;
  Signal signal = Signal::kUnspecified;
  SignalScope scope = SignalScope::kUnspecified;
};
StatusOr<SendSignalRequest> SendSignalRequestFromJson(const Json& j);

struct ProcessInput {
  enum class Kind { kStdin, kPty } kind = Kind::kStdin;
  std::string data;  // raw bytes
};
struct SendInputRequest {
  ProcessSelector process;
  ProcessInput input;
};
StatusOr<SendInputRequest> SendInputRequestFromJson(const Json& j);

struct UpdateRequest {
  ProcessSelector process;
  std::optional<PtySize> pty;
};
StatusOr<UpdateRequest> UpdateRequestFromJson(const Json& j);

struct StartEvent {
  uint32_t pid = 0;
  // Where the stream's output starts in each of the process's streams
  // (zeros for a Start; the resume point or the current ends for a Connect).
  std::optional<OutputOffsets> offsets;
};
struct DataEvent {
  enum class Stream { kStdout, kStderr, kPty } stream = Stream::kStdout;
  std::string data;  // raw bytes; base64 on the wire
  uint64_t offset = 0;  // of data's first byte within its stream ("offset", omitted when 0)
};
// Filled from an exit the way Go's os.ProcessState is (spec §3.2).
struct EndEvent {
  int32_t exit_code = 0;
  bool exited = false;
  std::string status;
  std::optional<std::string> error;
};
// The JSON name of a stream ("stdout", "stderr", "pty").
const char* StreamName(DataEvent::Stream s);
struct KeepAliveEvent {};
using ProcessEvent = std::variant<StartEvent, DataEvent, EndEvent, KeepAliveEvent>;

// exit_code set → exited, that code, "exit status N", error unless 0;
// signal → exitCode -1, exited false, "signal: killed" etc.
EndEvent EndEventFromExit(std::optional<int> exit_code, std::optional<int> signal);

// The ProcessEvent message: {"start":{...}} / {"data":{...}} / ...
OJson ToJson(const ProcessEvent& e);
StatusOr<ProcessEvent> ProcessEventFromJson(const Json& j);
// StartResponse / ConnectResponse payload {"event":{...}} as a string.
// Data events are serialized without building a JSON tree.
std::string EventResponsePayload(const ProcessEvent& e);
// Reverse of EventResponsePayload (host-side client).
StatusOr<ProcessEvent> ParseEventResponse(std::string_view payload);

struct ProcessInfo {
  ProcessConfig config;
  uint32_t pid = 0;
  std::optional<std::string> tag;
};
OJson ToJson(const ProcessInfo& p);
StatusOr<ProcessInfo> ProcessInfoFromJson(const Json& j);

// ---- filesystem ----

struct EntryInfo {
  std::string name;
  FileType type = FileType::kUnspecified;
  std::string path;
  int64_t size = 0;
  uint32_t mode = 0;  // permission bits only (st_mode & 0777)
  std::string permissions;  // "-rw-r--r--"
  std::string owner;
  std::string group;
  Timestamp modified_time;
  std::optional<std::string> symlink_target;
  std::map<std::string, std::string> metadata;
};
OJson ToJson(const EntryInfo& e);
StatusOr<EntryInfo> EntryInfoFromJson(const Json& j);

// {"path":...} (Stat, MakeDir, Remove).
StatusOr<std::string> PathRequestFromJson(const Json& j);
struct ListDirRequest {
  std::string path;
  uint32_t depth = 0;
};
StatusOr<ListDirRequest> ListDirRequestFromJson(const Json& j);
struct MoveRequest {
  std::string source;
  std::string destination;
};
StatusOr<MoveRequest> MoveRequestFromJson(const Json& j);
struct WatchDirRequest {
  std::string path;
  bool recursive = false;
  bool include_entry = false;
  bool allow_network_mounts = false;
};
// Also the shape of CreateWatcherRequest.
StatusOr<WatchDirRequest> WatchDirRequestFromJson(const Json& j);
// {"watcherId":...} (GetWatcherEvents, RemoveWatcher); invalid_argument
// when it is missing or empty.
StatusOr<std::string> WatcherIdRequestFromJson(const Json& j);

struct FilesystemEvent {
  std::string name;  // relative to the watched directory ("." = itself)
  EventType type = EventType::kUnspecified;
  std::optional<EntryInfo> entry;
  bool operator==(const FilesystemEvent& o) const {
    return name == o.name && type == o.type && entry.has_value() == o.entry.has_value();
  }
};
OJson ToJson(const FilesystemEvent& e);
StatusOr<FilesystemEvent> FilesystemEventFromJson(const Json& j);
// WatchDirResponse payloads: {"start":{}}, {"filesystem":{...}},
// {"keepalive":{}}.
std::string WatchStartPayload();
std::string WatchEventPayload(const FilesystemEvent& e);
std::string WatchKeepalivePayload();

}  // namespace airlock::envd
