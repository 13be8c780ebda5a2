// `airlock cluster certs --out DIR [--node NAME[,IP...]]... [--front NAME]...
// [--both NAME[,IP...]]... [--days N]`: a development CA and one certificate
// and key per cluster member, for the mutual TLS between fronts and nodes
// (cluster/cluster_certs.h says what each file holds). Run it again with new
// members to add them under the same CA. Prints each file written, then the
// serve flags that use them.
// Exit: 0 written, 1 failed, 2 usage (a bad name, IP or --days included).
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cluster/cluster_certs.h"

namespace airlock::cli {
namespace {

namespace po = boost::program_options;

constexpr const char* kClusterUsage =
    "usage: airlock cluster certs --out DIR [--node NAME[,IP...]]... [--front NAME]... [--both NAME[,IP...]]...\n"
    "                             [--days N]\n"
    "  a dev CA (DIR/ca.pem, DIR/ca.key; made once, then reused) and DIR/NAME.pem + DIR/NAME.key per member.\n"
    "  --node: a `serve --role node` (serverAuth, clientAuth); --front: a `serve --role front` (clientAuth);\n"
    "  --both: a `serve --role both`. IPs are extra subjectAltNames. --days: certificate lifetime (default 365).\n";

// "NAME[,IP...]" into a member with the given roles.
cluster::ClusterMember ParseMember(const std::string& spec, bool front, bool node) {
  cluster::ClusterMember m;
  m.front = front;
  m.node = node;
  size_t start = 0;
  for (bool first = true;; first = false) {
    size_t comma = spec.find(',', start);
    std::string part = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (first)
      m.name = part;
    else
      m.ips.push_back(part);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return m;
}

int Certs(const std::vector<std::string>& args) {
  std::string out;
  std::vector<std::string> nodes, fronts, boths;
  int days = 365;
  po::options_description desc("airlock cluster certs [options]");
  desc.add_options()("help,h", "show this help")("out", po::value(&out), "directory of the CA and certificates")(
      "node", po::value(&nodes)->composing(), "NAME[,IP...]: a node (repeatable)")(
      "front", po::value(&fronts)->composing(), "NAME: a front (repeatable)")(
      "both", po::value(&boths)->composing(), "NAME[,IP...]: a front and node in one process (repeatable)")(
      "days", po::value(&days)->default_value(days), "lifetime of the member certificates, 1..3650");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(desc).run(), vm);
    po::notify(vm);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "airlock cluster certs: %s\n%s", e.what(), kClusterUsage);
    return 2;
  }
  if (vm.count("help")) {
    std::fputs(kClusterUsage, stdout);
    std::cout << desc;
    return 0;
  }
  if (out.empty()) {
    std::fprintf(stderr, "airlock cluster certs: --out DIR is required\n%s", kClusterUsage);
    return 2;
  }
  cluster::CertsOptions o;
  o.dir = out;
  o.days = days;
  for (const auto& s : nodes) o.members.push_back(ParseMember(s, false, true));
  // A front's name is taken whole: it is a client only, so it needs no IP.
  for (const auto& s : fronts) o.members.push_back({.name = s, .front = true, .node = false, .ips = {}});
  for (const auto& s : boths) o.members.push_back(ParseMember(s, true, true));

  auto written = cluster::MakeClusterCerts(o);
  if (!written.ok()) {
    std::fprintf(stderr, "airlock cluster certs: %s\n", written.status().message().c_str());
    return written.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  for (const auto& p : *written) std::printf("%s\n", p.c_str());
  const std::string name = o.members.size() == 1 ? o.members[0].name : "NAME";
  std::printf("serve --cluster-ca %s/ca.pem --cluster-cert %s/%s.pem --cluster-key %s/%s.key\n", out.c_str(),
              out.c_str(), name.c_str(), out.c_str(), name.c_str());
  return 0;
}

}  // namespace

int CmdCluster(const std::string& state_dir, const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(kClusterUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "certs") return Certs(std::vector<std::string>(args.begin() + 1, args.end()));
  std::fprintf(stderr, "airlock cluster: unknown verb '%s'\n%s", args[0].c_str(), kClusterUsage);
  return 2;
}

}  // namespace airlock::cli
