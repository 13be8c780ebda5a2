#include "envd/multipart.h"

#include <algorithm>
#include <cctype>

namespace airlock::envd {
namespace {

constexpr size_t kMaxHeaderBytes = 16 * 1024;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Parses `a; k1=v1; k2="v 2"` parameters (after the first token) into
// (lowercased key, value) pairs; quoted values keep their bytes verbatim
// except for backslash escapes.
std::vector<std::pair<std::string, std::string>> ParseParams(std::string_view s) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t i = s.find(';');
  while (i != std::string_view::npos && i < s.size()) {
    ++i;
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    size_t eq = s.find('=', i);
    size_t semi = s.find(';', i);
    if (eq == std::string_view::npos || (semi != std::string_view::npos && semi < eq)) {
      i = semi;
      continue;
    }
    std::string key = Lower(Trim(s.substr(i, eq - i)));
    size_t v = eq + 1;
    while (v < s.size() && (s[v] == ' ' || s[v] == '\t')) ++v;
    std::string value;
    if (v < s.size() && s[v] == '"') {
      ++v;
      while (v < s.size() && s[v] != '"') {
        if (s[v] == '\\' && v + 1 < s.size()) ++v;
        value.push_back(s[v++]);
      }
      i = s.find(';', v);
    } else {
      size_t end = s.find(';', v);
      value = std::string(Trim(s.substr(v, end == std::string_view::npos ? s.size() - v : end - v)));
      i = end;
    }
    out.emplace_back(std::move(key), std::move(value));
  }
  return out;
}

int Hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// RFC 5987: charset'lang'percent-encoded
std::optional<std::string> DecodeExtValue(std::string_view v) {
  size_t q1 = v.find('\'');
  if (q1 == std::string_view::npos) return std::nullopt;
  size_t q2 = v.find('\'', q1 + 1);
  if (q2 == std::string_view::npos) return std::nullopt;
  std::string out;
  for (size_t i = q2 + 1; i < v.size(); ++i) {
    if (v[i] == '%' && i + 2 < v.size() + 0 && Hex(v[i + 1]) >= 0 && Hex(v[i + 2]) >= 0) {
      out.push_back(static_cast<char>(Hex(v[i + 1]) * 16 + Hex(v[i + 2])));
      i += 2;
    } else {
      out.push_back(v[i]);
    }
  }
  return out;
}

}  // namespace

StatusOr<std::string> MultipartBoundary(std::string_view content_type) {
  if (Lower(Trim(content_type.substr(0, content_type.find(';')))) != "multipart/form-data") {
    return InvalidArgument("content type is not multipart/form-data");
  }
  for (auto& [k, v] : ParseParams(content_type)) {
    if (k == "boundary") {
      if (v.empty() || v.size() > 70) return InvalidArgument("invalid multipart boundary");
      return v;
    }
  }
  return InvalidArgument("multipart content type without a boundary");
}

MultipartParser::MultipartParser(std::string boundary, Callbacks cb)
    : delim_("\r\n--" + boundary), cb_(std::move(cb)) {
  // The first boundary may start the body without a preceding CRLF.
  buf_ = "\r\n";
}

Status MultipartParser::Feed(std::string_view data) {
  if (!error_.ok()) return error_;
  if (state_ == State::kEpilogue) return OkStatus();
  buf_.append(data);
  Status st = Step();
  if (!st.ok()) error_ = st;
  return st;
}

Status MultipartParser::Finish() {
  if (!error_.ok()) return error_;
  if (state_ != State::kEpilogue) {
    error_ = InvalidArgument("multipart body ended before the closing boundary");
  }
  return error_;
}

