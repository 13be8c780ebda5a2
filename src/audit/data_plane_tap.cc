#include "audit/data_plane_tap.h"

#include <algorithm>
#include <chrono>

#include "envd/multipart.h"
#include "common/clock.h"
#include "common/hex.h"
#include "envd/proto_json.h"

namespace airlock::audit {

using nlohmann::json;

namespace {

constexpr uint16_t kAgentTapPort = 49983;
constexpr uint16_t kInterpreterPort = 49999;
constexpr size_t kMaxErrorValue = 256;

// The "type" of an NDJSON line too long to parse, from its first bytes
// ({"type": "stdout", ...} as the interpreter writes it); "" when not there.
std::string TypeFromPrefix(std::string_view head) {
  size_t k = head.find("\"type\"");
  if (k == std::string_view::npos) return "";
  size_t q1 = head.find('"', head.find(':', k + 6));
  if (q1 == std::string_view::npos) return "";
  size_t q2 = head.find('"', q1 + 1);
  if (q2 == std::string_view::npos || q2 - q1 > 64) return "";
  return std::string(head.substr(q1 + 1, q2 - q1 - 1));
}

// "Basic base64(user:)" → "user"; "" when absent or malformed.
std::string BasicUser(const std::string& authorization) {
  if (authorization.rfind("Basic ", 0) != 0) return "";
  auto dec = envd::Base64Decode(authorization.substr(6));
  if (!dec.ok()) return "";
  return dec->substr(0, dec->find(':'));
}

}  // namespace

Sha256Stream::Sha256Stream() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr); }
Sha256Stream::~Sha256Stream() { EVP_MD_CTX_free(ctx_); }
void Sha256Stream::Update(std::string_view data) {
  bytes_ += data.size();
  EVP_DigestUpdate(ctx_, data.data(), data.size());
}
std::string Sha256Stream::HexDigest() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx_, md, &n);
  return HexEncode(md, n);
}

Status ChunkedDecoder::Feed(std::string_view in, std::string* out) {
  while (!in.empty() && state_ != State::kDone) {
    switch (state_) {
      case State::kSize:
      case State::kDataCrlf:
      case State::kTrailer: {
        size_t nl = in.find('\n');
        size_t take = nl == std::string_view::npos ? in.size() : nl + 1;
        if (line_.size() + take > 4096) return InvalidArgument("chunked body: line too long");
        line_.append(in.substr(0, take));
        in.remove_prefix(take);
        if (nl == std::string_view::npos) break;
        std::string line = line_;
        line_.clear();
        while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
        if (state_ == State::kDataCrlf) {
          if (!line.empty()) return InvalidArgument("chunked body: missing CRLF after chunk data");
          state_ = State::kSize;
        } else if (state_ == State::kTrailer) {
          if (line.empty()) state_ = State::kDone;
        } else {
          std::string hex = line.substr(0, line.find(';'));
          if (hex.empty() || hex.size() > 15 || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
            return InvalidArgument("chunked body: bad chunk size");
          }
          remaining_ = std::stoull(hex, nullptr, 16);
          state_ = remaining_ == 0 ? State::kTrailer : State::kData;
        }
        break;
      }
      case State::kData: {
        size_t take = static_cast<size_t>(std::min<uint64_t>(remaining_, in.size()));
        out->append(in.substr(0, take));
        in.remove_prefix(take);
        remaining_ -= take;
        if (remaining_ == 0) state_ = State::kDataCrlf;
        break;
      }
      case State::kDone:
        break;
    }
  }
  return OkStatus();
}

