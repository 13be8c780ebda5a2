#include "egress/flow_end_reader.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>

extern "C" {
#include <libnetfilter_conntrack/libnetfilter_conntrack.h>
#include <libnfnetlink/libnfnetlink.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <linux/netfilter/nf_conntrack_tcp.h>
}

#include "common/log.h"
#include "common/netns.h"

namespace airlock::egress {

std::optional<FlowEnd> FlowEndTracker::OnEvent(const CtEvent& e, uint64_t now_ns) {
  // Guest-opened and forwarded as is: masqueraded, not redirected.
  if (e.l3 != AF_INET || e.proto != IPPROTO_TCP) return std::nullopt;
  if (!(e.status & IPS_SRC_NAT) || (e.status & IPS_DST_NAT)) return std::nullopt;
  bool closing = e.tcp_state && (*e.tcp_state == TCP_CONNTRACK_TIME_WAIT || *e.tcp_state == TCP_CONNTRACK_CLOSE);
  if (e.kind == CtEvent::Kind::kUpdate && (!closing || ended_.count(e.id))) return std::nullopt;
  if (e.kind == CtEvent::Kind::kDestroy && ended_.erase(e.id)) return std::nullopt;  // recorded at its close
  if (e.kind == CtEvent::Kind::kUpdate) {
    if (ended_.size() >= kMaxFlows) ended_.clear();  // a guest churning flows may get a second record, never memory
    ended_[e.id] = now_ns;
  }
  FlowEnd f;
  f.dst = e.dst;
  f.dport = e.dport;
  f.proto = e.proto;
  f.bytes_out = e.bytes_orig;
  f.bytes_in = e.bytes_reply;
  uint64_t end = e.kind == CtEvent::Kind::kDestroy ? e.stop_ns.value_or(now_ns) : now_ns;
  if (e.start_ns && end >= *e.start_ns) f.duration_ms = static_cast<int64_t>((end - *e.start_ns) / 1000000);
  return f;
}

namespace {

uint64_t WallNs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

void Fill(CtEvent& e, const nf_conntrack* ct) {
  e.id = nfct_get_attr_u32(ct, ATTR_ID);
  e.status = nfct_attr_is_set(ct, ATTR_STATUS) > 0 ? nfct_get_attr_u32(ct, ATTR_STATUS) : 0;
  e.l3 = nfct_get_attr_u8(ct, ATTR_ORIG_L3PROTO);
  e.proto = nfct_get_attr_u8(ct, ATTR_ORIG_L4PROTO);
  if (nfct_attr_is_set(ct, ATTR_TCP_STATE) > 0) e.tcp_state = nfct_get_attr_u8(ct, ATTR_TCP_STATE);
  if (e.l3 == AF_INET) e.dst = ntohl(nfct_get_attr_u32(ct, ATTR_ORIG_IPV4_DST));
  e.dport = ntohs(nfct_get_attr_u16(ct, ATTR_ORIG_PORT_DST));
  if (nfct_attr_is_set(ct, ATTR_ORIG_COUNTER_BYTES) > 0) e.bytes_orig = nfct_get_attr_u64(ct, ATTR_ORIG_COUNTER_BYTES);
  if (nfct_attr_is_set(ct, ATTR_REPL_COUNTER_BYTES) > 0) e.bytes_reply = nfct_get_attr_u64(ct, ATTR_REPL_COUNTER_BYTES);
  if (nfct_attr_is_set(ct, ATTR_TIMESTAMP_START) > 0) e.start_ns = nfct_get_attr_u64(ct, ATTR_TIMESTAMP_START);
  if (nfct_attr_is_set(ct, ATTR_TIMESTAMP_STOP) > 0) e.stop_ns = nfct_get_attr_u64(ct, ATTR_TIMESTAMP_STOP);
}

// The answer to a GET (counters and start time, which UPDATE events lack).
int QueryCallback(enum nf_conntrack_msg_type, struct nf_conntrack* ct, void* data) {
  auto* e = static_cast<CtEvent*>(data);
  CtEvent q;
  Fill(q, ct);
  e->bytes_orig = q.bytes_orig;
  e->bytes_reply = q.bytes_reply;
  e->start_ns = q.start_ns;
  return NFCT_CB_STOP;
}

}  // namespace

int FlowEndReader::Callback(int type, nf_conntrack* ct, void* data) {
  auto* self = static_cast<FlowEndReader*>(data);
  CtEvent e;
  e.kind = type == NFCT_T_DESTROY ? CtEvent::Kind::kDestroy : CtEvent::Kind::kUpdate;
  Fill(e, ct);
  bool closing = e.tcp_state && (*e.tcp_state == TCP_CONNTRACK_TIME_WAIT || *e.tcp_state == TCP_CONNTRACK_CLOSE);
  if (e.kind == CtEvent::Kind::kUpdate && closing && self->q_ && (e.status & IPS_SRC_NAT) &&
      !(e.status & IPS_DST_NAT)) {
    nfct_callback_register(self->q_, NFCT_T_ALL, &QueryCallback, &e);
    (void)nfct_query(self->q_, NFCT_Q_GET, ct);  // if it fails (entry gone), the record has no counters
    nfct_callback_unregister(self->q_);
  }
  self->HandleEvent(e);
  return NFCT_CB_CONTINUE;
}

namespace {
int CtCallback(enum nf_conntrack_msg_type type, struct nf_conntrack* ct, void* data) {
  return FlowEndReader::Callback(static_cast<int>(type), ct, data);
}
}  // namespace

StatusOr<std::shared_ptr<FlowEndReader>> FlowEndReader::Open(const std::string& netns) {
  std::shared_ptr<FlowEndReader> r(new FlowEndReader());
  Status st = RunInNetns(netns, [&]() -> Status {
    // Per-netns sysctls (this thread's netns): counters and start/stop times.
    for (const char* knob : {"nf_conntrack_acct", "nf_conntrack_timestamp"}) {
      std::ofstream f(std::string("/proc/sys/net/netfilter/") + knob);
      if (!(f << "1")) LOG_WARN("egress: {}: cannot set {}: flow ends lack it", netns, knob);
    }
    r->q_ = nfct_open(CONNTRACK, 0);  // GET requests
    if (r->q_) ::fcntl(nfct_fd(r->q_), F_SETFD, FD_CLOEXEC);
    r->h_ = nfct_open(CONNTRACK, NF_NETLINK_CONNTRACK_UPDATE | NF_NETLINK_CONNTRACK_DESTROY);
    if (!r->h_) return ErrnoError("netlink socket in " + netns);
    int fd = nfct_fd(r->h_);
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    int rcvbuf = 1 << 18;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    nfct_callback_register(r->h_, static_cast<nf_conntrack_msg_type>(NFCT_T_UPDATE | NFCT_T_DESTROY), &CtCallback,
                           r.get());
    return OkStatus();
  });
  if (!st.ok()) return st.WithContext("conntrack events");
  return r;
}

FlowEndReader::~FlowEndReader() { Close(); }

void FlowEndReader::Start(boost::asio::io_context& io, OnFlowEnd on_flow_end) {
  if (closed_ || !h_) return;
  on_flow_end_ = std::move(on_flow_end);
  buf_.resize(1 << 16);
  sd_ = std::make_unique<boost::asio::posix::stream_descriptor>(io, nfct_fd(h_));
  Arm();
}

void FlowEndReader::Close() {
  if (closed_) return;
  closed_ = true;
  if (sd_) {
    boost::system::error_code ignore;
    sd_->cancel(ignore);
    sd_->release();  // closed by nfct_close
    sd_.reset();
  }
  if (h_) nfct_close(h_);
  h_ = nullptr;
  if (q_) nfct_close(q_);
  q_ = nullptr;
}

void FlowEndReader::HandleEvent(const CtEvent& e) {
  if (closed_) return;
  auto f = tracker_.OnEvent(e, WallNs());
  if (f && on_flow_end_) on_flow_end_(*f);
}

void FlowEndReader::Arm() {
  sd_->async_wait(boost::asio::posix::descriptor_base::wait_read,
                  [self = shared_from_this()](const boost::system::error_code& ec) {
                    if (ec || self->closed_) return;
                    self->Drain();
                    if (!self->closed_) self->Arm();
                  });
}

void FlowEndReader::Drain() {
  for (int i = 0; i < 64 && !closed_; ++i) {
    ssize_t n = ::recv(nfct_fd(h_), buf_.data(), buf_.size(), MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == ENOBUFS) continue;  // ENOBUFS: events lost (those flows get no end record)
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      LOG_WARN("egress: conntrack events recv: {}; flow ends stop for this sandbox", std::strerror(errno));
      Close();
      return;
    }
    if (n == 0) return;
    nfnl_process(const_cast<nfnl_handle*>(nfct_nfnlh(h_)), reinterpret_cast<unsigned char*>(buf_.data()),
                 static_cast<size_t>(n));
  }
}

}  // namespace airlock::egress
