// GET /sandboxes/{id}/metrics?start=&end= (spec §1.4 #8, §1.5.4): the
// sandbox's resource use over an interval, from the history the metrics
// sampler keeps (control/metrics_sampler.h).
#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "server/server.h"

namespace airlock::server {

using nlohmann::json;

void SandboxApi::Metrics(std::shared_ptr<HttpConn> c, const std::string& id) {
  auto sb = Visible(id);
  if (!sb) return RespondNoSandbox(c, id);
  SandboxRecord rec = sb->Record();
  const int64_t now_s = NowUnixMs() / 1000;
  auto range = control::ParseMetricsRange(c->Query("start"), c->Query("end"), rec.created_at_ms / 1000, now_s);
  if (!range.ok()) return c->RespondError(400, range.status().message());
  // A range that reaches the present gets a fresh sample of a running sandbox.
  const bool live = rec.state == "running" && range->end_s >= now_s;
  asio::post(*workers_, [this, c, rec, range = *range, live] {
    Status live_error;
    if (live) live_error = metrics_sampler_->SampleNow(rec, std::chrono::seconds(10)).status();
    auto found = metrics_sampler_->Points(rec.id, range);
    const std::vector<control::MetricSample> points = found.value_or(std::vector<control::MetricSample>{});
    int status = 200;
    std::string out;
    if (!found) {
      status = 404;
      out = JsonError(404, "sandbox " + rec.id + " not found");
    } else if (!live_error.ok() && points.empty()) {
      status = 502;  // nothing recorded and the agent does not answer
      out = JsonError(502, live_error.message());
    } else {
      json arr = json::array();
      for (const auto& p : points) arr.push_back(control::MetricJson(p));
      out = arr.dump();
    }
    asio::post(c->executor(), [c, status, out] { c->Respond(status, "application/json", out); });
  });
}

}  // namespace airlock::server
