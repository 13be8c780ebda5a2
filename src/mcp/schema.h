// A validator for the subset of JSON Schema (draft 2020-12) that the MCP
// tools' input schemas use (tools.cc), so each schema is written once: it is
// what tools/list shows a client and what tools/call checks.
//
// Keywords: type (object, string, integer, number, boolean, array),
// properties, required, additionalProperties (false or a schema), items,
// enum (strings), minimum / maximum (numbers), minLength / maxLength
// (strings, in bytes), maxItems. Anything else in a schema is ignored.
//
// Errors: InvalidArgument naming the offending place as a JSON path from
// the arguments' root ("arguments.timeout_seconds: must be an integer").
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"

namespace airlock::mcp {

Status ValidateAgainstSchema(const nlohmann::json& value, const nlohmann::json& schema,
                             const std::string& where = "arguments");

}  // namespace airlock::mcp
