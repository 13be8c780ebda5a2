#include "net/address_pool.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "common/fd.h"
#include "common/file_util.h"
#include "net/names.h"

namespace airlock::net {
namespace {

Status MkdirP(const std::string& path, mode_t mode) {
  std::string cur;
  std::stringstream ss(path);
  std::string part;
  if (!path.empty() && path[0] == '/') cur = "";
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    cur += "/" + part;
    if (::mkdir(cur.c_str(), mode) != 0 && errno != EEXIST) return ErrnoError("mkdir " + cur);
  }
  return OkStatus();
}

// Exclusive flock on <dir>/.lock for the lifetime of the object.
class DirLock {
 public:
  static StatusOr<DirLock> Take(const std::string& dir) {
    std::string p = dir + "/.lock";
    UniqueFd fd(::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (!fd) return ErrnoError("open " + p);
    while (::flock(fd.get(), LOCK_EX) != 0) {
      if (errno != EINTR) return ErrnoError("flock " + p);
    }
    return DirLock(std::move(fd));
  }

 private:
  explicit DirLock(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;  // closing releases the lock
};

std::string OwnerText(const std::string& id, const std::string& registry, pid_t pid = ::getpid()) {
  return "sandbox=" + id + "\npid=" + std::to_string(pid) + "\nstart=" + std::to_string(ProcessStartTicks(pid)) +
         "\n" + (registry.empty() ? "" : "registry=" + registry + "\n");
}

LeaseOwner ParseOwner(const std::string& text) {
  LeaseOwner o;
  std::stringstream ss(text);
  std::string line;
  while (std::getline(ss, line)) {
    auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string k = line.substr(0, eq), v = line.substr(eq + 1);
    try {
      if (k == "sandbox") o.sandbox_id = v;
      else if (k == "pid") o.pid = static_cast<pid_t>(std::stol(v));
      else if (k == "start") o.start_ticks = std::stoull(v);
      else if (k == "registry") o.registry = v;
    } catch (...) {
      // Malformed field: leave the default; such a lease counts as orphaned.
    }
  }
  return o;
}

// The owner a lease file names; nullopt when the file cannot be opened.
std::optional<LeaseOwner> ReadOwner(const std::string& path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  return ParseOwner(std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()));
}

}  // namespace

std::string Ipv4ToString(uint32_t addr) {
  in_addr a{htonl(addr)};
  char buf[INET_ADDRSTRLEN];
  ::inet_ntop(AF_INET, &a, buf, sizeof(buf));
  return buf;
}

StatusOr<uint32_t> ParseIpv4(const std::string& s) {
  in_addr a{};
  if (::inet_pton(AF_INET, s.c_str(), &a) != 1) return InvalidArgument("bad IPv4 address '" + s + "'");
  return ntohl(a.s_addr);
}

StatusOr<Cidr> Cidr::Parse(const std::string& s) {
  auto slash = s.find('/');
  if (slash == std::string::npos) return InvalidArgument("CIDR '" + s + "' has no /prefix");
  ASSIGN_OR_RETURN(uint32_t base, ParseIpv4(s.substr(0, slash)));
  int prefix = 0;
  try {
    size_t used = 0;
    prefix = std::stoi(s.substr(slash + 1), &used);
    if (used != s.size() - slash - 1) throw std::invalid_argument("trailing");
  } catch (...) {
    return InvalidArgument("CIDR '" + s + "': bad prefix");
  }
  if (prefix < 1 || prefix > 31) return InvalidArgument("CIDR '" + s + "': prefix must be 1..31");
  uint32_t mask = prefix == 0 ? 0 : ~uint32_t{0} << (32 - prefix);
  return Cidr{base & mask, prefix};
}


bool AddressPool::OwnerAlive(const LeaseOwner& o) {
  if (o.pid <= 0) return false;
  if (::kill(o.pid, 0) != 0 && errno == ESRCH) return false;
  unsigned long long st = ProcessStartTicks(o.pid);
  return st != 0 && st == o.start_ticks;
}

StatusOr<AddressPool> AddressPool::Create(const std::string& root, const std::string& cidr, const std::string& owner) {
  ASSIGN_OR_RETURN(Cidr c, Cidr::Parse(cidr));
  std::string dir = root + "/net/leases";
  RETURN_IF_ERROR(MkdirP(dir, 0700));
  return AddressPool(dir, c, owner);
}

StatusOr<std::vector<std::pair<AddressLease, LeaseOwner>>> AddressPool::ListLocked() {
  std::vector<std::pair<AddressLease, LeaseOwner>> out;
  DIR* d = ::opendir(dir_.c_str());
  if (!d) return ErrnoError("opendir " + dir_);
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.empty() || name[0] == '.') continue;
    auto ip = ParseIpv4(name);
    if (!ip.ok()) continue;
    LeaseOwner o = ReadOwner(dir_ + "/" + name).value_or(LeaseOwner{});
    AddressLease l{o.sandbox_id, *ip, *ip + 1, dir_ + "/" + name};
    out.emplace_back(std::move(l), o);
  }
  ::closedir(d);
  return out;
}

