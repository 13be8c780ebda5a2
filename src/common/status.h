// Errors as values. Every fallible function in airlock returns Status or
// StatusOr<T>; no exception crosses a module boundary (docs/errors.md).
//
// A Status carries a code (the same vocabulary as Connect/gRPC codes, so the
// agent can map it onto the wire 1:1) and a message that names the failing
// operation, e.g. "open /var/lib/airlock/x: No such file or directory".
#pragma once

#include <cerrno>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace airlock {

enum class StatusCode {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

// Connect/gRPC snake_case name of a code ("not_found").
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "not_found: open /x: No such file or directory"
  std::string ToString() const;
  // Returns a copy whose message is "context: message".
  Status WithContext(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
Status InvalidArgument(std::string message);
Status NotFound(std::string message);
Status AlreadyExists(std::string message);
Status FailedPrecondition(std::string message);
Status Internal(std::string message);
Status Unavailable(std::string message);
Status DeadlineExceeded(std::string message);
Status Unimplemented(std::string message);
Status PermissionDenied(std::string message);
Status ResourceExhausted(std::string message);
Status OutOfRange(std::string message);

// "what: strerror(err)", with the code derived from errno (ENOENT → not_found,
// EEXIST → already_exists, EACCES/EPERM → permission_denied, ENOSPC →
// resource_exhausted, EINVAL/ENOTDIR/EISDIR → invalid_argument, else internal).
Status ErrnoError(std::string_view what, int err = errno);

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  StatusOr(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(v_).ok()) v_ = Status(StatusCode::kInternal, "StatusOr built from OK status");
  }
  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace airlock

#define AIRLOCK_CONCAT_INNER(a, b) a##b
#define AIRLOCK_CONCAT(a, b) AIRLOCK_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                    \
  do {                                           \
    ::airlock::Status _st = (expr);              \
    if (!_st.ok()) return _st;                   \
  } while (0)

#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, expr) ASSIGN_OR_RETURN_IMPL(AIRLOCK_CONCAT(_sor_, __LINE__), lhs, expr)
