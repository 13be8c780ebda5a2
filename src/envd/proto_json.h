// proto3 canonical-JSON helpers (spec §3.1 "JSON mapping rules").
// All parsers take untrusted input and return errors, never throw.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace airlock::envd {

// Standard alphabet, with padding.
std::string Base64Encode(std::string_view data);
// Accepts the standard and the URL-safe alphabet, with or without padding.
// invalid_argument on any other character or an impossible length.
StatusOr<std::string> Base64Decode(std::string_view text);

// int64/uint64 fields: emitted as JSON strings ("11"); parsed from a
// string or a JSON integer (or an integral float).
nlohmann::json Int64ToJson(int64_t v);
StatusOr<int64_t> Int64FromJson(const nlohmann::json& j);
StatusOr<uint64_t> Uint64FromJson(const nlohmann::json& j);
// uint32/int32 fields: JSON numbers, strings accepted too.
StatusOr<uint32_t> Uint32FromJson(const nlohmann::json& j);
StatusOr<int32_t> Int32FromJson(const nlohmann::json& j);

// google.protobuf.Timestamp ↔ RFC 3339 UTC. Output uses 0, 3, 6 or 9
// fractional digits like protobuf ("2026-01-02T03:04:05.500Z"). Input
// accepts any 0–9 digit fraction and a "Z" or ±hh:mm offset.
struct Timestamp {
  int64_t seconds = 0;
  int32_t nanos = 0;  // 0..999'999'999
  bool operator==(const Timestamp&) const = default;
};
std::string FormatTimestamp(Timestamp ts);
StatusOr<Timestamp> ParseTimestamp(std::string_view text);

// Enums: emitted as names; parsed from a name or a number.
enum class FileType { kUnspecified = 0, kFile = 1, kDirectory = 2, kSymlink = 3 };
enum class EventType { kUnspecified = 0, kCreate = 1, kWrite = 2, kRemove = 3, kRename = 4, kChmod = 5 };
enum class Signal { kUnspecified = 0, kSigterm = 15, kSigkill = 9 };

std::string_view FileTypeName(FileType t);
std::string_view EventTypeName(EventType t);
std::string_view SignalName(Signal s);
StatusOr<FileType> FileTypeFromJson(const nlohmann::json& j);
StatusOr<EventType> EventTypeFromJson(const nlohmann::json& j);
// Unknown numbers are kept (proto3 open enums); unknown names → error.
StatusOr<Signal> SignalFromJson(const nlohmann::json& j);

}  // namespace airlock::envd