std::unique_ptr<DataPlaneTap> DataPlaneTap::Create(const TapRequest& req, AuditSink sink) {
  if (!sink) return nullptr;
  if (req.port == kInterpreterPort) {
    if (req.method == "POST" && req.path == "/execute") {
      return std::unique_ptr<DataPlaneTap>(new DataPlaneTap(Kind::kInterpreterExecute, req, std::move(sink)));
    }
    return nullptr;
  }
  if (req.port != kAgentTapPort) return nullptr;
  if (req.method == "POST" && req.path == "/process.Process/Start") {
    return std::unique_ptr<DataPlaneTap>(new DataPlaneTap(Kind::kExec, req, std::move(sink)));
  }
  if (req.path == "/files" && req.method == "POST") {
    return std::unique_ptr<DataPlaneTap>(new DataPlaneTap(Kind::kFileWrite, req, std::move(sink)));
  }
  if (req.path == "/files" && req.method == "GET") {
    return std::unique_ptr<DataPlaneTap>(new DataPlaneTap(Kind::kFileRead, req, std::move(sink)));
  }
  if (req.path == "/files/compose" && req.method == "POST") {
    return std::unique_ptr<DataPlaneTap>(new DataPlaneTap(Kind::kFileCompose, req, std::move(sink)));
  }
  return nullptr;
}

DataPlaneTap::DataPlaneTap(Kind kind, TapRequest req, AuditSink sink)
    : kind_(kind), req_(std::move(req)), sink_(std::move(sink)), started_ms_(NowUnixMs()) {
  if (kind_ == Kind::kFileWrite && req_.content_type.rfind("multipart/", 0) == 0) {
    auto boundary = envd::MultipartBoundary(req_.content_type);
    if (!boundary.ok()) {
      errors_ = boundary.status().message();
      return;
    }
    envd::MultipartParser::Callbacks cb;
    cb.on_part_begin = [this](const envd::PartHeaders& h) {
      part_hash_ = std::make_unique<Sha256Stream>();
      auto q = req_.query.find("path");
      part_path_ = q != req_.query.end() && !q->second.empty() ? q->second : h.filename.value_or(h.name);
      return OkStatus();
    };
    cb.on_part_data = [this](std::string_view d) {
      if (part_hash_) part_hash_->Update(d);
      return OkStatus();
    };
    cb.on_part_end = [this] {
      if (part_hash_) {
        uint64_t n = part_hash_->bytes();
        parts_.push_back({{"path", part_path_}, {"size", n}, {"sha256", part_hash_->HexDigest()}});
        part_hash_.reset();
      }
      return OkStatus();
    };
    multipart_ = std::make_unique<envd::MultipartParser>(*boundary, std::move(cb));
  }
}

DataPlaneTap::~DataPlaneTap() { Finish("the exchange was abandoned"); }

void DataPlaneTap::OnRequestBody(std::string_view d) {
  try {
    OnRequestBodyImpl(d);
  } catch (const std::exception& e) {  // never let hostile bytes unwind the proxy
    if (errors_.empty()) errors_ = std::string("request body: ") + e.what();
  }
}

void DataPlaneTap::OnRequestBodyImpl(std::string_view d) {
  if (kind_ == Kind::kExec || kind_ == Kind::kInterpreterExecute || kind_ == Kind::kFileCompose) {
    size_t max = kind_ == Kind::kInterpreterExecute ? kMaxExecuteRequest : kMaxStartRequest;
    size_t room = max - std::min(max, start_body_.size());
    if (d.size() > room) start_truncated_ = true;
    start_body_.append(d.substr(0, room));
    if (kind_ == Kind::kInterpreterExecute) body_hash_.Update(d);
  } else if (kind_ == Kind::kFileWrite) {
    body_hash_.Update(d);
    if (multipart_) {
      Status st = multipart_->Feed(d);
      if (!st.ok() && errors_.empty()) errors_ = "multipart: " + st.message();
    }
  }
}

void DataPlaneTap::OnResponseHead(int status, bool chunked) {
  status_ = status;
  chunked_ = chunked;
}

void DataPlaneTap::OnResponseBytes(std::string_view framed) {
  try {
    OnResponseBytesImpl(framed);
  } catch (const std::exception& e) {
    if (errors_.empty()) errors_ = std::string("response: ") + e.what();
  }
}

void DataPlaneTap::OnResponseBytesImpl(std::string_view framed) {
  if (!chunked_) return OnResponsePayload(framed);
  std::string out;
  Status st = dechunk_.Feed(framed, &out);
  if (!st.ok() && errors_.empty()) errors_ = st.message();
  if (!out.empty()) OnResponsePayload(out);
}

