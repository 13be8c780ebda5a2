#include "server/requests/fields.h"

#include <algorithm>
#include <cstdlib>

namespace airlock::server::requests {

using nlohmann::json;

StatusOr<std::map<std::string, std::string>> StringMapField(const json& body, const char* field) {
  std::map<std::string, std::string> out;
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return out;
  if (!it->is_object()) return InvalidArgument(std::string(field) + " must be an object of strings");
  for (auto& [k, v] : it->items()) {
    if (!v.is_string()) return InvalidArgument(std::string(field) + "." + k + " must be a string");
    out[k] = v.get<std::string>();
  }
  return out;
}

StatusOr<std::optional<int64_t>> SecondsField(const json& body, const char* field) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return std::optional<int64_t>();
  if (!it->is_number_integer() && !it->is_number_unsigned()) {
    return InvalidArgument(std::string(field) + " must be an integer number of seconds");
  }
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    return InvalidArgument(std::string(field) + " is out of range");
  }
  int64_t v = it->get<int64_t>();
  if (v < 0) return InvalidArgument(std::string(field) + " must not be negative");
  return std::optional<int64_t>(v);
}

StatusOr<std::optional<bool>> BoolField(const json& body, const char* field) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return std::optional<bool>();
  if (!it->is_boolean()) return InvalidArgument(std::string(field) + " must be a boolean");
  return std::optional<bool>(it->get<bool>());
}

StatusOr<std::optional<int>> IntField(const json& body, const char* field) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return std::optional<int>();
  if (!it->is_number_integer() && !it->is_number_unsigned()) {
    return InvalidArgument(std::string(field) + " must be an integer");
  }
  if (it->is_number_unsigned() && it->get<uint64_t>() > (1u << 30)) {
    return InvalidArgument(std::string(field) + " is out of range");
  }
  int64_t v = it->get<int64_t>();
  if (v < 0 || v > (1 << 30)) return InvalidArgument(std::string(field) + " is out of range");
  return std::optional<int>(static_cast<int>(v));
}

}  // namespace airlock::server::requests
