// Field readers shared by the request parsers (server/requests/*.h): each
// reads one field of a JSON body and answers InvalidArgument naming the
// field (the list routes' query strings: gateway/list_query.h). An absent field and a JSON null are the
// same: "not given".
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/status.h"

namespace airlock::server::requests {


// `field`: {"k": "v", ...}; an error naming the field or the entry.
StatusOr<std::map<std::string, std::string>> StringMapField(const nlohmann::json& body, const char* field);
// `field`: a non-negative integer number of seconds.
StatusOr<std::optional<int64_t>> SecondsField(const nlohmann::json& body, const char* field);
// `field`: a boolean.
StatusOr<std::optional<bool>> BoolField(const nlohmann::json& body, const char* field);
// `field`: an integer 0..2^30 (cpuCount, memoryMB, diskSizeMB).
StatusOr<std::optional<int>> IntField(const nlohmann::json& body, const char* field);

}  // namespace airlock::server::requests