void DataPlaneTap::OnResponsePayload(std::string_view data) {
  if (kind_ == Kind::kFileRead) {
    if (status_ == 200) body_hash_.Update(data);
    return;
  }
  if (kind_ == Kind::kInterpreterExecute) {
    if (status_ == 200) OnNdjson(data);
    return;
  }
  if (kind_ != Kind::kExec || status_ != 200) return;
  Status st = response_frames_.Feed(data);
  if (!st.ok()) {
    if (errors_.empty()) errors_ = "response stream: " + st.message();
    return;
  }
  while (auto env = response_frames_.Next()) {
    if (env->end_stream()) {
      Status es = envd::ParseEndStream(env->payload);
      if (es.code() == StatusCode::kDeadlineExceeded) {
        deadline_exceeded_ = true;
      } else if (!es.ok() && errors_.empty()) {
        errors_ = "end of stream: " + es.ToString();
      }
      continue;
    }
    OnMessage(env->payload);
  }
}

void DataPlaneTap::OnMessage(const std::string& payload) {
  json j = json::parse(payload, nullptr, false);
  if (!j.is_object() || !j.contains("event") || !j["event"].is_object()) return;
  const json& ev = j["event"];
  if (auto s = ev.find("start"); s != ev.end() && s->is_object() && s->contains("pid")) {
    auto pid = envd::Int64FromJson((*s)["pid"]);
    if (pid.ok() && !pid_) {
      pid_ = *pid;
      // The start is recorded at once: a process that never ends is audited too.
      ParseStartRequest();
      json r = {{"action", "exec.start"}, {"sandbox", req_.sandbox}, {"pid", *pid_}, {"started_at_ms", started_ms_}};
      std::string user = BasicUser(req_.authorization);
      r["user"] = user.empty() ? json("default") : json(user);
      r.update(exec_fields_);
      if (!req_.api_key_id.empty()) r["api_key_id"] = req_.api_key_id;
      sink_(r);
    }
  }
  if (auto d = ev.find("data"); d != ev.end() && d->is_object()) {
    for (const char* stream : {"stdout", "stderr", "pty"}) {
      auto it = d->find(stream);
      if (it == d->end() || !it->is_string()) continue;
      auto bytes = envd::Base64Decode(it->get<std::string>());
      if (!bytes.ok()) continue;
      (std::string_view(stream) == "stderr" ? err_hash_ : out_hash_).Update(*bytes);
    }
  }
  if (auto e = ev.find("end"); e != ev.end() && e->is_object()) end_ = *e;
}

void DataPlaneTap::OnNdjson(std::string_view data) {
  while (!data.empty()) {
    size_t nl = data.find('\n');
    std::string_view piece = data.substr(0, nl == std::string_view::npos ? data.size() : nl);
    size_t room = kMaxNdjsonLine - std::min(kMaxNdjsonLine, line_.size());
    line_.append(piece.substr(0, std::min(room, piece.size())));
    line_size_ += piece.size();
    if (nl == std::string_view::npos) return;
    OnNdjsonLine(line_, line_size_);
    line_.clear();
    line_size_ = 0;
    data.remove_prefix(nl + 1);
  }
}

void DataPlaneTap::OnNdjsonLine(std::string_view line, uint64_t full_size) {
  ++lines_;
  std::string type;
  json j;
  if (full_size <= kMaxNdjsonLine) {
    j = json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("type") && j["type"].is_string()) type = j["type"].get<std::string>();
  } else {
    type = TypeFromPrefix(line.substr(0, 4096));
  }
  auto text_size = [&]() -> uint64_t {
    if (j.is_object() && j.contains("text") && j["text"].is_string()) return j["text"].get_ref<const std::string&>().size();
    return full_size;  // too long to parse: the line's size stands for it
  };
  if (type == "stdout") {
    stdout_bytes_ += text_size();
  } else if (type == "stderr") {
    stderr_bytes_ += text_size();
  } else if (type == "result") {
    ++results_;
    result_bytes_ += full_size;
    if (j.is_object()) {
      for (auto& [k, v] : j.items()) {
        if (k == "type" || k == "is_main_result" || k == "extra") continue;
        if (result_formats_.size() < 32 && std::find(result_formats_.begin(), result_formats_.end(), k) == result_formats_.end()) {
          result_formats_.push_back(k.substr(0, 64));
        }
      }
    }
  } else if (type == "error") {
    json e = json::object();
    if (j.is_object()) {
      for (const char* k : {"name", "value"}) {
        if (j.contains(k) && j[k].is_string()) e[k] = j[k].get<std::string>().substr(0, kMaxErrorValue);
      }
    }
    error_ = e;
  } else if (type == "number_of_executions") {
    if (j.is_object() && j.contains("execution_count") && j["execution_count"].is_number_integer()) {
      execution_count_ = j["execution_count"].get<int64_t>();
    }
  } else if (type == "end_of_execution") {
    end_of_execution_ = true;
  }
}

