#include "agent/file_metadata.h"

#include <sys/xattr.h>

#include <cerrno>
#include <cstring>

namespace airlock::agent {
namespace {

bool PrintableAscii(std::string_view s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

}  // namespace

Status ValidateMetadata(const Metadata& m) {
  if (m.size() > kMaxMetadataEntries) {
    return InvalidArgument("invalid metadata: " + std::to_string(m.size()) + " keys, at most " +
                           std::to_string(kMaxMetadataEntries) + " are allowed");
  }
  size_t total = 0;
  for (const auto& [k, v] : m) {
    if (k.empty()) return InvalidArgument("invalid metadata: a key is empty");
    if (k.size() > kMaxMetadataKeyBytes) {
      return InvalidArgument("invalid metadata: key of " + std::to_string(k.size()) + " bytes, at most " +
                             std::to_string(kMaxMetadataKeyBytes) + " are allowed");
    }
    if (!PrintableAscii(k)) return InvalidArgument("invalid metadata: key '" + k + "' is not printable ASCII");
    if (!PrintableAscii(v)) return InvalidArgument("invalid metadata: value of key '" + k + "' is not printable ASCII");
    total += kMetadataXattrPrefix.size() + k.size() + v.size();
  }
  if (total > kMaxMetadataTotalBytes) {
    return InvalidArgument("invalid metadata: " + std::to_string(total) + " bytes in all, at most " +
                           std::to_string(kMaxMetadataTotalBytes) + " are allowed");
  }
  return OkStatus();
}

StatusOr<Metadata> MetadataFromHeaders(const std::vector<std::pair<std::string, std::string>>& headers) {
  Metadata m;
  for (const auto& [name, value] : headers) {
    if (name.size() < kMetadataHeaderPrefix.size()) continue;
    if (Lower(std::string_view(name).substr(0, kMetadataHeaderPrefix.size())) != kMetadataHeaderPrefix) continue;
    std::string key = Lower(std::string_view(name).substr(kMetadataHeaderPrefix.size()));
    if (key.empty()) return InvalidArgument("invalid metadata: header '" + name + "' has no key");
    if (m.size() >= kMaxMetadataEntries) {
      return InvalidArgument("invalid metadata: more than " + std::to_string(kMaxMetadataEntries) + " keys");
    }
    if (!m.emplace(key, value).second) {
      return InvalidArgument("invalid metadata: key '" + key + "' is given more than once");
    }
  }
  RETURN_IF_ERROR(ValidateMetadata(m));
  return m;
}

Metadata ReadMetadata(const std::string& path) {
  Metadata m;
  std::vector<char> names(4096);
  ssize_t n = listxattr(path.c_str(), names.data(), names.size());
  if (n < 0 && errno == ERANGE) {
    ssize_t need = listxattr(path.c_str(), nullptr, 0);
    if (need <= 0 || static_cast<size_t>(need) > kMaxMetadataReadBytes) return m;
    names.resize(static_cast<size_t>(need));
    n = listxattr(path.c_str(), names.data(), names.size());
  }
  if (n <= 0) return m;
  size_t budget = kMaxMetadataReadBytes;
  std::vector<char> value(4096);
  for (size_t off = 0; off < static_cast<size_t>(n);) {
    std::string name(names.data() + off);
    off += name.size() + 1;
    if (name.rfind(kMetadataXattrPrefix, 0) != 0) continue;
    std::string key = name.substr(kMetadataXattrPrefix.size());
    if (key.empty() || !PrintableAscii(key)) continue;
    ssize_t v = getxattr(path.c_str(), name.c_str(), value.data(), value.size());
    if (v < 0 && errno == ERANGE) {
      ssize_t need = getxattr(path.c_str(), name.c_str(), nullptr, 0);
      if (need <= 0 || static_cast<size_t>(need) > budget) continue;
      value.resize(static_cast<size_t>(need));
      v = getxattr(path.c_str(), name.c_str(), value.data(), value.size());
    }
    if (v < 0) continue;
    std::string val(value.data(), static_cast<size_t>(v));
    if (!PrintableAscii(val) || val.size() + key.size() > budget) continue;
    budget -= val.size() + key.size();
    m.emplace(std::move(key), std::move(val));
  }
  return m;
}

Status WriteMetadata(int fd, const std::string& display_path, const Metadata& m) {
  for (const auto& [k, v] : m) {
    std::string name = std::string(kMetadataXattrPrefix) + k;
    if (fsetxattr(fd, name.c_str(), v.data(), v.size(), 0) == 0) continue;
    int err = errno;
    if (err == ENOTSUP || err == EOPNOTSUPP) {
      return FailedPrecondition("cannot store metadata on " + display_path +
                                ": its filesystem does not support user extended attributes (user.e2b.*); "
                                "write the file under the home directory instead");
    }
    if (err == ENOSPC || err == EDQUOT || err == E2BIG) {
      return ResourceExhausted("setxattr " + name + " on " + display_path + ": " + std::strerror(err));
    }
    return ErrnoError("setxattr " + name + " on " + display_path, err);
  }
  return OkStatus();
}

}  // namespace airlock::agent