Status MultipartParser::Step() {
  while (true) {
    switch (state_) {
      case State::kPreamble: {
        size_t p = buf_.find(delim_);
        if (p == std::string::npos) {
          // Keep only what could be the start of a delimiter.
          if (buf_.size() > delim_.size()) buf_.erase(0, buf_.size() - delim_.size());
          return OkStatus();
        }
        buf_.erase(0, p + delim_.size());
        state_ = State::kAfterBoundary;
        break;
      }
      case State::kAfterBoundary: {
        // "--" ends the body; otherwise optional whitespace then CRLF.
        if (buf_.size() < 2) return OkStatus();
        if (buf_[0] == '-' && buf_[1] == '-') {
          state_ = State::kEpilogue;
          buf_.clear();
          return OkStatus();
        }
        size_t p = buf_.find("\r\n");
        if (p == std::string::npos) {
          if (buf_.size() > 256) return InvalidArgument("multipart: garbage after boundary");
          return OkStatus();
        }
        for (size_t i = 0; i < p; ++i) {
          if (buf_[i] != ' ' && buf_[i] != '\t') return InvalidArgument("multipart: garbage after boundary");
        }
        buf_.erase(0, p + 2);
        state_ = State::kHeaders;
        break;
      }
      case State::kHeaders: {
        if (buf_.size() < 2) return OkStatus();
        if (buf_[0] == '\r' && buf_[1] == '\n') {  // a part without headers
          RETURN_IF_ERROR(ParseHeaders(""));
          buf_.erase(0, 2);
        } else {
          size_t p = buf_.find("\r\n\r\n");
          if (p == std::string::npos) {
            if (buf_.size() > kMaxHeaderBytes) return InvalidArgument("multipart: part headers too large");
            return OkStatus();
          }
          if (p > kMaxHeaderBytes) return InvalidArgument("multipart: part headers too large");
          RETURN_IF_ERROR(ParseHeaders(std::string_view(buf_).substr(0, p)));
          buf_.erase(0, p + 4);
        }
        state_ = State::kBody;
        break;
      }
      case State::kBody: {
        size_t p = buf_.find(delim_);
        if (p == std::string::npos) {
          // Everything except a possible delimiter prefix at the end is data.
          size_t keep = std::min(buf_.size(), delim_.size() - 1);
          size_t emit = buf_.size() - keep;
          if (emit > 0) {
            if (cb_.on_part_data) RETURN_IF_ERROR(cb_.on_part_data(std::string_view(buf_).substr(0, emit)));
            buf_.erase(0, emit);
          }
          return OkStatus();
        }
        if (p > 0 && cb_.on_part_data) RETURN_IF_ERROR(cb_.on_part_data(std::string_view(buf_).substr(0, p)));
        if (cb_.on_part_end) RETURN_IF_ERROR(cb_.on_part_end());
        buf_.erase(0, p + delim_.size());
        state_ = State::kAfterBoundary;
        break;
      }
      case State::kEpilogue:
        buf_.clear();
        return OkStatus();
    }
  }
}

Status MultipartParser::ParseHeaders(std::string_view block) {
  PartHeaders h;
  bool have_disposition = false;
  size_t i = 0;
  while (i <= block.size()) {
    size_t e = block.find("\r\n", i);
    if (e == std::string_view::npos) e = block.size();
    std::string_view line = block.substr(i, e - i);
    i = e + 2;
    if (line.empty()) continue;
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) return InvalidArgument("multipart: malformed part header");
    std::string name = Lower(Trim(line.substr(0, colon)));
    std::string_view value = Trim(line.substr(colon + 1));
    if (name == "content-disposition") {
      have_disposition = true;
      std::optional<std::string> ext;
      for (auto& [k, v] : ParseParams(value)) {
        if (k == "name") h.name = v;
        else if (k == "filename") h.filename = v;
        else if (k == "filename*") ext = DecodeExtValue(v);
      }
      if (ext) h.filename = std::move(ext);
    } else if (name == "content-type") {
      h.content_type = std::string(value);
    }
  }
  if (!have_disposition) return InvalidArgument("multipart: part without Content-Disposition");
  if (cb_.on_part_begin) return cb_.on_part_begin(h);
  return OkStatus();
}

}  // namespace airlock::envd