void DataPlaneTap::FinishInterpreter(json& r) {
  r["action"] = "interpreter.execute";
  json body = start_truncated_ ? json() : json::parse(start_body_, nullptr, false);
  if (body.is_object() && body.contains("code") && body["code"].is_string()) {
    Sha256Stream code;
    code.Update(body["code"].get_ref<const std::string&>());
    r["code_bytes"] = code.bytes();
    r["code_sha256"] = code.HexDigest();
    std::string lang = body.contains("language") && body["language"].is_string() ? body["language"].get<std::string>() : "";
    std::string ctx = body.contains("context_id") && body["context_id"].is_string() ? body["context_id"].get<std::string>() : "";
    r["language"] = lang.empty() && ctx.empty() ? "python" : lang.substr(0, 64);
    if (!ctx.empty()) r["context_id"] = ctx.substr(0, 128);
    json names = json::array();
    if (body.contains("env_vars") && body["env_vars"].is_object()) {
      for (auto& [k, v] : body["env_vars"].items()) names.push_back(k);
    }
    r["env_names"] = names;
  } else {
    r["request_bytes"] = body_hash_.bytes();
    r["request_sha256"] = body_hash_.HexDigest();
    if (errors_.empty()) errors_ = start_truncated_ ? "execute request over 1 MiB, not parsed" : "execute request unparsed";
  }
  if (!line_.empty() || line_size_ > 0) OnNdjsonLine(line_, line_size_);  // a last line without '\n'
  line_.clear();
  line_size_ = 0;
  r["stdout_bytes"] = stdout_bytes_;
  r["stderr_bytes"] = stderr_bytes_;
  r["results"] = results_;
  r["result_bytes"] = result_bytes_;
  r["result_formats"] = result_formats_;
  if (error_) r["error_name"] = error_->value("name", ""), r["error_value"] = error_->value("value", "");
  if (execution_count_) r["execution_count"] = *execution_count_;
  r["outcome"] = end_of_execution_ ? "ended" : "stream closed before the end";
}

void DataPlaneTap::ParseStartRequest() {
  if (start_parsed_) return;
  start_parsed_ = true;
  // The Start request is one Connect envelope holding the JSON message.
  envd::EnvelopeDecoder dec(kMaxStartRequest);
  json body;
  if (dec.Feed(start_body_).ok()) {
    if (auto env = dec.Next()) body = json::parse(env->payload, nullptr, false);
  }
  if (!body.is_object()) body = json::parse(start_body_, nullptr, false);  // unary JSON, if ever
  if (!body.is_object() || !body.contains("process") || !body["process"].is_object()) {
    if (errors_.empty())
      errors_ = start_truncated_ ? "start request over 256 KiB, not parsed" : "start request unparsed";
    return;
  }
  const json& p = body["process"];
  json& rec = exec_fields_;
  if (p.contains("cmd") && p["cmd"].is_string()) rec["cmd"] = p["cmd"];
  if (p.contains("args") && p["args"].is_array()) rec["args"] = p["args"];
  if (p.contains("cwd") && p["cwd"].is_string()) rec["cwd"] = p["cwd"];
  json names = json::array();
  if (p.contains("envs") && p["envs"].is_object()) {
    for (auto& [k, v] : p["envs"].items()) names.push_back(k);
  }
  rec["env_names"] = names;
}

