#include "secrets/redactor.h"

#include <algorithm>
#include <mutex>
#include <set>

#include "common/hex.h"

namespace airlock::secrets {
namespace {

constexpr char kStd[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
constexpr char kUrl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

// Base64 without padding, and the number of leading/trailing characters
// that depend only on `data`'s bits.
std::string B64(std::string_view data, const char* alphabet) {
  std::string out;
  size_t i = 0;
  for (; i + 2 < data.size(); i += 3) {
    uint32_t v = (uint8_t(data[i]) << 16) | (uint8_t(data[i + 1]) << 8) | uint8_t(data[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += alphabet[(v >> s) & 63];
  }
  size_t rest = data.size() - i;
  if (rest > 0) {
    uint32_t v = uint8_t(data[i]) << 16;
    if (rest == 2) v |= uint8_t(data[i + 1]) << 8;
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    if (rest == 2) out += alphabet[(v >> 6) & 63];
  }
  return out;
}

std::string PercentEncode(std::string_view s, bool lower, bool plus_for_space) {
  std::string out;
  for (unsigned char ch : s) {
    if (std::isalnum(ch) || ch == '-' || ch == '.' || ch == '_' || ch == '~') {
      out += static_cast<char>(ch);
    } else if (ch == ' ' && plus_for_space) {
      out += '+';
    } else {
      out += '%';
      AppendHexByte(out, ch, /*upper=*/!lower);
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> Redactor::Forms(const std::string& value) {
  std::set<std::string> forms;
  forms.insert(value);
  for (bool lower : {false, true}) {
    for (bool plus : {false, true}) forms.insert(PercentEncode(value, lower, plus));
  }
  for (const char* alphabet : {kStd, kUrl}) {
    for (size_t k = 0; k < 3; ++k) {
      std::string data(k, '\0');
      data += value;
      std::string enc = B64(data, alphabet);
      size_t first = (8 * k + 5) / 6;       // first character free of filler bits
      size_t last = (8 * data.size()) / 6;  // characters made only of data bits
      if (last > first && last - first >= 4) forms.insert(enc.substr(first, last - first));
    }
  }
  std::vector<std::string> out(forms.begin(), forms.end());
  return out;
}

Status Redactor::Add(const std::string& name, const std::string& value) {
  if (value.size() < kMinSecretBytes) {
    return InvalidArgument("secret " + name + " is shorter than " + std::to_string(kMinSecretBytes) + " bytes");
  }
  std::string repl = "[REDACTED:" + name + "]";
  std::unique_lock<std::shared_mutex> l(mu_);
  for (auto& f : Forms(value)) {
    bool dup = std::any_of(patterns_.begin(), patterns_.end(), [&](const Pattern& p) { return p.text == f; });
    if (!dup) patterns_.push_back({f, repl});
  }
  std::stable_sort(patterns_.begin(), patterns_.end(),
                   [](const Pattern& a, const Pattern& b) { return a.text.size() > b.text.size(); });
  return OkStatus();
}

bool Redactor::empty() const {
  std::shared_lock<std::shared_mutex> l(mu_);
  return patterns_.empty();
}

std::string Redactor::Redact(std::string_view text) const {
  std::string out(text);
  std::shared_lock<std::shared_mutex> l(mu_);
  for (const auto& p : patterns_) {
    size_t pos = 0;
    while ((pos = out.find(p.text, pos)) != std::string::npos) {
      out.replace(pos, p.text.size(), p.replacement);
      pos += p.replacement.size();
    }
  }
  return out;
}

void Redactor::RedactJson(nlohmann::json* j) const {
  if (empty()) return;
  if (j->is_string()) {
    *j = Redact(j->get_ref<const std::string&>());
  } else if (j->is_array()) {
    for (auto& e : *j) RedactJson(&e);
  } else if (j->is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (auto& [k, v] : j->items()) {
      nlohmann::json copy = v;
      RedactJson(&copy);
      out[Redact(k)] = std::move(copy);
    }
    *j = std::move(out);
  }
}

}  // namespace airlock::secrets
