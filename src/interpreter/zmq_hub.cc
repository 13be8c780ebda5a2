#include "interpreter/zmq_hub.h"

#include <signal.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <map>
#include <zmq.hpp>

namespace airlock::interpreter {

struct ZmqHub::Impl {
  zmq::context_t ctx{1};
  struct Sockets {
    ConnectionInfo info;
    zmq::socket_t shell, control, iopub;
    std::string counted_parent;  // output bytes of this request so far
    size_t counted = 0;
    UniqueFd pidfd;
    bool interrupted = false;  // counted_parent was SIGINTed
  };
  std::map<uint64_t, Sockets> kernels;
};

ZmqHub::ZmqHub(OnMessage on_message, OnDropped on_dropped, size_t max_content)
    : on_message_(std::move(on_message)),
      on_dropped_(std::move(on_dropped)),
      max_content_(max_content),
      impl_(std::make_unique<Impl>()) {}

ZmqHub::~ZmqHub() { Stop(); }

Status ZmqHub::Start() {
  wake_.Reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_) return ErrnoError("eventfd");
  thread_ = std::thread([this] { Run(); });
  return OkStatus();
}

void ZmqHub::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (wake_) {
    uint64_t one = 1;
    ssize_t ignored = ::write(wake_.get(), &one, sizeof one);
    (void)ignored;
  }
  if (thread_.joinable()) thread_.join();
}

void ZmqHub::Push(Command c) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return;
    commands_.push_back(std::move(c));
  }
  uint64_t one = 1;
  ssize_t ignored = ::write(wake_.get(), &one, sizeof one);
  (void)ignored;
}

void ZmqHub::Add(uint64_t id, const ConnectionInfo& info, UniqueFd pidfd) {
  Command c;
  c.kind = Command::kAdd;
  c.id = id;
  c.info = info;
  c.pidfd = std::move(pidfd);
  Push(std::move(c));
}

void ZmqHub::Send(uint64_t id, Channel channel, std::vector<std::string> frames) {
  Command c;
  c.kind = Command::kSend;
  c.id = id;
  c.channel = channel;
  c.frames = std::move(frames);
  Push(std::move(c));
}

void ZmqHub::Remove(uint64_t id) {
  Command c;
  c.kind = Command::kRemove;
  c.id = id;
  Push(std::move(c));
}

void ZmqHub::Run() {
  auto& k = impl_->kernels;
  std::vector<zmq::pollitem_t> items;
  std::vector<std::pair<uint64_t, Channel>> owners;
  while (true) {
    std::deque<Command> cmds;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stopping_) break;
      cmds.swap(commands_);
    }
    for (auto& c : cmds) {
      try {
        if (c.kind == Command::kAdd) {
          Impl::Sockets s{c.info, zmq::socket_t(impl_->ctx, zmq::socket_type::dealer),
                          zmq::socket_t(impl_->ctx, zmq::socket_type::dealer),
                          zmq::socket_t(impl_->ctx, zmq::socket_type::sub), std::string(), 0,
                          std::move(c.pidfd), false};
          for (auto* sock : {&s.shell, &s.control, &s.iopub}) sock->set(zmq::sockopt::linger, 0);
          s.iopub.set(zmq::sockopt::rcvhwm, 0);
          s.iopub.set(zmq::sockopt::subscribe, "");
          s.shell.connect(c.info.Endpoint(c.info.shell_port));
          s.control.connect(c.info.Endpoint(c.info.control_port));
          s.iopub.connect(c.info.Endpoint(c.info.iopub_port));
          k.erase(c.id);
          k.emplace(c.id, std::move(s));
        } else if (c.kind == Command::kRemove) {
          k.erase(c.id);
        } else {
          auto it = k.find(c.id);
          if (it == k.end()) continue;
          zmq::socket_t& sock = c.channel == Channel::kControl ? it->second.control : it->second.shell;
          for (size_t i = 0; i < c.frames.size(); ++i) {
            auto flags = i + 1 < c.frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
            (void)sock.send(zmq::buffer(c.frames[i]), flags | zmq::send_flags::dontwait);
          }
        }
      } catch (const zmq::error_t& e) {
        if (on_dropped_) on_dropped_(c.id, Internal(std::string("zmq: ") + e.what()));
      }
    }
    items.clear();
    owners.clear();
    items.push_back(zmq::pollitem_t{nullptr, wake_.get(), ZMQ_POLLIN, 0});
    owners.emplace_back(0, Channel::kShell);
    for (auto& [id, s] : k) {
      for (auto [sock, ch] : {std::pair{&s.shell, Channel::kShell}, std::pair{&s.control, Channel::kControl},
                              std::pair{&s.iopub, Channel::kIopub}}) {
        items.push_back(zmq::pollitem_t{sock->handle(), 0, ZMQ_POLLIN, 0});
        owners.emplace_back(id, ch);
      }
    }
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(-1));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      throw;
    }
    if (items[0].revents & ZMQ_POLLIN) {
      uint64_t v;
      ssize_t ignored = ::read(wake_.get(), &v, sizeof v);
      (void)ignored;
    }
    for (size_t i = 1; i < items.size(); ++i) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      auto [id, ch] = owners[i];
      auto it = k.find(id);
      if (it == k.end()) continue;
      zmq::socket_t& sock = ch == Channel::kShell ? it->second.shell
                            : ch == Channel::kControl ? it->second.control
                                                      : it->second.iopub;
      // Everything that is there now, then poll again (commands first).
      for (int n = 0; n < 256; ++n) {
        std::vector<zmq::message_t> parts;
        try {
          zmq::message_t part;
          if (!sock.recv(part, zmq::recv_flags::dontwait)) break;
          parts.push_back(std::move(part));
          while (parts.back().more()) {
            zmq::message_t more;
            if (!sock.recv(more, zmq::recv_flags::none)) break;
            parts.push_back(std::move(more));
          }
        } catch (const zmq::error_t& e) {
          break;
        }
        std::vector<std::string_view> frames;
        frames.reserve(parts.size());
        for (auto& p : parts) frames.emplace_back(static_cast<const char*>(p.data()), p.size());
        Impl::Sockets& ks = it->second;
        auto m = ParseMessage(ks.info.key, frames, [&](const KernelMessage& head, size_t bytes) {
          std::string type = head.msg_type();
          if (type != "stream" && type != "display_data" && type != "execute_result" && type != "error") {
            return bytes <= max_content_;
          }
          std::string parent = head.parent_id();
          if (parent != ks.counted_parent) {
            ks.counted_parent = parent;
            ks.counted = 0;
            ks.interrupted = false;
          }
          ks.counted += bytes;
          if (ks.counted <= max_content_) return true;
          if (!ks.interrupted && ks.pidfd) {
            ks.interrupted = true;
            ::syscall(SYS_pidfd_send_signal, ks.pidfd.get(), SIGINT, nullptr, 0);
          }
          return false;
        });
        if (!m.ok()) {
          dropped_.fetch_add(1);
          if (on_dropped_) on_dropped_(id, m.status());
          continue;
        }
        on_message_(id, ch, std::move(m).value());
      }
    }
  }
  k.clear();
}

}  // namespace airlock::interpreter
