// Connect plumbing for the handlers: unary calls (JSON in, JSON or a JSON
// error with its HTTP status out) and server-streaming calls (one request
// envelope in; HTTP 200, envelopes, mandatory end-of-stream out; errors only
// inside the end-of-stream).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>

#include "envd/messages.h"
#include "http/conn.h"

namespace airlock::agent {

using UnaryFn = std::function<StatusOr<envd::OJson>(const envd::Json& request)>;
// Reads the body (bounded), parses it, calls fn, writes the reply.
void ServeUnary(std::shared_ptr<http::Conn> s, UnaryFn fn);
void RespondUnaryError(http::Conn& s, const Status& st);

// Reads the single request envelope of a server-streaming call. On error
// the stream has already been answered (200 + end-of-stream error) and
// done is not called.
void ReadStreamRequest(std::shared_ptr<http::Conn> s, std::function<void(const envd::Json&)> done);
// HTTP 200 application/connect+json header for a stream.
void BeginStream(http::Conn& s);
// A complete stream that only carries an error (or {} when OK).
void RespondStreamStatus(http::Conn& s, const Status& st);
bool IsStreamRequest(const http::Conn& s);

// Keepalive-Ping-Interval (seconds) of a stream, else envd's 90 s.
std::chrono::milliseconds KeepaliveInterval(const http::Conn& s);
// Connect-Timeout-Ms of a stream; nullopt when absent or not positive.
std::optional<std::chrono::milliseconds> ConnectTimeout(const http::Conn& s);

}  // namespace airlock::agent
