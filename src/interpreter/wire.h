// The Jupyter messaging wire (protocol 5.3) as the interpreter speaks it to
// its kernels: a message is the multipart frames
//   [routing ids...] "<IDS|MSG>" hmac header parent_header metadata content [buffers...]
// where hmac is the lower-case hex HMAC-SHA256 of the four JSON frames under
// the connection file's key. Pure functions, no sockets (zmq_hub.h owns them).
//
// ParseMessage() verifies the signature before it looks at the JSON, and
// refuses (InvalidArgument / PermissionDenied for a bad signature) anything
// malformed: no delimiter, fewer than four frames after it, frames that are
// not JSON objects. Invalid UTF-8 inside a frame (a kernel may emit it, e.g.
// surrogate-escaped bytes) is replaced by U+FFFD instead of refused. A
// content frame longer than `max_content` is not parsed: the message comes
// back with content_too_large set and an empty content, so the caller can
// still route it by its header.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace airlock::interpreter {

inline constexpr std::string_view kDelimiter = "<IDS|MSG>";
inline constexpr std::string_view kProtocolVersion = "5.3";

struct KernelMessage {
  nlohmann::json header = nlohmann::json::object();
  nlohmann::json parent_header = nlohmann::json::object();
  nlohmann::json metadata = nlohmann::json::object();
  nlohmann::json content = nlohmann::json::object();
  bool content_too_large = false;
  size_t content_bytes = 0;  // size of the content frame as received

  // header.msg_type / header.msg_id / parent_header.msg_id, "" when absent.
  std::string msg_type() const;
  std::string msg_id() const;
  std::string parent_id() const;
};

// Lower-case hex HMAC-SHA256 of the concatenated parts (empty key → "").
std::string Sign(std::string_view key, const std::vector<std::string_view>& parts);

// A new header: fresh msg_id, the session, username "airlock", ISO date,
// msg_type, version 5.3.
nlohmann::json MakeHeader(std::string_view msg_type, std::string_view session);

// The frames to send on a DEALER: delimiter, hmac, header, parent (empty
// object), metadata (empty object), content.
std::vector<std::string> SerializeMessage(std::string_view key, const nlohmann::json& header,
                                          const nlohmann::json& content);

StatusOr<KernelMessage> ParseMessage(std::string_view key, const std::vector<std::string_view>& frames,
                                     size_t max_content = 256u << 20);
// The same, asking `want_content(message with header/parent/metadata,
// content size)` whether to parse the content at all (false → as if too large).
StatusOr<KernelMessage> ParseMessage(std::string_view key, const std::vector<std::string_view>& frames,
                                     const std::function<bool(const KernelMessage&, size_t)>& want_content);

// A random 128-bit id in UUID v4 form (kernel keys, msg ids, context ids).
std::string NewUuid();

}  // namespace airlock::interpreter
