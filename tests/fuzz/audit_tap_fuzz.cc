// libFuzzer target for the audit's data-plane tap, which parses bytes from
// API clients (Start requests, uploads) and from guests (the agent's chunked
// Connect stream, the code interpreter's NDJSON stream). Input: byte 0 picks
// the exchange (exec / multipart write / raw write / read / interpreter
// /execute on port 49999) and whether the response is chunked, byte 1 the piece
// size; the rest is split at the first "\n--\n" into request body and
// response bytes. Checks: exactly one record (two for exec with a start),
// always a JSON object with an action, never a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "audit/data_plane_tap.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace airlock;
  if (size < 2) return 0;
  std::string_view in(reinterpret_cast<const char*>(data) + 2, size - 2);
  size_t sep = in.find("\n--\n");
  std::string_view req = sep == std::string_view::npos ? in : in.substr(0, sep);
  std::string_view resp = sep == std::string_view::npos ? std::string_view() : in.substr(sep + 4);
  static const char* kPaths[] = {"/process.Process/Start", "/files", "/files", "/files", "/execute"};
  static const char* kMethods[] = {"POST", "POST", "POST", "GET", "POST"};
  int kind = (data[0] & 3) + ((data[0] & 8) && (data[0] & 3) == 0 ? 4 : 0);
  audit::TapRequest tr{"sb",
                       "",
                       kMethods[kind],
                       kPaths[kind],
                       {{"path", "/x"}},
                       "Basic dXNlcjo=",
                       kind == 1 ? "multipart/form-data; boundary=XyZ" : "application/octet-stream",
                       static_cast<uint16_t>(kind == 4 ? 49999 : 49983)};
  int records = 0;
  auto tap = audit::DataPlaneTap::Create(tr, [&](const nlohmann::json& r) {
    if (!r.is_object() || !r.contains("action")) __builtin_trap();
    ++records;
  });
  if (!tap) __builtin_trap();
  size_t step = (data[1] % 23) + 1;
  for (size_t i = 0; i < req.size(); i += step) tap->OnRequestBody(req.substr(i, step));
  tap->OnResponseHead(200, (data[0] & 4) != 0);
  for (size_t i = 0; i < resp.size(); i += step) tap->OnResponseBytes(resp.substr(i, step));
  tap->Finish();
  tap.reset();
  if (records < 1 || records > 2) __builtin_trap();
  return 0;
}
