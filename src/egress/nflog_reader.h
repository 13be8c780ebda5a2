// NflogReader: the packets a sandbox netns's nftables ruleset logs to NFLOG
// (src/net/nft_rules.h "Audit of L3 decisions"), read on the egress
// service's event loop. libnetfilter_log speaks the netlink protocol; the
// packet bytes are parsed by nflog_packet.h.
//
// A netlink socket belongs to the netns it was created in: Open() creates it
// on a short-lived thread that setns()es into /run/netns/<netns>, binds the
// group there (copy mode: the first kNflogCopyBytes bytes of each packet,
// one message per packet, sequence numbers on) and returns. Start() hands
// the fd to the loop (posix::stream_descriptor); callbacks run there.
// Messages lost in the kernel (socket buffer overflow) are detected from
// gaps in the sequence numbers and reported through on_lost.
//
// Errors: Open() → InvalidArgument (bad netns name), the failing call with
// errno otherwise (no such netns, group already bound, no NFLOG support).
// Threads: Open() from any thread; Start()/Close() on the loop thread.
#pragma once

// clang-format off
#include <utility>
// clang-format on

#include <boost/asio.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "egress/flow_end_reader.h"

struct nflog_handle;
struct nflog_g_handle;
struct nflog_data;
struct nfgenmsg;

namespace airlock::egress {

inline constexpr uint16_t kNflogGroup = 7;  // == net::kNftLogGroup (static_assert in core/sandbox_egress.cc)
inline constexpr uint32_t kNflogCopyBytes = 160;

class NflogReader : public std::enable_shared_from_this<NflogReader> {
 public:
  using OnPacket = std::function<void(std::string_view prefix, const uint8_t* data, size_t size)>;
  using OnLost = std::function<void(uint64_t messages)>;

  static StatusOr<std::shared_ptr<NflogReader>> Open(const std::string& netns, uint16_t group = kNflogGroup);
  ~NflogReader();
  NflogReader(const NflogReader&) = delete;
  NflogReader& operator=(const NflogReader&) = delete;

  // on_flow_end: the end of each CIDR-forwarded connection (flow_end_reader.h),
  // when its conntrack event socket could be opened too.
  void Start(boost::asio::io_context& io, OnPacket on_packet, OnLost on_lost,
             FlowEndReader::OnFlowEnd on_flow_end = nullptr);
  // Stops reading, unbinds the group, closes the socket. Idempotent.
  void Close();
  const std::string& netns() const { return netns_; }
  uint64_t received() const { return received_; }

 private:
  NflogReader() = default;
  static int Callback(nflog_g_handle* gh, nfgenmsg* msg, nflog_data* nfa, void* self);
  void Arm();
  void Drain();

  std::string netns_;
  nflog_handle* h_ = nullptr;
  nflog_g_handle* gh_ = nullptr;
  std::unique_ptr<boost::asio::posix::stream_descriptor> sd_;
  std::shared_ptr<FlowEndReader> flows_;  // null: no flow-end records (warning logged)
  OnPacket on_packet_;
  OnLost on_lost_;
  std::vector<char> buf_;
  bool have_seq_ = false;
  uint32_t next_seq_ = 0;
  uint64_t received_ = 0;
  bool closed_ = false;
};

}  // namespace airlock::egress