void DataPlaneTap::Finish(const std::string& error) {
  if (finished_) return;
  finished_ = true;
  try {
    FinishImpl(error);
  } catch (const std::exception& e) {
    sink_({{"action", "audit.tap_error"}, {"sandbox", req_.sandbox}, {"path", req_.path}, {"error", e.what()}});
  }
}

void DataPlaneTap::FinishImpl(const std::string& error) {
  json r = {
      {"sandbox", req_.sandbox}, {"started_at_ms", started_ms_}, {"ended_at_ms", NowUnixMs()}, {"status", status_}};
  if (!req_.api_key_id.empty()) r["api_key_id"] = req_.api_key_id;
  if (kind_ == Kind::kInterpreterExecute) {
    FinishInterpreter(r);
  } else if (kind_ == Kind::kExec) {
    r["action"] = "exec";
    std::string user = BasicUser(req_.authorization);
    r["user"] = user.empty() ? json("default") : json(user);
    ParseStartRequest();
    r.update(exec_fields_);
    if (pid_) r["pid"] = *pid_;
    r["stdout_bytes"] = out_hash_.bytes();
    r["stdout_sha256"] = out_hash_.HexDigest();
    r["stderr_bytes"] = err_hash_.bytes();
    r["stderr_sha256"] = err_hash_.HexDigest();
    if (end_) {
      const json& e = *end_;
      int64_t code = 0;
      if (e.contains("exitCode")) {
        auto c = envd::Int64FromJson(e["exitCode"]);
        if (c.ok()) code = *c;
      }
      bool exited = e.contains("exited") && e["exited"].is_boolean() && e["exited"].get<bool>();
      std::string status = e.contains("status") && e["status"].is_string() ? e["status"].get<std::string>() : "";
      r["exit_status"] = status;
      if (exited || status.rfind("exit status", 0) == 0) {
        r["exit_code"] = code;
      } else if (status.rfind("signal: ", 0) == 0) {
        r["signal"] = status.substr(8);
      } else {
        r["exit_code"] = code;
      }
      r["outcome"] = "ended";
    } else if (deadline_exceeded_) {
      // The agent's word for it: the deadline passed, the group was killed.
      r["signal"] = "killed";
      r["outcome"] = "deadline exceeded";
    } else {
      r["outcome"] = "stream closed before the end";
    }
  } else if (kind_ == Kind::kFileWrite) {
    r["action"] = "file.write";
    if (multipart_) {
      Status st = multipart_->Finish();
      if (!st.ok() && errors_.empty() && status_ == 200) errors_ = "multipart: " + st.message();
      r["files"] = parts_;
    } else {
      auto q = req_.query.find("path");
      r["files"] = json::array({{{"path", q == req_.query.end() ? "" : q->second},
                                 {"size", body_hash_.bytes()},
                                 {"sha256", body_hash_.HexDigest()}}});
    }
  } else if (kind_ == Kind::kFileCompose) {
    // envd's POST /files/compose: the sources (removed) and the destination,
    // as the request named them.
    r["action"] = "file.compose";
    json body = start_truncated_ ? json() : json::parse(start_body_, nullptr, false);
    r["destination"] = body.is_object() && body.contains("destination") && body["destination"].is_string()
                           ? body["destination"].get<std::string>().substr(0, 4096)
                           : "";
    json sources = json::array();
    if (body.is_object() && body.contains("source_paths") && body["source_paths"].is_array()) {
      for (const auto& s : body["source_paths"]) {
        if (s.is_string() && sources.size() < 1000) sources.push_back(s.get<std::string>().substr(0, 4096));
      }
    }
    r["sources"] = std::move(sources);
    if (start_truncated_) r["sources_truncated"] = true;
  } else {
    r["action"] = "file.read";
    auto q = req_.query.find("path");
    r["path"] = q == req_.query.end() ? "" : q->second;
    r["size"] = body_hash_.bytes();
    r["sha256"] = body_hash_.HexDigest();
  }
  if (auto u = req_.query.find("username"); u != req_.query.end() && kind_ != Kind::kExec) r["user"] = u->second;
  std::string err = !error.empty() ? error : errors_;
  if (!err.empty()) r["error"] = err;
  sink_(r);
}

}  // namespace airlock::audit
