// Field readers shared by the request parsers (server/requests/*.h): each
// reads one field of a JSON body or one query parameter and answers
// InvalidArgument naming the field. An absent field and a JSON null are the
// same: "not given".
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/status.h"

namespace airlock::server::requests {

// A query parameter's decoded value (nullopt: not in the query), as
// HttpConn::Query answers it. Parsers of query strings take one of these so
// they run without a connection (unit tests, fuzzers).
using QueryFn = std::function<std::optional<std::string>(const std::string& name)>;

// `field`: {"k": "v", ...}; an error naming the field or the entry.
StatusOr<std::map<std::string, std::string>> StringMapField(const nlohmann::json& body, const char* field);
// `field`: a non-negative integer number of seconds.
StatusOr<std::optional<int64_t>> SecondsField(const nlohmann::json& body, const char* field);
// `field`: a boolean.
StatusOr<std::optional<bool>> BoolField(const nlohmann::json& body, const char* field);
// `field`: an integer 0..2^30 (cpuCount, memoryMB, diskSizeMB).
StatusOr<std::optional<int>> IntField(const nlohmann::json& body, const char* field);

// How an empty ?limit= is read: as absent (sandboxes, snapshots) or as a
// bad value (secrets).
enum class EmptyLimit { kDefault, kInvalid };
// ?limit=: a positive integer, capped at `max`; `max` when absent.
StatusOr<int> PageLimit(const std::optional<std::string>& value, int max, EmptyLimit empty = EmptyLimit::kDefault);

}  // namespace airlock::server::requests
