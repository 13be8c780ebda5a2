#include "envd/connect_error.h"

#include <array>

namespace airlock::envd {

std::optional<StatusCode> StatusCodeFromName(std::string_view name) {
  if (name == "cancelled") return StatusCode::kCancelled;
  for (int i = 1; i <= 16; ++i) {
    auto c = static_cast<StatusCode>(i);
    if (StatusCodeName(c) == name) return c;
  }
  return std::nullopt;
}

int HttpStatusForCode(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return 200;
    case StatusCode::kCancelled: return 499;
    case StatusCode::kUnknown: return 500;
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kDeadlineExceeded: return 504;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kAlreadyExists: return 409;
    case StatusCode::kPermissionDenied: return 403;
    case StatusCode::kResourceExhausted: return 429;
    case StatusCode::kFailedPrecondition: return 400;
    case StatusCode::kAborted: return 409;
    case StatusCode::kOutOfRange: return 400;
    case StatusCode::kUnimplemented: return 501;
    case StatusCode::kInternal: return 500;
    case StatusCode::kUnavailable: return 503;
    case StatusCode::kDataLoss: return 500;
    case StatusCode::kUnauthenticated: return 401;
  }
  return 500;
}

StatusCode CodeForHttpStatus(int s) {
  switch (s) {
    case 400: return StatusCode::kInternal;
    case 401: return StatusCode::kUnauthenticated;
    case 403: return StatusCode::kPermissionDenied;
    case 404: return StatusCode::kUnimplemented;
    case 429: return StatusCode::kUnavailable;
    case 502: case 503: case 504: return StatusCode::kUnavailable;
    default: return StatusCode::kUnknown;
  }
}

nlohmann::json ErrorToJson(const Status& status) {
  nlohmann::json j = {{"code", std::string(StatusCodeName(status.code()))}};
  if (!status.message().empty()) j["message"] = status.message();
  return j;
}

std::string ErrorJsonBody(const Status& status) {
  return ErrorToJson(status).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Status ErrorFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return Status(StatusCode::kUnknown, "error is not a JSON object");
  StatusCode code = StatusCode::kUnknown;
  std::string message;
  if (auto it = j.find("code"); it != j.end() && it->is_string()) {
    code = StatusCodeFromName(it->get<std::string>()).value_or(StatusCode::kUnknown);
  }
  if (auto it = j.find("message"); it != j.end() && it->is_string()) message = it->get<std::string>();
  return Status(code, std::move(message));
}

Status StatusFromErrorResponse(int http_status, std::string_view body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_discarded() && j.is_object() && j.contains("code") && j["code"].is_string()) {
    return ErrorFromJson(j);
  }
  return Status(CodeForHttpStatus(http_status),
                "HTTP " + std::to_string(http_status) + (body.empty() ? "" : ": " + std::string(body)));
}

}  // namespace airlock::envd
