// Egress proxy cost (docs/network.md "Measured"), hermetic: the fake
// internet of the integration tests, a stand-in guest netns per path.
//   throughput: a 100 MB HTTP download from 203.0.113.10 through the egress
//     proxy (allowOut allowed.test) vs the same download with the proxy out
//     of the path (allowOut 203.0.113.10:80: a plain nft forward), ratio
//   added latency: median time-to-first-byte of a tiny request, proxied vs
//     direct, over N requests (each is a new connection)
//   HTTPS: the same download and first byte over TLS, three ways: relayed as
//     bytes (no rules, no secrets), intercepted (a network.rules entry for
//     the host: TLS ends at the proxy with a sandbox-CA leaf, a verified TLS
//     connection upstream, each request head parsed) and direct
// Usage: egress-bench [--mb 100] [--n 30]   (root; ip, nft, curl, openssl)
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "egress/egress_service.h"
#include "egress/policy.h"
#include "net/address_pool.h"
#include "net/host_egress.h"
#include "net/sandbox_network.h"
#include "secrets/broker.h"
#include "secrets/egress_broker.h"
#include "secrets/sandbox_ca.h"
#include "tests/integration/fake_guest.h"
#include "tests/integration/fake_internet.h"
#include "tests/unit/scoped_dir.h"

using namespace airlock;

