// Connect error mapping (spec §3.1): code strings, HTTP status per
// codeToHttpStatus, and the JSON error body of unary calls
// `{"code":"not_found","message":"..."}`.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace airlock::envd {

// "not_found" → kNotFound; nullopt for an unknown string. "cancelled" is
// accepted as an alias of "canceled".
std::optional<StatusCode> StatusCodeFromName(std::string_view name);

// Connect's codeToHttpStatus (canceled 499, invalid_argument 400, ...).
int HttpStatusForCode(StatusCode code);
// Connect's reverse mapping used when an error body is not JSON
// (400 → internal, 401 → unauthenticated, 404 → unimplemented, ...).
StatusCode CodeForHttpStatus(int http_status);

// {"code":"<name>","message":"<msg>"} (message omitted when empty).
nlohmann::json ErrorToJson(const Status& status);
std::string ErrorJsonBody(const Status& status);

// Reads {"code","message"}; unknown or missing code → kUnknown.
Status ErrorFromJson(const nlohmann::json& j);
// Unary error response → Status: JSON body when parseable, else a code
// derived from the HTTP status and the raw body as the message.
Status StatusFromErrorResponse(int http_status, std::string_view body);

}  // namespace airlock::envd
