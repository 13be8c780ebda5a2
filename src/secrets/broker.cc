#include "secrets/broker.h"

#include <sys/random.h>

#include <algorithm>
#include <cctype>
#include <mutex>

#include <nlohmann/json.hpp>

#include "common/hex.h"
#include "secrets/redactor.h"

namespace airlock::secrets {
namespace {

std::string Lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string StripPort(std::string host) {
  if (!host.empty() && host.front() == '[') return host.substr(0, host.find(']') + 1);
  size_t colon = host.rfind(':');
  if (colon != std::string::npos && host.find(':') == colon) host.resize(colon);
  if (!host.empty() && host.back() == '.') host.pop_back();
  return host;
}

}  // namespace

bool Broker::HostMatches(const std::string& pattern, const std::string& host) {
  std::string p = Lower(pattern), h = Lower(StripPort(host));
  if (p.rfind("*.", 0) == 0) {
    std::string suffix = p.substr(1);  // ".example.com"
    return h.size() > suffix.size() && h.compare(h.size() - suffix.size(), suffix.size(), suffix) == 0;
  }
  return !p.empty() && p == h;
}

std::string Broker::NewPlaceholder() {
  unsigned char b[16];
  size_t got = 0;
  while (got < sizeof b) {
    ssize_t n = ::getrandom(b + got, sizeof b - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  return "AIRLOCK_BROKERED_" + HexEncode(b, sizeof b);
}

void Broker::Register(const std::string& sandbox, std::vector<BrokeredSecret> secrets) {
  std::unique_lock<std::shared_mutex> l(mu_);
  if (secrets.empty())
    by_sandbox_.erase(sandbox);
  else
    by_sandbox_[sandbox] = std::move(secrets);
}

void Broker::Forget(const std::string& sandbox) {
  std::unique_lock<std::shared_mutex> l(mu_);
  by_sandbox_.erase(sandbox);
  cas_.erase(sandbox);
}

void Broker::SetCa(const std::string& sandbox, std::shared_ptr<SandboxCa> ca) {
  std::unique_lock<std::shared_mutex> l(mu_);
  if (ca)
    cas_[sandbox] = std::move(ca);
  else
    cas_.erase(sandbox);
}

std::shared_ptr<SandboxCa> Broker::CaFor(const std::string& sandbox) const {
  std::shared_lock<std::shared_mutex> l(mu_);
  auto it = cas_.find(sandbox);
  return it == cas_.end() ? nullptr : it->second;
}

size_t Broker::size(const std::string& sandbox) const {
  std::shared_lock<std::shared_mutex> l(mu_);
  auto it = by_sandbox_.find(sandbox);
  return it == by_sandbox_.end() ? 0 : it->second.size();
}

std::vector<std::string> Broker::ValueForms(const std::string& sandbox) const {
  std::vector<std::string> values;
  {
    std::shared_lock<std::shared_mutex> l(mu_);
    auto it = by_sandbox_.find(sandbox);
    if (it == by_sandbox_.end()) return {};
    for (const auto& s : it->second) values.push_back(s.value);
  }
  std::vector<std::string> forms;
  for (const auto& v : values) {
    for (auto& f : Redactor::Forms(v)) forms.push_back(std::move(f));
    // Inside a JSON string (an echo service's answer): quotes, backslashes
    // and control bytes escaped, and '/' as "\/" as some encoders write it.
    std::string quoted = nlohmann::json(v).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    std::string escaped = quoted.substr(1, quoted.size() - 2);
    if (escaped != v) forms.push_back(escaped);
    std::string slashed;
    for (char c : escaped) {
      if (c == '/') slashed += '\\';
      slashed += c;
    }
    if (slashed != escaped) forms.push_back(slashed);
  }
  return forms;
}

bool Broker::Intercepts(const std::string& sandbox, const std::string& host) const {
  std::shared_lock<std::shared_mutex> l(mu_);
  auto it = by_sandbox_.find(sandbox);
  if (it == by_sandbox_.end()) return false;
  for (const auto& s : it->second) {
    for (const auto& p : s.hosts) {
      if (HostMatches(p, host)) return true;
    }
  }
  return false;
}

std::vector<std::string> Broker::SubstituteHeaders(const std::string& sandbox, const std::string& host,
                                                   std::vector<std::pair<std::string, std::string>>* headers) const {
  std::vector<std::string> used;
  std::shared_lock<std::shared_mutex> l(mu_);
  auto it = by_sandbox_.find(sandbox);
  if (it == by_sandbox_.end()) return used;
  for (const auto& s : it->second) {
    bool allowed =
        std::any_of(s.hosts.begin(), s.hosts.end(), [&](const std::string& p) { return HostMatches(p, host); });
    if (!allowed) continue;
    bool hit = false;
    for (auto& [name, value] : *headers) {
      size_t pos = 0;
      while ((pos = value.find(s.placeholder, pos)) != std::string::npos) {
        value.replace(pos, s.placeholder.size(), s.value);
        pos += s.value.size();
        hit = true;
      }
    }
    if (hit) used.push_back(s.name);
  }
  return used;
}

}  // namespace airlock::secrets
