// libFuzzer target for the untrusted-byte parsers of airlock-interpreter:
// the POST /execute and POST /contexts bodies, kernels.json, and kernel
// messages (the input split into frames at NUL bytes; parsed without a key
// so the JSON paths run, and with one so the signature check does), each
// parsed message mapped to its NDJSON line as the server would.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "interpreter/kernel_spec.h"
#include "interpreter/output.h"
#include "interpreter/request.h"
#include "interpreter/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace airlock::interpreter;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  (void)ParseExecuteRequest(in);
  (void)ParseCreateContextRequest(in);
  (void)ParseKernelTable(in, "/k", "fuzz");
  (void)NormalizeLanguage(in);
  std::vector<std::string_view> frames;
  size_t b = 0;
  while (true) {
    size_t e = in.find('\0', b);
    frames.push_back(in.substr(b, e == std::string_view::npos ? std::string_view::npos : e - b));
    if (e == std::string_view::npos) break;
    b = e + 1;
  }
  for (std::string_view key : {std::string_view(), std::string_view("k")}) {
    auto m = ParseMessage(key, frames, 1u << 16);
    if (!m.ok()) continue;
    (void)m->msg_id();
    (void)m->parent_id();
    for (const char* type : {"stream", "execute_result", "display_data", "error", "execute_input", "status"})
      (void)LineForIopub(type, m->content);
    (void)LineForIopub(m->msg_type(), m->content);
    (void)ResultLine(m->content, true);
    (void)ErrorLineFromContent(m->content);
  }
  (void)TruncatedStreamLine("stdout", in, size / 2 + 40);
  (void)StripQuotes(in);
  return 0;
}
