// Streaming multipart/form-data parser (RFC 7578) for POST /files.
// Feed() takes the body in arbitrary pieces; part data is passed on as it
// arrives (at most ~boundary length is held back), so uploads never sit in
// memory. The raw `filename` parameter is kept verbatim, directories and
// all (spec §4.1). Limits: part headers 16 KiB, boundary 70 bytes.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace airlock::envd {

struct PartHeaders {
  std::string name;                 // Content-Disposition name
  std::optional<std::string> filename;  // raw; filename* (RFC 5987) decoded
  std::string content_type;
};

// Extracts the boundary from a Content-Type value
// ("multipart/form-data; boundary=xyz"); invalid_argument if absent.
StatusOr<std::string> MultipartBoundary(std::string_view content_type);

class MultipartParser {
 public:
  struct Callbacks {
    std::function<Status(const PartHeaders&)> on_part_begin;
    std::function<Status(std::string_view)> on_part_data;
    std::function<Status()> on_part_end;
  };
  MultipartParser(std::string boundary, Callbacks cb);

  // invalid_argument on malformed input; callback errors are passed
  // through. After an error the parser stays failed.
  Status Feed(std::string_view data);
  // Call at end of body: invalid_argument unless the closing boundary
  // was seen.
  Status Finish();

 private:
  enum class State { kPreamble, kAfterBoundary, kHeaders, kBody, kEpilogue };
  Status Step();
  Status ParseHeaders(std::string_view block);

  std::string delim_;  // "\r\n--" + boundary
  Callbacks cb_;
  State state_ = State::kPreamble;
  std::string buf_;
  Status error_;
};

}  // namespace airlock::envd
