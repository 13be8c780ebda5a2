// Volumes (E2B's `Volume`, docs/volumes.md): storage of a team that
// outlives its sandboxes, mounted into any number of them at once.
//
// On the host each volume is its own ext4 filesystem: a sparse image of its
// size limit, <dir>/volumes/<id>/disk.ext4, loop-mounted nodev, nosuid,
// noexec at <dir>/volumes/<id>/fs, where <dir> is the registry's directory
// (the state dir, unless serve --db puts the registry elsewhere: volumes
// belong to the registry that names them) (root owned by the guest's
// `user`, 1000:1000). Being its own filesystem bounds it (ENOSPC in the
// guest, 507 on the content API), keeps hard links inside it, and confines
// the NFS server's file handles to it. The daemon touches its tree only
// through VolumeFs (core/volume_fs.h), which follows no symlink.
//
// Guests reach a volume over NFSv3 (qemu): VolumeServer runs one
// NFS-Ganesha (FSAL_VFS) per sandbox that mounts volumes, in the sandbox's
// own netns on the gateway address 169.254.0.22 (ports 2049 and 20048;
// nothing else on the host listens there, so no other sandbox reaches it),
// exporting exactly that sandbox's volumes. It is a process of its own
// (it outlives a daemon restart like the VMM does), with rpcbind in a
// private mount namespace (/run and /var/lib/nfs are its own tmpfs) and
// only the capabilities file serving needs. A gVisor sandbox gets the
// mount directory as a bind mount (runsc's gofer serves it).
//
// Thread-safety: VolumeStore serialises its own work (one mutex); call it
// on a worker (it runs mkfs, mount, umount).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "core/registry.h"
#include "net/nft_rules.h"

namespace airlock {

// E2B's volume names: 1..63 of [A-Za-z0-9._-], starting with a letter or digit.
bool ValidVolumeName(const std::string& name);

// The guest user that owns a new volume's root and the content API's new
// entries by default.
inline constexpr uint32_t kVolumeDefaultUid = 1000, kVolumeDefaultGid = 1000;

class VolumeStore {
 public:
  struct Options {
    std::string state_dir;           // volumes live in <state_dir>/volumes (the registry's directory)
    int64_t default_size_mib = 1024;  // serve --volume-size-mib
    int64_t max_size_mib = 65536;     // the largest a create may ask for
    int64_t team_budget_mib = 0;      // serve --team-volume-budget-mib: sum of sizes; 0: none
    int64_t max_per_team = 64;        // serve --max-volumes-per-team; 0: none
  };
  VolumeStore(Registry* registry, Options o);

  // A new volume of `team`: InvalidArgument (name, size), AlreadyExists
  // (the team has that name), ResourceExhausted (the team's budget), or the
  // mkfs/mount error. size_mib 0: the default.
  StatusOr<VolumeRecord> Create(const std::string& team, const std::string& name, int64_t size_mib);
  // The team's volume by id or name (admin: any team's, team empty);
  // NotFound for none and for another team's.
  StatusOr<VolumeRecord> Find(const std::string& team, const std::string& id_or_name);
  StatusOr<std::vector<VolumeRecord>> List(const std::string& team);
  // The volume whose token `token` is (the content API's Bearer); NotFound
  // when `id` is none or the token is not its.
  StatusOr<VolumeRecord> Authenticate(const std::string& id, const std::string& token);
  // Removes the row, then unmounts (lazily when busy) and deletes its files.
  // The caller has checked that no sandbox mounts it.
  Status Delete(const VolumeRecord& v);
  // The directory the volume is mounted at, mounting it first if needed
  // (after a host reboot).
  StatusOr<std::string> MountedRoot(const VolumeRecord& v);
  // Deletes volume directories without a row (a create or delete cut short
  // by a kill): called once at start.
  void RemoveOrphans();
  // Makes <state_dir>/volumes a shared mount (a bind of itself) before the
  // first volume is mounted there (so a daemon without volumes leaves no
  // mount behind): the VMM jails and NFS servers copy the host's mounts
  // into namespaces of their own as slaves, and a volume the host unmounts
  // (deleted) then leaves those copies too instead of staying pinned.
  Status ShareMountsLocked();
  // Unmounts every volume (lazily when busy): serve --kill-on-exit, once
  // its sandboxes are gone. The next start mounts them again.
  void UnmountAll();

  std::string VolumeDir(const std::string& id) const;

 private:
  Registry* registry_;
  Options o_;
  std::mutex mu_;
  bool shared_ = false;  // ShareMountsLocked done (guarded by mu_)
};

// One export of a VolumeServer.
struct VolumeExport {
  std::string volume_id;  // the export path is "/<volume_id>"
  std::string host_dir;   // VolumeStore::MountedRoot
};

// The per-sandbox NFS server (see above). Its files: <run_dir>/nfs/
// {ganesha.conf, setup.log, server.pid ("<pid> <start ticks>")}; its log is
// in its own root (/run/ganesha.log, read through /proc/<pid>/root).
//
// Its root (docs/volumes.md "The NFS server's root"): ganesha keeps
// CAP_DAC_READ_SEARCH (FSAL_VFS opens files by handle), and
// open_by_handle_at(2) opens any inode of a file system it holds any fd or
// mount of. So its mount namespace holds no mount of the host's file
// systems: a tmpfs root, the sealed tmpfs of its programs
// (EnsureVolumeServerRoot) bound read-only at /usr, a tmpfs /dev with four
// character devices, its own /proc (a pid namespace of its own), and each
// exported volume's own ext4 at /exports/<volume id>. Its fds 0-2 are that
// root's /dev/null.
using net::kVolumeMountPort;  // 20048
using net::kVolumeNfsPort;    // 2049
inline constexpr char kVolumeServerAddress[] = "169.254.0.22";
// ganesha.conf's text (export paths as the server sees them: /exports/<id>).
std::string GaneshaConfig(const std::vector<VolumeExport>& exports);
// The servers' programs: ganesha.nfsd, its FSAL, rpcbind, dash, setpriv,
// umount, sleep and the libraries they load (ldd), /etc/{netconfig,passwd,
// group} (root and _rpc only), copied into a tmpfs mounted at `dir` and
// made read-only; kept while its stamp (the programs' sizes and mtimes)
// holds. Made once per host and shared by every server.
Status EnsureVolumeServerRoot(const std::string& dir);
// Starts the server in the netns `netns_fd` unless one recorded in run_dir
// still runs, with EnsureVolumeServerRoot(server_root); returns when it
// listens (within 20 s) or with its log's tail.
Status StartVolumeServer(const std::string& run_dir, int netns_fd, const std::vector<VolumeExport>& exports,
                         const std::string& server_root);
// Ends the recorded server (its process group), if any. Idempotent. With
// `netns_fd` (a netns that lives on, a rollback's), its TCP sockets there
// are destroyed too (`ss -K`): an orphan left closing would answer the
// restored guest's old connection with ACKs forever instead of a reset.
Status StopVolumeServer(const std::string& run_dir, int netns_fd = -1);
bool VolumeServerRunning(const std::string& run_dir);

// Whether `dir` is a mount point (the volume's filesystem is mounted there).
bool IsVolumeMounted(const std::string& dir);

}  // namespace airlock
