// libFuzzer target for the streaming multipart parser (envd/multipart.h:
// the agent's uploads, the audit tap), which sees upload bodies from the
// network. Input: first line = boundary, rest = body,
// fed in pieces whose sizes come from the first byte.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "envd/multipart.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace airlock;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t nl = in.find('\n');
  if (nl == std::string_view::npos) return 0;
  std::string boundary(in.substr(0, nl));
  std::string_view body = in.substr(nl + 1);
  size_t bytes = 0;
  envd::MultipartParser::Callbacks cb;
  cb.on_part_begin = [](const envd::PartHeaders&) { return OkStatus(); };
  cb.on_part_data = [&](std::string_view d) {
    bytes += d.size();
    return OkStatus();
  };
  cb.on_part_end = [] { return OkStatus(); };
  envd::MultipartParser parser(boundary, cb);
  size_t step = size ? (data[0] % 17) + 1 : 1;
  Status s;
  for (size_t i = 0; i < body.size() && s.ok(); i += step) s = parser.Feed(body.substr(i, step));
  if (s.ok()) (void)parser.Finish();
  if (bytes > body.size()) __builtin_trap();  // the parser never invents bytes
  return 0;
}
