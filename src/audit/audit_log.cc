#include "audit/audit_log.h"

#include <dirent.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <deque>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "common/clock.h"
#include "common/file_util.h"
#include "common/hex.h"
#include "common/log.h"
#include "envd/proto_json.h"
#include "secrets/redactor.h"

namespace airlock::audit {

using nlohmann::json;

namespace {

const std::string kZeroHash(64, '0');
constexpr size_t kHeadBytes = 20 + 1 + 64 + 1;

std::string DayOf(int64_t ms) { return FormatRfc3339Ms(ms).substr(0, 10); }

bool IsDayFile(const std::string& name) {
  return name.size() == 16 && name.compare(10, 6, ".jsonl") == 0 && name[4] == '-' && name[7] == '-';
}

StatusOr<std::vector<std::string>> DayFiles(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return ErrnoError("opendir " + dir);
  std::vector<std::string> out;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (IsDayFile(n)) out.push_back(n);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

StatusOr<std::string> ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return ErrnoError("open " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

std::string Sha256Hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), md, &n, EVP_sha256(), nullptr);
  return HexEncode(md, n);
}

std::string StringField(const json& j, const char* key, const std::string& fallback) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

std::string Canonical(const json& record) { return record.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string RecordHash(const json& record_without_hash) { return Sha256Hex(Canonical(record_without_hash)); }

namespace {
// 8 hex characters from getrandom(2): which AuditLog::Open wrote a record.
std::string RandomWriterId() {
  unsigned char b[4] = {0, 0, 0, 0};
  (void)!::getrandom(b, sizeof b, 0);
  return HexEncode(b, sizeof b);
}
}  // namespace

StatusOr<std::unique_ptr<AuditLog>> AuditLog::Open(std::string dir, std::shared_ptr<const secrets::Redactor> redactor) {
  std::unique_ptr<AuditLog> log(new AuditLog());
  log->dir_ = dir;
  log->redactor_ = std::move(redactor);
  log->prev_ = kZeroHash;
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoError("mkdir " + dir);
  // One writer per trail: a second would interleave seq numbers for good.
  ASSIGN_OR_RETURN(log->lock_, StateLock::Acquire(dir + "/LOCK", StateLock::Mode::kExclusive, "audit trail"));
  log->writer_ = RandomWriterId();
  ASSIGN_OR_RETURN(auto files, DayFiles(dir));
  json torn;
  // The chain continues from the last whole record of the newest non-empty file.
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    std::string path = dir + "/" + *it;
    ASSIGN_OR_RETURN(std::string data, ReadAll(path));
    size_t keep = data.empty() || data.back() == '\n' ? data.size() : data.rfind('\n') + 1;
    if (keep < data.size() && torn.is_null()) {
      std::string tail = data.substr(keep);
      std::string side = path + ".torn-" + std::to_string(keep);
      UniqueFd sfd(::open(side.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
      if (!sfd) return ErrnoError("open " + side);
      RETURN_IF_ERROR(WriteAll(sfd.get(), tail, side));
      if (::truncate(path.c_str(), static_cast<off_t>(keep)) != 0) return ErrnoError("truncate " + path);
      LOG_ERROR("audit: {} ended with a torn record ({} bytes at offset {}), moved to {}", path, tail.size(), keep,
                side);
      torn = {{"action", "audit.torn_tail"},
              {"file", *it},
              {"offset", keep},
              {"bytes", tail.size()},
              {"sha256", Sha256Hex(tail)},
              {"moved_to", side.substr(dir.size() + 1)}};
      data.resize(keep);
    }
    if (data.empty()) continue;
    size_t start = data.rfind('\n', data.size() - 2);
    start = start == std::string::npos ? 0 : start + 1;
    json last = json::parse(data.substr(start, data.size() - 1 - start), nullptr, false);
    if (!last.is_object() || !last.contains("seq") || !last["seq"].is_number_unsigned() || !last.contains("hash") ||
        !last["hash"].is_string()) {
      return Status(StatusCode::kDataLoss,
                    "audit: last record of " + path + " is not a valid record (run airlock audit verify)");
    }
    log->seq_ = last["seq"].get<uint64_t>();
    log->prev_ = last["hash"].get<std::string>();
    break;
  }
  std::string head = dir + "/HEAD";
  log->head_fd_.Reset(::open(head.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!log->head_fd_) return ErrnoError("open " + head);
  if (!torn.is_null()) RETURN_IF_ERROR(log->Append(torn));
  return log;
}

AuditLog::~AuditLog() { (void)Flush(); }

uint64_t AuditLog::last_seq() const {
  std::lock_guard<std::mutex> l(mu_);
  return seq_;
}

Status AuditLog::OpenDay(const std::string& day) {
  std::string path = dir_ + "/" + day + ".jsonl";
  if (fd_) ::fdatasync(fd_.get());
  fd_.Reset(::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600));
  if (!fd_) {
    day_.clear();
    return ErrnoError("open " + path);
  }
  day_ = day;
  return OkStatus();
}

Status AuditLog::WriteHead() {
  char buf[kHeadBytes + 1];
  std::snprintf(buf, sizeof buf, "%020llu %s\n", static_cast<unsigned long long>(seq_), prev_.c_str());
  if (::pwrite(head_fd_.get(), buf, kHeadBytes, 0) != static_cast<ssize_t>(kHeadBytes)) {
    return ErrnoError("pwrite " + dir_ + "/HEAD");
  }
  return OkStatus();
}

Status AuditLog::Append(json record) {
  if (!record.is_object()) return InvalidArgument("an audit record must be a JSON object");
  record.erase("hash");
  if (redactor_) redactor_->RedactJson(&record);
  std::lock_guard<std::mutex> l(mu_);
  int64_t now = NowUnixMs();
  std::string day = DayOf(now);
  if (day != day_) RETURN_IF_ERROR(OpenDay(day));
  record["seq"] = seq_ + 1;
  record["ts"] = FormatRfc3339Ms(now);
  record["prev"] = prev_;
  record["writer"] = writer_;
  std::string hash = RecordHash(record);
  record["hash"] = hash;
  std::string line = Canonical(record) + "\n";
  struct stat st;
  if (::fstat(fd_.get(), &st) != 0) return ErrnoError("fstat audit file");
  Status w = WriteAll(fd_.get(), line, dir_ + "/" + day_ + ".jsonl");
  if (!w.ok()) {
    // Never leave a partial line behind: cut back to the last whole record.
    (void)::ftruncate(fd_.get(), st.st_size);
    return w;
  }
  ++seq_;
  prev_ = hash;
  Status h = WriteHead();
  if (now - last_sync_ms_ >= 1000) {
    ::fdatasync(fd_.get());
    last_sync_ms_ = now;
  }
  if (observer_) observer_(record);
  return h;
}

AuditSink AuditLog::Sink() {
  return [this](const json& record) {
    Status st = Append(record);
    if (!st.ok()) {
      static std::atomic<int64_t> last_warn{0};
      int64_t now = NowUnixMs();
      if (now - last_warn.load() > 10000) {
        last_warn = now;
        LOG_ERROR("audit: append failed: {}", st.message());
      }
    }
  };
}

Status AuditLog::Flush() {
  std::lock_guard<std::mutex> l(mu_);
  if (fd_ && ::fdatasync(fd_.get()) != 0) return ErrnoError("fdatasync audit file");
  return OkStatus();
}

StatusOr<VerifyReport> Verify(const std::string& dir) {
  VerifyReport rep;
  ASSIGN_OR_RETURN(auto files, DayFiles(dir));
  std::string expected_prev = kZeroHash;
  uint64_t expected_seq = 1;
  uint64_t last_seq = 0;
  std::string last_hash = kZeroHash;
  // Telling a second writer from an edit: every record names its writer (one
  // AuditLog::Open). Records of two writers interleaved (two daemons on one
  // trail) each chain intact to their own writer's previous record, or, for
  // a writer's first, to a record of the trail; an edit, a removal or a
  // reordering breaks that.
  std::set<std::string> seen_hashes = {kZeroHash};
  std::string last_writer_;
  std::map<std::string, std::string> writer_last;  // writer -> hash of its last record
  for (const auto& name : files) {
    ++rep.files;
    ASSIGN_OR_RETURN(std::string data, ReadAll(dir + "/" + name));
    size_t pos = 0, line_no = 0;
    while (pos < data.size()) {
      ++line_no;
      size_t nl = data.find('\n', pos);
      auto problem = [&](std::string what, bool tampering = true) {
        rep.problems.push_back({name, line_no, std::move(what), tampering});
      };
      if (nl == std::string::npos) {
        problem("incomplete last line (" + std::to_string(data.size() - pos) +
                " bytes without a newline: a torn write, or the file was cut)");
        break;
      }
      std::string line = data.substr(pos, nl - pos);
      pos = nl + 1;
      json j = json::parse(line, nullptr, false);
      if (!j.is_object() || !j.contains("hash") || !j["hash"].is_string() || !j.contains("prev") ||
          !j["prev"].is_string() || !j.contains("seq") || !j["seq"].is_number_unsigned()) {
        problem("not an audit record (unparseable, or seq/prev/hash missing)");
        continue;
      }
      ++rep.records;
      std::string hash = j["hash"].get<std::string>();
      uint64_t seq = j["seq"].get<uint64_t>();
      json body = j;
      body.erase("hash");
      if (RecordHash(body) != hash) {
        problem("record seq " + std::to_string(seq) + " was edited: its hash does not match its content");
      } else if (Canonical(j) != line) {
        problem("record seq " + std::to_string(seq) + " is not in canonical form (the line was edited)");
      }
      const std::string prev = j["prev"].get<std::string>();
      const std::string writer = StringField(j, "writer");
      bool intact = RecordHash(body) == hash;
      auto wl = writer_last.find(writer);
      bool own_chain = !writer.empty() && (wl != writer_last.end() ? wl->second == prev : seen_hashes.count(prev) > 0);
      if ((seq != expected_seq || prev != expected_prev) && intact && own_chain &&
          (wl == writer_last.end() || last_writer_ != writer)) {
        problem("seq " + std::to_string(seq) + " of writer " + writer +
                    " interleaves with another writer's records: two daemons appended to this trail at once "
                    "(operator damage, not an edit: each writer's own chain is intact)",
                false);
      } else if (seq != expected_seq) {
        problem(seq > expected_seq ? "seq " + std::to_string(seq) + " where " + std::to_string(expected_seq) +
                                         " was expected: record(s) removed before this line"
                                   : "seq " + std::to_string(seq) + " where " + std::to_string(expected_seq) +
                                         " was expected: records reordered or duplicated");
      } else if (prev != expected_prev) {
        problem(
            "chain broken: prev does not match the hash of the record before (a record before this line "
            "was replaced, or records were reordered)");
      }
      if (j.contains("ts") && j["ts"].is_string() && j["ts"].get<std::string>().substr(0, 10) != name.substr(0, 10)) {
        problem("record seq " + std::to_string(seq) + " is dated " + j["ts"].get<std::string>() + " but sits in " +
                name);
      }
      if (StringField(j, "action") == "audit.torn_tail") {
        rep.notes.push_back(name + ":" + std::to_string(line_no) + ": the daemon recovered a torn record of " +
                            StringField(j, "file", "?") + " (moved to " + StringField(j, "moved_to", "?") + ")");
      }
      seen_hashes.insert(hash);
      if (!writer.empty()) writer_last[writer] = hash;
      last_writer_ = writer;
      expected_prev = hash;
      expected_seq = seq + 1;
      last_seq = seq;
      last_hash = hash;
    }
  }
  std::ifstream hf(dir + "/HEAD");
  std::string head_line;
  if (hf && std::getline(hf, head_line) && !head_line.empty()) {
    std::istringstream hs(head_line);
    unsigned long long hseq = 0;
    std::string hhash;
    hs >> hseq >> hhash;
    if (hseq > last_seq) {
      rep.problems.push_back({"HEAD", 0,
                              "HEAD names seq " + std::to_string(hseq) + " but the trail ends at seq " +
                                  std::to_string(last_seq) + ": records removed from the end"});
    } else if (hseq == last_seq && hhash != last_hash) {
      rep.problems.push_back(
          {"HEAD", 0, "the last record (seq " + std::to_string(last_seq) + ") does not match HEAD: it was replaced"});
    } else if (hseq + 1 == last_seq) {
      rep.notes.push_back("HEAD lags the trail by one record (a crash between append and HEAD update)");
    } else if (hseq < last_seq) {
      rep.problems.push_back({"HEAD", 0,
                              "HEAD names seq " + std::to_string(hseq) + " but the trail has " +
                                  std::to_string(last_seq) + " records: records were appended by hand"});
    }
  } else if (last_seq > 0) {
    rep.problems.push_back({"HEAD", 0, "HEAD is missing or empty"});
  }
  return rep;
}

StatusOr<std::vector<json>> Query(const std::string& dir, const QueryFilter& filter) {
  ASSIGN_OR_RETURN(auto files, DayFiles(dir));
  std::string since_day = filter.since_ms > 0 ? DayOf(filter.since_ms) : "";
  std::string since_ts = filter.since_ms > 0 ? FormatRfc3339Ms(filter.since_ms) : "";
  std::deque<json> out;
  // A line at a time: what a query holds is its `limit` matches and one
  // line, however large a day's file grew (a whole day read at once would
  // cost the daemon that day's size per concurrent query).
  std::string line;
  // A sandbox id that JSON writes as it is (no escapes) appears verbatim in
  // the lines of its records: the others are skipped unparsed.
  const bool plain_id = !filter.sandbox.empty() &&
                        filter.sandbox.find_first_not_of(
                            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == std::string::npos;
  for (const auto& name : files) {
    if (!since_day.empty() && name.substr(0, 10) < since_day) continue;
    const std::string path = dir + "/" + name;
    std::ifstream in(path, std::ios::binary);
    if (!in) return ErrnoError("open " + path);
    while (std::getline(in, line)) {
      if (in.eof()) break;  // a last line without '\n': torn, not a record
      if (plain_id && line.find(filter.sandbox) == std::string::npos) continue;
      json j = json::parse(line, nullptr, false);
      if (!j.is_object()) continue;
      if (!filter.sandbox.empty() && StringField(j, "sandbox") != filter.sandbox) continue;
      if (!since_ts.empty() && StringField(j, "ts") < since_ts) continue;
      out.push_back(std::move(j));
      if (out.size() > filter.limit) out.pop_front();
    }
  }
  return std::vector<json>(out.begin(), out.end());
}

StatusOr<int64_t> ParseSince(const std::string& text, int64_t now_ms) {
  if (text.empty()) return InvalidArgument("empty time");
  if (text[0] == '-') {
    char* end = nullptr;
    long long n = std::strtoll(text.c_str() + 1, &end, 10);
    int64_t unit = 0;
    if (end && std::strlen(end) == 1) {
      switch (*end) {
        case 's':
          unit = 1000;
          break;
        case 'm':
          unit = 60000;
          break;
        case 'h':
          unit = 3600000;
          break;
        case 'd':
          unit = 86400000;
          break;
      }
    }
    if (unit == 0 || n < 0 || end == text.c_str() + 1)
      return InvalidArgument("bad relative time '" + text + "' (e.g. -10m, -2h, -1d)");
    return now_ms - n * unit;
  }
  if (std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return static_cast<int64_t>(std::strtoll(text.c_str(), nullptr, 10)) * 1000;
  }
  auto ts = envd::ParseTimestamp(text);
  if (!ts.ok()) return InvalidArgument("bad time '" + text + "': use RFC 3339, Unix seconds or -10m/-2h/-1d");
  return ts->seconds * 1000 + ts->nanos / 1000000;
}

}  // namespace airlock::audit
