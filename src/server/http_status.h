// The one Status → HTTP status mapping of the daemon's API (control plane,
// secrets API). Every handler that answers an error from a Status uses it;
// literal codes remain only where a handler decides the answer itself (a
// route that does not exist, a wrong method, a failed check of its own).
//
//   StatusCode            HTTP  why
//   kInvalidArgument      400   a request field is wrong (the message names it)
//   kUnauthenticated      401   missing or invalid X-API-Key
//   kPermissionDenied     403   the caller's team may not do this (a secret)
//   kNotFound             404   E2B's SDK reads body.code == 404 (spec §1.4)
//   kAlreadyExists        409   a name taken; the sandbox is already paused
//   kFailedPrecondition   409   the sandbox's state forbids it (pausing,
//                               resuming, killing; a snapshot in use)
//   kResourceExhausted    503   a host pool is full (addresses, VMM uids):
//                               E2B's ServiceBusyError
//                         507   with HttpStatusContext::kDisk: the disk is
//                               full (pause, fork, named snapshot, the create
//                               disk admission; spec §4: NotEnoughSpace)
//   kDeadlineExceeded     504   a guest or helper did not answer in time
//   kUnimplemented        501
//   kUnavailable          503   a sandbox's agent did not answer (metrics)
//   anything else         500
//
// Reading a request body (HttpStatusContext::kRequestBody) is the client's
// side of the exchange: kResourceExhausted 413 (larger than allowed),
// kDeadlineExceeded 408 (not sent in time), anything else 400.
#pragma once

#include "common/status.h"

namespace airlock::server {

// What the failed operation was, where the answer depends on it (the table
// above): kDisk for the routes that write snapshots (pause, fork, named
// snapshot) and the disk admission of a create; kRequestBody for reading a
// request body; kDefault everywhere else (create, resume, network, secrets).
enum class HttpStatusContext {
  kDefault,
  kDisk,         // the operation writes snapshots or overlays
  kRequestBody,  // reading the request's body
};

// The HTTP status for a non-OK `st` (200 for OK, which callers never send).
int HttpStatusFor(const Status& st, HttpStatusContext context = HttpStatusContext::kDefault);

}  // namespace airlock::server
