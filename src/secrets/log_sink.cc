#include "secrets/log_sink.h"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <mutex>

#include "secrets/redactor.h"

namespace airlock::secrets {
namespace {

class RedactingSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  RedactingSink(std::vector<spdlog::sink_ptr> inner, std::shared_ptr<const Redactor> r)
      : inner_(std::move(inner)), redactor_(std::move(r)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    std::string text = redactor_->Redact(std::string_view(msg.payload.data(), msg.payload.size()));
    spdlog::details::log_msg copy = msg;
    copy.payload = spdlog::string_view_t(text.data(), text.size());
    for (auto& s : inner_) {
      if (s->should_log(copy.level)) s->log(copy);
    }
  }
  void flush_() override {
    for (auto& s : inner_) s->flush();
  }

 private:
  std::vector<spdlog::sink_ptr> inner_;
  std::shared_ptr<const Redactor> redactor_;
};

}  // namespace

void InstallRedactingLogger(std::shared_ptr<const Redactor> redactor) {
  auto logger = spdlog::default_logger();
  if (!logger) return;
  auto inner = logger->sinks();
  logger->sinks().clear();
  logger->sinks().push_back(std::make_shared<RedactingSink>(std::move(inner), std::move(redactor)));
}

}  // namespace airlock::secrets
