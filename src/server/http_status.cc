#include "server/http_status.h"

namespace airlock::server {

int HttpStatusFor(const Status& st, HttpStatusContext context) {
  if (context == HttpStatusContext::kRequestBody) {
    // The client's side of the exchange: whatever went wrong, its request.
    switch (st.code()) {
      case StatusCode::kResourceExhausted:
        return 413;
      case StatusCode::kDeadlineExceeded:
        return 408;
      default:
        return 400;
    }
  }
  switch (st.code()) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kUnauthenticated:
      return 401;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
      return 409;
    case StatusCode::kResourceExhausted:
      return context == HttpStatusContext::kDisk ? 507 : 503;
    case StatusCode::kDeadlineExceeded:
      return 504;
    case StatusCode::kUnimplemented:
      return 501;
    case StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

}  // namespace airlock::server
