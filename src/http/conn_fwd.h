// Forward declaration of http::Conn for headers that only pass it around.
#pragma once

namespace airlock::http {
class Conn;
}  // namespace airlock::http
