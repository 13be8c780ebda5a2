// FlowEndReader: the end of each connection a sandbox opened through an
// allowed CIDR rule (plain nftables forwarding, no proxy), with its bytes
// each way and duration, from conntrack events of the sandbox netns.
//
// Such a flow is the only guest-opened one conntrack confirms there that is
// masqueraded (SNAT) without being redirected (DNAT): proxied and resolver
// flows are DNATed, inbound agent flows are both, drops are never confirmed.
// Open() enables conntrack accounting and timestamps in the netns (per-netns
// sysctls) and subscribes to UPDATE and DESTROY events on a socket created in
// the netns (short thread that setns()es, as NflogReader). A flow ends when
// TCP reaches TIME_WAIT/CLOSE (an UPDATE event, which carries no counters:
// they and the start time are fetched then with a GET on a second socket);
// a flow that times out instead ends at its DESTROY event (which has them).
//
// Threads: Open() from any thread; Start()/Close() on the loop thread.
#pragma once

// clang-format off
#include <utility>
// clang-format on

#include <boost/asio.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"

struct nfct_handle;
struct nf_conntrack;

namespace airlock::egress {

struct FlowEnd {
  uint32_t dst = 0;  // IPv4, host order
  uint16_t dport = 0;
  uint8_t proto = 0;
  std::optional<uint64_t> bytes_out, bytes_in;  // guest → destination, back (when accounting is on)
  std::optional<int64_t> duration_ms;           // when timestamps are on
};

// One conntrack event, as the tracker needs it (testable without netlink).
struct CtEvent {
  enum class Kind { kUpdate, kDestroy } kind = Kind::kUpdate;
  uint32_t id = 0;
  uint32_t status = 0;  // IPS_* bits
  uint8_t l3 = 0, proto = 0;
  std::optional<uint8_t> tcp_state;  // TCP_CONNTRACK_*
  uint32_t dst = 0;                  // original direction, host order
  uint16_t dport = 0;
  std::optional<uint64_t> bytes_orig, bytes_reply;
  std::optional<uint64_t> start_ns, stop_ns;  // wall clock
};

// One FlowEnd per flow: at its close (UPDATE to TIME_WAIT/CLOSE) or, when
// none was seen, at its DESTROY. Bounded: at most kMaxFlows closed flows
// remembered (beyond, the memory is cleared: a flow may get a second record).
class FlowEndTracker {
 public:
  static constexpr size_t kMaxFlows = 4096;
  // A FlowEnd when a CIDR-forwarded flow ends; nullopt otherwise.
  std::optional<FlowEnd> OnEvent(const CtEvent& e, uint64_t now_ns);
  size_t pending() const { return ended_.size(); }

 private:
  std::unordered_map<uint32_t, uint64_t> ended_;  // conntrack id → end (wall ns)
};

class FlowEndReader : public std::enable_shared_from_this<FlowEndReader> {
 public:
  using OnFlowEnd = std::function<void(const FlowEnd&)>;
  static StatusOr<std::shared_ptr<FlowEndReader>> Open(const std::string& netns);
  ~FlowEndReader();
  FlowEndReader(const FlowEndReader&) = delete;
  FlowEndReader& operator=(const FlowEndReader&) = delete;
  void Start(boost::asio::io_context& io, OnFlowEnd on_flow_end);
  void Close();  // idempotent
  // Loop thread (the netlink callback): one event.
  void HandleEvent(const CtEvent& e);
  static int Callback(int type, nf_conntrack* ct, void* self);

 private:
  FlowEndReader() = default;
  void Arm();
  void Drain();

  nfct_handle* h_ = nullptr;  // events
  nfct_handle* q_ = nullptr;  // queries (counters at close)
  std::unique_ptr<boost::asio::posix::stream_descriptor> sd_;
  OnFlowEnd on_flow_end_;
  FlowEndTracker tracker_;
  std::vector<char> buf_;
  bool closed_ = false;
};

}  // namespace airlock::egress
