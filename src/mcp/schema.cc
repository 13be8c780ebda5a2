#include "mcp/schema.h"

#include <cmath>

namespace airlock::mcp {

using nlohmann::json;

namespace {

bool HasType(const json& v, const std::string& type) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "boolean") return v.is_boolean();
  if (type == "number") return v.is_number();
  if (type == "integer") {
    if (v.is_number_integer()) return true;
    if (!v.is_number_float()) return false;
    double d = v.get<double>();
    return std::isfinite(d) && std::floor(d) == d;
  }
  if (type == "null") return v.is_null();
  return false;
}

std::string Article(const std::string& type) {
  return (type == "object" || type == "array" || type == "integer") ? "an " + type : "a " + type;
}

}  // namespace

Status ValidateAgainstSchema(const json& v, const json& schema, const std::string& where) {
  if (!schema.is_object()) return OkStatus();
  if (auto t = schema.find("type"); t != schema.end() && t->is_string()) {
    if (!HasType(v, t->get<std::string>())) return InvalidArgument(where + ": must be " + Article(*t));
  }
  if (auto e = schema.find("enum"); e != schema.end() && e->is_array()) {
    bool found = false;
    for (const auto& option : *e) found = found || option == v;
    if (!found) {
      std::string options;
      for (const auto& option : *e) options += (options.empty() ? "" : ", ") + option.dump();
      return InvalidArgument(where + ": must be one of " + options);
    }
  }
  if (v.is_number()) {
    double d = v.get<double>();
    if (auto m = schema.find("minimum"); m != schema.end() && m->is_number() && d < m->get<double>())
      return InvalidArgument(where + ": must be at least " + m->dump());
    if (auto m = schema.find("maximum"); m != schema.end() && m->is_number() && d > m->get<double>())
      return InvalidArgument(where + ": must be at most " + m->dump());
  }
  if (v.is_string()) {
    size_t n = v.get_ref<const std::string&>().size();
    if (auto m = schema.find("minLength"); m != schema.end() && m->is_number_integer() && static_cast<int64_t>(n) < m->get<int64_t>())
      return InvalidArgument(where + ": must be at least " + m->dump() + " bytes long");
    if (auto m = schema.find("maxLength"); m != schema.end() && m->is_number_integer() && static_cast<int64_t>(n) > m->get<int64_t>())
      return InvalidArgument(where + ": must be at most " + m->dump() + " bytes long");
  }
  if (v.is_array()) {
    if (auto m = schema.find("maxItems"); m != schema.end() && m->is_number_integer() && static_cast<int64_t>(v.size()) > m->get<int64_t>())
      return InvalidArgument(where + ": must have at most " + m->dump() + " items");
    if (auto items = schema.find("items"); items != schema.end()) {
      for (size_t i = 0; i < v.size(); ++i) {
        if (Status st = ValidateAgainstSchema(v[i], *items, where + "[" + std::to_string(i) + "]"); !st.ok()) return st;
      }
    }
  }
  if (v.is_object()) {
    const json empty = json::object();
    auto p = schema.find("properties");
    const json& props = p != schema.end() && p->is_object() ? *p : empty;
    if (auto r = schema.find("required"); r != schema.end() && r->is_array()) {
      for (const auto& name : *r) {
        if (name.is_string() && !v.contains(name.get<std::string>()))
          return InvalidArgument(where + "." + name.get<std::string>() + ": is required");
      }
    }
    auto extra = schema.find("additionalProperties");
    for (const auto& [key, value] : v.items()) {
      if (auto ps = props.find(key); ps != props.end()) {
        if (Status st = ValidateAgainstSchema(value, *ps, where + "." + key); !st.ok()) return st;
      } else if (extra != schema.end()) {
        if (extra->is_boolean() && !extra->get<bool>()) {
          std::string known;
          for (const auto& [name, _] : props.items()) known += (known.empty() ? "" : ", ") + name;
          return InvalidArgument(where + "." + key + ": unknown property (known: " + known + ")");
        }
        if (Status st = ValidateAgainstSchema(value, *extra, where + "." + key); !st.ok()) return st;
      }
    }
  }
  return OkStatus();
}

}  // namespace airlock::mcp
