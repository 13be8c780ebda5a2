#include "egress/nflog_reader.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

extern "C" {
#include <libnetfilter_log/libnetfilter_log.h>
}

#include "common/log.h"
#include "common/netns.h"
#include "egress/egress_internal.h"
#include "egress/nflog_packet.h"

namespace airlock::egress {

StatusOr<std::shared_ptr<NflogReader>> NflogReader::Open(const std::string& netns, uint16_t group) {
  std::shared_ptr<NflogReader> r(new NflogReader());
  r->netns_ = netns;
  // The socket is created in the sandbox netns.
  Status st = RunInNetns(netns, [&]() -> Status {
    r->h_ = nflog_open();
    if (!r->h_) return ErrnoError("netlink socket in " + netns);
    int fd = nflog_fd(r->h_);
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    int rcvbuf = 1 << 18;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    r->gh_ = nflog_bind_group(r->h_, group);
    if (!r->gh_) return ErrnoError("bind group " + std::to_string(group) + " in " + netns);
    if (nflog_set_mode(r->gh_, NFULNL_COPY_PACKET, kNflogCopyBytes) < 0)
      return ErrnoError("copy mode in " + netns);
    // One message per packet (no batching delay); sequence numbers reveal losses.
    if (nflog_set_qthresh(r->gh_, 1) < 0 || nflog_set_flags(r->gh_, NFULNL_CFG_F_SEQ) < 0)
      return ErrnoError("configure group in " + netns);
    nflog_callback_register(r->gh_, &NflogReader::Callback, r.get());
    return OkStatus();
  });
  if (!st.ok()) return st.WithContext("nflog");  // ~NflogReader closes what was opened
  auto flows = FlowEndReader::Open(netns);
  if (flows.ok())
    r->flows_ = std::move(*flows);
  else
    LOG_WARN("egress: {}: no flow-end records for CIDR connections: {}", netns, flows.status().ToString());
  return r;
}

NflogReader::~NflogReader() { Close(); }

void NflogReader::Start(boost::asio::io_context& io, OnPacket on_packet, OnLost on_lost,
                        FlowEndReader::OnFlowEnd on_flow_end) {
  if (closed_ || !h_) return;
  if (flows_ && on_flow_end) flows_->Start(io, std::move(on_flow_end));
  on_packet_ = std::move(on_packet);
  on_lost_ = std::move(on_lost);
  buf_.resize(1 << 16);
  sd_ = std::make_unique<boost::asio::posix::stream_descriptor>(io, nflog_fd(h_));
  Arm();
}

void NflogReader::Close() {
  if (closed_) return;
  closed_ = true;
  if (flows_) flows_->Close();
  if (sd_) {
    boost::system::error_code ignore;
    sd_->cancel(ignore);
    sd_->release();  // the fd is nflog's: closed by nflog_close
    sd_.reset();     // while the io_context lives (a cancelled wait is already queued apart)
  }
  if (gh_) nflog_unbind_group(gh_);
  gh_ = nullptr;
  if (h_) nflog_close(h_);
  h_ = nullptr;
}

void NflogReader::Arm() {
  sd_->async_wait(boost::asio::posix::descriptor_base::wait_read,
                  [self = shared_from_this()](const boost::system::error_code& ec) {
                    if (ec || self->closed_) return;
                    self->Drain();
                    if (!self->closed_) self->Arm();
                  });
}

void NflogReader::Drain() {
  // At most 64 messages per wake-up: other sandboxes' work interleaves.
  for (int i = 0; i < 64 && !closed_; ++i) {
    ssize_t n = ::recv(nflog_fd(h_), buf_.data(), buf_.size(), MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == ENOBUFS) continue;  // the kernel dropped messages; the next sequence number says how many
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      LOG_WARN("egress: nflog recv in {}: {}; L3 audit stops for this sandbox", netns_, std::strerror(errno));
      Close();
      return;
    }
    if (n == 0) return;
    nflog_handle_packet(h_, buf_.data(), static_cast<int>(n));
  }
}

int NflogReader::Callback(nflog_g_handle*, nfgenmsg*, nflog_data* nfa, void* data) {
  auto* self = static_cast<NflogReader*>(data);
  if (self->closed_) return 0;
  ++self->received_;
  uint32_t seq = 0;
  if (nflog_get_seq(nfa, &seq) == 0) {
    if (self->have_seq_ && seq != self->next_seq_ && self->on_lost_) self->on_lost_(seq - self->next_seq_);
    self->have_seq_ = true;
    self->next_seq_ = seq + 1;
  }
  const char* prefix = nflog_get_prefix(nfa);
  std::string_view pv = prefix ? std::string_view(prefix, ::strnlen(prefix, 128)) : std::string_view();
  char* payload = nullptr;
  int len = nflog_get_payload(nfa, &payload);
  if (len < 0 || !payload) len = 0;
  if (self->on_packet_) self->on_packet_(pv, reinterpret_cast<const uint8_t*>(payload), static_cast<size_t>(len));
  return 0;
}

// ---- EgressService side -----------------------------------------------------

void EgressService::Impl::StartNflog(std::shared_ptr<SandboxEgress> sb, std::shared_ptr<NflogReader> reader) {
  sb->nflog = reader;
  std::weak_ptr<SandboxEgress> weak = sb;
  auto retries = std::make_shared<SynRetryFilter>();
  reader->Start(
      io,
      [this, weak, retries](std::string_view prefix, const uint8_t* data, size_t size) {
        auto s = weak.lock();
        if (!s || s->closed) return;
        auto pre = ParseNflogPrefix(prefix);
        auto pkt = ParseL3Packet(data, size);
        if (pre && pkt.ok() && retries->IsRetry(*pkt, pre->rule, SynRetryFilter::Clock::now())) return;
        auto rec = NflogToRecord(prefix, data, size);
        if (rec) Emit(*s, std::move(*rec));
      },
      [this, weak](uint64_t lost) {
        auto s = weak.lock();
        if (!s || s->closed) return;
        std::lock_guard<std::mutex> lock(records_mu);
        s->suppressed += static_cast<int64_t>(lost);
      },
      [this, weak](const FlowEnd& f) {
        auto s = weak.lock();
        if (!s || s->closed) return;
        Decision d = s->policy->CheckAddress(f.dst, f.dport);
        nlohmann::json rec = {{"protocol", "tcp"},
                              {"decision", "allow"},
                              {"rule", d.allowed ? d.rule : "removed-since"},
                              {"reason", "connection closed (forwarded by an allowed CIDR rule)"},
                              {"source", "conntrack"},
                              {"destination", {{"name", ""}, {"ip", Ipv4ToString(f.dst)}, {"port", f.dport}}}};
        if (f.bytes_out && f.bytes_in) {
          rec["bytesOut"] = *f.bytes_out;  // IP bytes, guest → destination
          rec["bytesIn"] = *f.bytes_in;
        }
        if (f.duration_ms) rec["durationMs"] = *f.duration_ms;
        Emit(*s, std::move(rec));
      });
}

}  // namespace airlock::egress