namespace {

struct Path {
  std::unique_ptr<net::SandboxNetwork> net;
  test_util::Guest guest;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  long mb = 100;
  int n = 30;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--mb") mb = std::atol(argv[i + 1]);
    if (a == "--n") n = std::atoi(argv[i + 1]);
  }
  spdlog::set_level(spdlog::level::warn);
  test_util::ScopedDir dir{test_util::MakeTempDir("airlock-egress-bench")};
  auto inet = test_util::FakeInternet::Start(dir.path);
  if (!inet.ok()) {
    std::fprintf(stderr, "fake internet: %s\n", inet.status().ToString().c_str());
    return 1;
  }
  if (!(*inet)->Enter().ok()) return 1;
  egress::EgressConfig cfg;
  cfg.upstream_dns = test_util::FakeInternet::kDnsServer;
  auto broker = std::make_shared<secrets::Broker>();
  cfg.request_broker = secrets::NewEgressBroker(broker);
  cfg.upstream_ca_file = (*inet)->ca_file();
  auto svc = egress::EgressService::Start(cfg);
  if (!svc.ok()) return 1;
  net::NftEgress ports{"", cfg.dns_port, cfg.http_port, cfg.tls_port};
  if (!net::InstallHostEgress("198.19.252.0/22", ports, true, dir.path).ok()) return 1;
  auto pool = net::AddressPool::Create(net::kHostLeaseRoot, "198.19.252.0/22");
  if (!pool.ok()) return 1;
  auto make = [&](const std::string& tag, const std::vector<std::string>& allow,
                  std::vector<egress::HostHeaderRules> rules = {}) -> std::unique_ptr<Path> {
    auto p = std::make_unique<Path>();
    std::string id = "b" + std::to_string(::getpid()) + tag;
    net::NetworkOptions o;
    o.egress = ports;
    auto nw = net::SandboxNetwork::Create(id, *pool, o);
    if (!nw.ok()) return nullptr;
    p->net = std::move(*nw);
    auto policy = egress::EgressPolicy::Create(false, allow, {});
    if (!policy.ok() || !policy->SetHeaderRules(rules).ok()) return nullptr;
    std::vector<net::NftCidr> cidrs;
    for (const auto& r : policy->CidrAllowRules())
      cidrs.push_back({egress::Ipv4ToString(r.net) + "/" + std::to_string(r.prefix), r.port, true, r.text});
    if (!p->net->SetEgressCidrs(cidrs, {}).ok()) return nullptr;
    if (!(*svc)->AddSandbox(id, p->net->host_ip(), p->net->netns_ip(), *policy).ok()) return nullptr;
    if (!p->guest.Start(*p->net, tag).ok()) return nullptr;
    return p;
  };
  auto proxied = make("p", {"allowed.test"});
  auto direct = make("d", {"203.0.113.10"});
  egress::HostHeaderRules rule;
  rule.pattern = "allowed.test";
  rule.transforms.push_back({{{"X-Bench", "1"}}});
  auto intercepted = make("i", {"allowed.test"}, {rule});
  const std::string id_i = "b" + std::to_string(::getpid()) + "i";
  auto ca = secrets::SandboxCa::Generate(id_i, {"allowed.test"}, std::chrono::hours(1));
  if (!proxied || !direct || !intercepted || !ca.ok()) {
    std::fprintf(stderr, "setup failed\n");
    return 1;
  }
  const std::string bytes = std::to_string(mb * 1000 * 1000);
  auto curl = [](test_util::Guest& g, const std::string& url, const std::string& fmt) {
    auto [rc, out] = g.Exec({"curl", "-sS", "-o", "/dev/null", "--max-time", "120", "-w", fmt, url});
    return rc == 0 ? std::atof(out.c_str()) : -1.0;
  };
  // Warm up (resolves allowed.test for the proxied guest).
  curl(proxied->guest, "http://allowed.test/", "%{time_total}");
  curl(direct->guest, "http://203.0.113.10/", "%{time_total}");
  double bps_proxy = curl(proxied->guest, "http://allowed.test/bytes?n=" + bytes, "%{speed_download}");
  double bps_direct = curl(direct->guest, "http://203.0.113.10/bytes?n=" + bytes, "%{speed_download}");
  std::vector<double> tp, td;
  for (int i = 0; i < n; ++i) {
    tp.push_back(curl(proxied->guest, "http://allowed.test/", "%{time_starttransfer}") * 1000);
    td.push_back(curl(direct->guest, "http://203.0.113.10/", "%{time_starttransfer}") * 1000);
  }
  // HTTPS three ways.
  broker->SetCa(id_i, *ca);
  const std::string sbca = dir.path + "/sandbox-ca.pem", inetca = (*inet)->ca_file();
  std::ofstream(sbca) << (*ca)->cert_pem();
  auto curls = [](test_util::Guest& g, const std::vector<std::string>& extra, const std::string& url,
                  const std::string& fmt) {
    std::vector<std::string> argv = {"curl", "-sS", "-o", "/dev/null", "--max-time", "120", "-w", fmt};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back(url);
    auto [rc, out] = g.Exec(argv);
    return rc == 0 ? std::atof(out.c_str()) : -1.0;
  };
  const std::vector<std::string> raw_args = {"--cacert", inetca}, int_args = {"--cacert", sbca},
                                 dir_args = {"--cacert", inetca, "--resolve", "allowed.test:443:203.0.113.10"};
  curls(intercepted->guest, int_args, "https://allowed.test/", "%{time_total}");
  double tls_raw = curls(proxied->guest, raw_args, "https://allowed.test/bytes?n=" + bytes, "%{speed_download}");
  double tls_int = curls(intercepted->guest, int_args, "https://allowed.test/bytes?n=" + bytes, "%{speed_download}");
  double tls_dir = curls(direct->guest, dir_args, "https://allowed.test/bytes?n=" + bytes, "%{speed_download}");
  std::vector<double> sr, si, sd;
  for (int i = 0; i < n; ++i) {
    sr.push_back(curls(proxied->guest, raw_args, "https://allowed.test/", "%{time_starttransfer}") * 1000);
    si.push_back(curls(intercepted->guest, int_args, "https://allowed.test/", "%{time_starttransfer}") * 1000);
    sd.push_back(curls(direct->guest, dir_args, "https://allowed.test/", "%{time_starttransfer}") * 1000);
  }
  (*svc)->RemoveSandbox(id_i);
  // Bandwidth limit: the same download capped at 20 MB/s per sandbox.
  const std::string pid_p = "b" + std::to_string(::getpid()) + "p";
  (void)(*svc)->SetLimits(pid_p, egress::EgressLimits{256, 20 * 1000 * 1000});
  double bps_capped =
      curl(proxied->guest, "http://allowed.test/bytes?n=" + std::to_string(60 * 1000 * 1000), "%{speed_download}");
  (*svc)->RemoveSandbox("b" + std::to_string(::getpid()) + "p");
  (*svc)->RemoveSandbox("b" + std::to_string(::getpid()) + "d");
  std::printf("| measure | through the egress proxy | proxy out of the path | ratio / added |\n");
  std::printf("|---|---|---|---|\n");
  std::printf("| %ld MB HTTP download | %.0f MB/s | %.0f MB/s | %.2f |\n", mb, bps_proxy / 1e6, bps_direct / 1e6,
              bps_direct > 0 ? bps_proxy / bps_direct : 0);
  std::printf("| 60 MB download, --egress-bandwidth 20 MB/s | %.1f MB/s | - | - |\n", bps_capped / 1e6);
  std::printf("| time to first byte, new connection (median of %d) | %.2f ms | %.2f ms | +%.2f ms |\n", n, Median(tp),
              Median(td), Median(tp) - Median(td));
  std::printf("| %ld MB HTTPS download, relayed as bytes | %.0f MB/s | %.0f MB/s | %.2f |\n", mb, tls_raw / 1e6,
              tls_dir / 1e6, tls_dir > 0 ? tls_raw / tls_dir : 0);
  std::printf("| %ld MB HTTPS download, intercepted (network.rules) | %.0f MB/s | %.0f MB/s | %.2f |\n", mb,
              tls_int / 1e6, tls_dir / 1e6, tls_dir > 0 ? tls_int / tls_dir : 0);
  std::printf("| HTTPS first byte, relayed as bytes (median of %d) | %.2f ms | %.2f ms | +%.2f ms |\n", n, Median(sr),
              Median(sd), Median(sr) - Median(sd));
  std::printf("| HTTPS first byte, intercepted (median of %d) | %.2f ms | %.2f ms | +%.2f ms |\n", n, Median(si),
              Median(sd), Median(si) - Median(sd));
  return 0;
}
