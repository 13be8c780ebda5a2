#include "envd/envelope.h"

#include <nlohmann/json.hpp>

#include "envd/connect_error.h"

namespace airlock::envd {

void AppendEnvelope(std::string* out, std::string_view payload, uint8_t flags) {
  uint32_t n = static_cast<uint32_t>(payload.size());
  char hdr[5] = {static_cast<char>(flags), static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                 static_cast<char>(n >> 8), static_cast<char>(n)};
  out->append(hdr, 5);
  out->append(payload);
}

std::string EncodeEnvelope(std::string_view payload, uint8_t flags) {
  std::string out;
  out.reserve(payload.size() + kEnvelopeHeaderBytes);
  AppendEnvelope(&out, payload, flags);
  return out;
}

std::string EndStreamPayload(const Status& status) {
  if (status.ok()) return "{}";
  nlohmann::json j = {{"error", ErrorToJson(status)}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string EncodeEndStream(const Status& status) {
  return EncodeEnvelope(EndStreamPayload(status), kFlagEndStream);
}

Status ParseEndStream(std::string_view payload) {
  nlohmann::json j = nlohmann::json::parse(payload, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Internal("invalid end-of-stream payload: not a JSON object");
  }
  auto it = j.find("error");
  if (it == j.end() || it->is_null()) return OkStatus();
  if (!it->is_object()) return Internal("invalid end-of-stream payload: error is not an object");
  Status st = ErrorFromJson(*it);
  if (st.ok()) return Status(StatusCode::kUnknown, "end-of-stream error without a code");
  return st;
}

Status EnvelopeDecoder::Feed(std::string_view bytes) {
  if (!error_.ok()) return error_;
  buf_.append(bytes);
  size_t pos = 0;
  while (buf_.size() - pos >= kEnvelopeHeaderBytes) {
    auto b = [&](size_t i) { return static_cast<uint8_t>(buf_[pos + i]); };
    uint8_t flags = b(0);
    uint32_t len = (uint32_t{b(1)} << 24) | (uint32_t{b(2)} << 16) | (uint32_t{b(3)} << 8) | b(4);
    if (flags & kFlagCompressed) {
      error_ = InvalidArgument("envelope: compressed frames are not supported");
    } else if (flags & ~(kFlagCompressed | kFlagEndStream)) {
      error_ = InvalidArgument("envelope: unknown flags 0x" + std::to_string(flags));
    } else if (len > max_) {
      error_ = ResourceExhausted("envelope: message of " + std::to_string(len) +
                                 " bytes exceeds the limit of " + std::to_string(max_));
    }
    if (!error_.ok()) {
      buf_.clear();
      return error_;
    }
    if (buf_.size() - pos - kEnvelopeHeaderBytes < len) break;
    ready_.push_back(Envelope{flags, buf_.substr(pos + kEnvelopeHeaderBytes, len)});
    pos += kEnvelopeHeaderBytes + len;
  }
  buf_.erase(0, pos);
  return OkStatus();
}

std::optional<Envelope> EnvelopeDecoder::Next() {
  if (ready_.empty()) return std::nullopt;
  Envelope e = std::move(ready_.front());
  ready_.pop_front();
  return e;
}

}  // namespace airlock::envd
