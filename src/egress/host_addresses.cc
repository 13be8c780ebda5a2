#include "egress/host_addresses.h"

#include <arpa/inet.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace airlock::egress {

namespace {

StatusOr<UniqueFd> NetlinkSocket(uint32_t groups) {
  UniqueFd s(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | (groups ? SOCK_NONBLOCK : 0), NETLINK_ROUTE));
  if (!s) return ErrnoError("socket(NETLINK_ROUTE)");
  sockaddr_nl a{};
  a.nl_family = AF_NETLINK;
  a.nl_groups = groups;
  if (::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return ErrnoError("bind(NETLINK_ROUTE)");
  if (!groups) {
    timeval tv{2, 0};  // the kernel answers at once; never hang a decision
    ::setsockopt(s.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  return s;
}

// Sends `req` (its nlmsg_len set) and calls `each` for every reply message
// with this sequence number until NLMSG_DONE or, for a non-dump, the first
// reply. Returns the kernel's error as a negative errno in `*nl_error`.
template <typename F>
Status Transact(int fd, nlmsghdr* req, bool dump, int* nl_error, F&& each) {
  *nl_error = 0;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(fd, req, req->nlmsg_len, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) < 0)
    return ErrnoError("netlink send");
  alignas(nlmsghdr) static thread_local char buf[32768];
  while (true) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("netlink receive");
    }
    int len = static_cast<int>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
      if (h->nlmsg_seq != req->nlmsg_seq) continue;  // a stale answer
      if (h->nlmsg_type == NLMSG_DONE) return OkStatus();
      if (h->nlmsg_type == NLMSG_ERROR) {
        auto* e = static_cast<nlmsgerr*>(NLMSG_DATA(h));
        *nl_error = e->error;
        return OkStatus();
      }
      each(h);
      if (!dump) return OkStatus();
    }
  }
}

}  // namespace

StatusOr<std::unique_ptr<HostAddresses>> HostAddresses::Open(std::vector<Cidr> extra) {
  std::unique_ptr<HostAddresses> h(new HostAddresses());
  h->extra_ = std::move(extra);
  ASSIGN_OR_RETURN(h->events_, NetlinkSocket(RTMGRP_IPV4_IFADDR));
  ASSIGN_OR_RETURN(h->query_, NetlinkSocket(0));
  std::lock_guard<std::mutex> l(h->mu_);
  ASSIGN_OR_RETURN(h->addresses_, h->Dump());
  return h;
}

StatusOr<std::vector<uint32_t>> HostAddresses::Dump() {
  struct {
    nlmsghdr h;
    ifaddrmsg m;
  } req{};
  req.h.nlmsg_len = NLMSG_LENGTH(sizeof(ifaddrmsg));
  req.h.nlmsg_type = RTM_GETADDR;
  req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  req.h.nlmsg_seq = ++seq_;
  req.m.ifa_family = AF_INET;
  std::vector<uint32_t> out;
  int err = 0;
  RETURN_IF_ERROR(Transact(query_.get(), &req.h, true, &err, [&](nlmsghdr* h) {
    if (h->nlmsg_type != RTM_NEWADDR) return;
    auto* ifa = static_cast<ifaddrmsg*>(NLMSG_DATA(h));
    if (ifa->ifa_family != AF_INET) return;
    int alen = static_cast<int>(IFA_PAYLOAD(h));
    for (auto* rta = IFA_RTA(ifa); RTA_OK(rta, alen); rta = RTA_NEXT(rta, alen)) {
      // IFA_LOCAL is the interface's own address (IFA_ADDRESS is the peer's
      // on point-to-point links); both are recorded: either is reachable here.
      if ((rta->rta_type == IFA_LOCAL || rta->rta_type == IFA_ADDRESS) && RTA_PAYLOAD(rta) == 4) {
        uint32_t be;
        std::memcpy(&be, RTA_DATA(rta), 4);
        out.push_back(ntohl(be));
      }
    }
  }));
  if (err != 0) return ErrnoError("RTM_GETADDR dump", -err);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

StatusOr<bool> HostAddresses::RoutesLocally(uint32_t ip) {
  struct {
    nlmsghdr h;
    rtmsg m;
    rtattr a;
    uint32_t dst;
  } req{};
  req.h.nlmsg_len = NLMSG_LENGTH(sizeof(rtmsg)) + RTA_LENGTH(4);
  req.h.nlmsg_type = RTM_GETROUTE;
  req.h.nlmsg_flags = NLM_F_REQUEST;
  req.h.nlmsg_seq = ++seq_;
  req.m.rtm_family = AF_INET;
  req.m.rtm_dst_len = 32;
  req.a.rta_type = RTA_DST;
  req.a.rta_len = RTA_LENGTH(4);
  req.dst = htonl(ip);
  int type = -1, err = 0;
  RETURN_IF_ERROR(Transact(query_.get(), &req.h, false, &err, [&](nlmsghdr* h) {
    if (h->nlmsg_type == RTM_NEWROUTE) type = static_cast<rtmsg*>(NLMSG_DATA(h))->rtm_type;
  }));
  if (err == -ENETUNREACH || err == -EHOSTUNREACH) return false;  // no route: not ours either
  if (err != 0) return ErrnoError("RTM_GETROUTE", -err);
  if (type < 0) return Internal("RTM_GETROUTE: no answer");
  return type == RTN_LOCAL || type == RTN_BROADCAST;
}

bool HostAddresses::IsHostAddress(uint32_t ip) {
  for (const auto& c : extra_)
    if (c.Contains(ip)) return true;
  std::lock_guard<std::mutex> l(mu_);
  if (std::binary_search(addresses_.begin(), addresses_.end(), ip)) return true;
  auto local = RoutesLocally(ip);
  return !local.ok() || *local;
}

std::vector<uint32_t> HostAddresses::Addresses() const {
  std::lock_guard<std::mutex> l(mu_);
  return addresses_;
}

uint64_t HostAddresses::generation() const {
  std::lock_guard<std::mutex> l(mu_);
  return generation_;
}

bool HostAddresses::Refresh() {
  bool any = false;
  alignas(nlmsghdr) char buf[8192];
  while (true) {
    ssize_t n = ::recv(events_.get(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      any = true;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == ENOBUFS) {  // events lost: dump anyway
      any = true;
      continue;
    }
    break;
  }
  if (!any) return false;
  std::lock_guard<std::mutex> l(mu_);
  auto now = Dump();
  if (!now.ok() || *now == addresses_) return false;  // a failed dump keeps the last set (route lookups still apply)
  addresses_ = std::move(*now);
  ++generation_;
  return true;
}

}  // namespace airlock::egress
