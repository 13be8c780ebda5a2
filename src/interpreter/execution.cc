#include "interpreter/execution.h"

#include "interpreter/output.h"

namespace airlock::interpreter {

using json = nlohmann::json;

namespace {
// The largest stream text one /execute line carries (StreamPieces): 64 KiB
// kept the JS SDK's line reader linear in a measured 10 MiB stream.
constexpr size_t kStreamPieceBytes = 64 << 10;
}  // namespace

std::string UnexpectedEndLine() {
  return ErrorLine("UnexpectedEndOfExecution", "Connection to the execution was closed before the execution was finished",
                   "");
}

std::string OutputLimitLine(size_t max) {
  // "64 MiB (67108864 bytes)"; a limit that is no whole number of MiB in bytes only.
  std::string limit = std::to_string(max) + " bytes";
  if (max % (1u << 20) == 0) limit = std::to_string(max >> 20) + " MiB (" + limit + ")";
  return ErrorLine("OutputLimitExceeded",
                   "The execution's output exceeded the limit of " + limit +
                       "; the rest was dropped and the execution was interrupted",
                   "");
}

Execution::Execution(std::shared_ptr<http::Conn> conn, ExecuteRequest request, std::string access_token,
                     size_t max_output_bytes, std::chrono::milliseconds keepalive)
    : conn_(std::move(conn)),
      request_(std::move(request)),
      access_token_(std::move(access_token)),
      max_output_bytes_(max_output_bytes),
      keepalive_(keepalive),
      timer_(conn_->executor()) {}

void Execution::Begin() {
  conn_->BeginResponse(200, "application/x-ndjson", std::nullopt);
  std::weak_ptr<Execution> weak = weak_from_this();
  conn_->SetOnClose([weak] {
    if (auto self = weak.lock()) self->OnClientGone();
  });
  conn_->WatchForDisconnect();
  last_write_ = std::chrono::steady_clock::now();
  ArmKeepalive();
}

void Execution::ArmKeepalive() {
  if (finished_ || gone_) return;
  timer_.expires_at(last_write_ + keepalive_);
  std::weak_ptr<Execution> weak = weak_from_this();
  timer_.async_wait([weak](const boost::system::error_code& ec) {
    auto self = weak.lock();
    if (ec || !self || self->finished_ || self->gone_) return;
    if (std::chrono::steady_clock::now() >= self->last_write_ + self->keepalive_) self->WriteLine(KeepaliveLine());
    self->ArmKeepalive();
  });
}

void Execution::OnClientGone() {
  if (gone_ || finished_) return;
  gone_ = true;
  timer_.cancel();
  if (auto fn = std::move(on_gone_)) fn();
}

void Execution::WriteLine(const std::string& line) {
  if (finished_ || gone_ || conn_->closed()) return;
  std::string l;
  l.reserve(line.size() + 1);
  l += line;
  l += '\n';
  conn_->Write(l);
  last_write_ = std::chrono::steady_clock::now();
}

void Execution::HitLimit() {
  if (limit_hit_) return;
  limit_hit_ = true;
  if (auto fn = std::move(on_limit_)) fn();
  Finish(OutputLimitLine(max_output_bytes_));
}

void Execution::WriteOutput(std::string line, const char* stream_name, std::string_view stream_text) {
  if (limit_hit_ || finished_) return;
  size_t need = line.size() + 1;
  if (output_bytes_ + need > max_output_bytes_) {
    size_t room = max_output_bytes_ - output_bytes_;
    if (stream_name && room > 1) {
      if (auto cut = TruncatedStreamLine(stream_name, stream_text, room - 1)) {
        output_bytes_ += cut->size() + 1;
        WriteLine(*cut);
      }
    }
    HitLimit();
    return;
  }
  output_bytes_ += need;
  WriteLine(line);
}

void Execution::OnIopub(const KernelMessage& m) {
  if (finished_) return;
  std::string type = m.msg_type();
  if (m.content_too_large) {
    if (type == "stream" || type == "execute_result" || type == "display_data" || type == "error") HitLimit();
    return;
  }
  auto line = LineForIopub(type, m.content);
  if (!line) return;
  if (type == "execute_input") {
    if (counted_) return;
    counted_ = true;
    WriteLine(*line);
    return;
  }
  if (type == "error") {
    if (error_sent_) return;  // one error line per execution
    error_sent_ = true;
  }
  if (type == "stream") {
    // LineForIopub answered, so "text" is a string; long text goes out as
    // several lines (StreamPieces says why).
    const std::string& text = m.content.find("text")->get_ref<const std::string&>();
    std::string name = m.content.value("name", "stdout") == "stderr" ? "stderr" : "stdout";
    if (text.size() <= kStreamPieceBytes) return WriteOutput(std::move(*line), name.c_str(), text);
    std::string ts = TimestampNow();
    for (std::string_view piece : StreamPieces(text, kStreamPieceBytes)) {
      if (limit_hit_ || finished_) return;
      WriteOutput(StreamLine(name, piece, ts), name.c_str(), piece);
    }
  } else {
    WriteOutput(std::move(*line), nullptr, {});
  }
}

void Execution::Complete() {
  const json& c = reply_;
  if (finished_ || !c.is_object()) return Finish();
  if (!counted_) {
    if (auto it = c.find("execution_count"); it != c.end() && it->is_number_integer()) {
      counted_ = true;
      WriteLine(NumberOfExecutionsLine(it->get<long long>()));
    }
  }
  std::string status = c.value("status", "");
  if (status == "aborted" && !error_sent_) {
    WriteOutput(ErrorLine("ExecutionAborted", "Execution was aborted", ""), nullptr, {});
    error_sent_ = true;
  } else if (status == "error" && !error_sent_) {
    WriteOutput(ErrorLineFromContent(c), nullptr, {});
    error_sent_ = true;
  }
  Finish();
}

void Execution::Finish(std::optional<std::string> error_line) {
  if (finished_) return;
  if (error_line) WriteLine(*error_line);
  WriteLine(EndOfExecutionLine());
  finished_ = true;
  timer_.cancel();
  on_gone_ = nullptr;
  on_limit_ = nullptr;
  if (!conn_->closed()) conn_->EndResponse();
}

}  // namespace airlock::interpreter