StatusOr<std::vector<std::pair<AddressLease, LeaseOwner>>> AddressPool::List() {
  ASSIGN_OR_RETURN(DirLock lock, DirLock::Take(dir_));
  return ListLocked();
}

StatusOr<std::vector<std::string>> AddressPool::ReclaimLocked() {
  ASSIGN_OR_RETURN(auto leases, ListLocked());
  std::vector<std::string> reclaimed;
  for (const auto& [l, o] : leases) {
    bool netns_exists = !o.sandbox_id.empty() && NetnsExists(NetnsName(o.sandbox_id));
    if (netns_exists || OwnerAlive(o)) continue;
    if (::unlink(l.path.c_str()) != 0 && errno != ENOENT) return ErrnoError("unlink " + l.path);
    reclaimed.push_back(o.sandbox_id);
  }
  return reclaimed;
}

StatusOr<std::vector<std::string>> AddressPool::Reclaim() {
  ASSIGN_OR_RETURN(DirLock lock, DirLock::Take(dir_));
  return ReclaimLocked();
}

StatusOr<AddressLease> AddressPool::Acquire(const std::string& sandbox_id) {
  RETURN_IF_ERROR(ValidateSandboxId(sandbox_id));
  ASSIGN_OR_RETURN(DirLock lock, DirLock::Take(dir_));
  for (int attempt = 0; attempt < 2; ++attempt) {
    ASSIGN_OR_RETURN(auto leases, ListLocked());
    std::set<uint32_t> taken;
    for (const auto& [l, o] : leases) {
      if (o.sandbox_id == sandbox_id) return AlreadyExists("sandbox " + sandbox_id + " already holds lease " + l.path);
      taken.insert(l.host_ip);
    }
    for (uint64_t off = 0; off + 1 < cidr_.size(); off += 2) {
      uint32_t even = cidr_.base + static_cast<uint32_t>(off);
      if (taken.count(even)) continue;
      std::string path = dir_ + "/" + Ipv4ToString(even);
      UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
      if (!fd) {
        if (errno == EEXIST) continue;  // written by a process that ignores the lock
        return ErrnoError("create lease " + path);
      }
      Status st = WriteAll(fd.get(), OwnerText(sandbox_id, owner_), path);
      if (!st.ok()) {
        ::unlink(path.c_str());
        return st;
      }
      return AddressLease{sandbox_id, even, even + 1, path};
    }
    if (attempt == 0) {
      ASSIGN_OR_RETURN(auto reclaimed, ReclaimLocked());
      if (reclaimed.empty()) break;
    }
  }
  return ResourceExhausted("address pool " + Ipv4ToString(cidr_.base) + "/" + std::to_string(cidr_.prefix) +
                           " is full");
}

StatusOr<std::optional<AddressLease>> AddressPool::Find(const std::string& sandbox_id) {
  ASSIGN_OR_RETURN(auto leases, List());
  for (auto& [l, o] : leases) {
    if (o.sandbox_id == sandbox_id) return std::optional<AddressLease>(l);
  }
  return std::optional<AddressLease>();
}

Status AddressPool::Adopt(const AddressLease& lease, pid_t owner) {
  ASSIGN_OR_RETURN(DirLock lock, DirLock::Take(dir_));
  // Only a lease that is still this sandbox's: one another process reclaimed
  // (its address may be another sandbox's by now) is never written back.
  const std::optional<LeaseOwner> now = ReadOwner(lease.path);
  if (!now) return NotFound("lease " + lease.path + " of sandbox " + lease.sandbox_id + " is gone");
  if (now->sandbox_id != lease.sandbox_id)
    return NotFound("lease " + lease.path + " is no longer sandbox " + lease.sandbox_id + "'s");
  return WriteFileAtomic(lease.path, OwnerText(lease.sandbox_id, owner_, owner > 0 ? owner : ::getpid()), 0600);
}

Status AddressPool::Release(const AddressLease& lease) {
  ASSIGN_OR_RETURN(DirLock lock, DirLock::Take(dir_));
  if (::unlink(lease.path.c_str()) != 0 && errno != ENOENT) return ErrnoError("unlink " + lease.path);
  return OkStatus();
}

}  // namespace airlock::net
