// OCI images as bases of custom template builds (fromImage(ref), shared/spec/
// e2b-templates.md §A.5, §A.6 step 1, §A.10; docs/templates.md "OCI bases").
//
// EnsureOciBase pulls an image with Debian's skopeo, unpacks it with umoci,
// adds what airlock's initramfs and agent need, writes it as an ext4 rootfs
// and installs it as a guest image that Manager::Create can cold boot:
//
//   skopeo inspect docker://REF      the manifest digest (and errors: a
//                                    reference that cannot be pulled fails
//                                    here, before anything is written)
//     ─▶ cached? the image "oci-<key>" is installed and its config is kept
//        beside it (images/oci/<key>.json): nothing more is done
//     ─▶ skopeo copy docker://NAME@DIGEST oci:<work>/layout:img
//        (pinned to the digest inspected: a tag moved in between is not mixed in)
//     ─▶ the layers' unpacked size, from their tar headers, against
//        max_unpacked_bytes (layer_size.h)
//     ─▶ umoci raw unpack (--rootless when not root) ─▶ <work>/base/root
//     ─▶ the agent's files: /sbin/airlock-agent (the stripped copy the `base`
//        image gets, GuestAgentCopy), /etc/airlock/rootfs-id, /etc/hostname,
//        /etc/hosts, an empty /etc/resolv.conf (the agent writes the
//        sandbox's), the mount points /proc /sys /dev /tmp /run
//     ─▶ mkfs.ext4 -d with ~2 GiB free (as `base`), installed with
//        InstallBuiltImage under the name "oci-<key>" (kernel and initramfs
//        of the current `base` image).
//
// <key> = 20 hex digits of a hash of kOciFormatVersion, the image builder's
// version, the manifest digest and the SHA-256 of the agent as installed: the
// same image and agent reuse the installed image, by any daemon on the state
// dir. Images are never removed by this module (template layers are backed
// by their rootfs).
//
// Network: skopeo runs on the host (like apt for `base`), with TLS verified
// except for the registries named in `insecure_registries` (HOST[:PORT], as
// the reference writes them: serve --insecure-registry), for which plain
// HTTP or an unverified certificate is accepted. Credentials are skopeo's
// --src-creds (they are on skopeo's command line for the pull).
//
// Errors (the message is meant for the build's reason):
//   InvalidArgument     a malformed reference; registry type other than
//                       "registry" is refused by the caller (builder)
//   FailedPrecondition  skopeo/umoci missing; the image cannot be pulled
//                       ("cannot pull image 'REF': <skopeo's error, trimmed>");
//                       an image whose tree has no usable /sbin or /etc
//   ResourceExhausted   the layers expand to more than max_unpacked_bytes
//   DataLoss            a layer that is not a tar (or corrupt gzip/zstd)
//   other codes         failed tools (umoci, mkfs.ext4), with the command and
//                       the tail of its log; errno statuses with the path.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace airlock::image {

// Bumped whenever what EnsureOciBase adds to an image's tree changes: part of
// the image key and of the builder's base hash (OciBaseVersion).
inline constexpr char kOciFormatVersion[] = "1";

struct OciCredentials {
  std::string username, password;
};

struct OciPullOptions {
  std::string state_dir;  // images under <state_dir>/images
  std::string ref;        // as written: [HOST[:PORT]/]NAME[:TAG][@sha256:HEX]
  std::optional<OciCredentials> credentials;
  std::vector<std::string> insecure_registries;  // HOST[:PORT]
  std::string agent_binary;                      // the static airlock-agent
  // Bound on each skopeo command (inspect, copy).
  std::chrono::seconds timeout{std::chrono::minutes(30)};
  // Bound on what the image's layers expand to on the host, counted from
  // their tar headers before umoci unpacks them (layer_size.h):
  // ResourceExhausted beyond it. serve --max-image-unpack.
  uint64_t max_unpacked_bytes = 16ull << 30;
  // One line per phase ("pulling ...", "writing ext4 image ..."). May be empty.
  std::function<void(std::string_view)> progress;
  // Asked while skopeo runs: true kills it (Unavailable). May be empty.
  std::function<bool()> canceled;
};

struct OciBase {
  std::string image_name;        // "oci-<key>": CreateOptions.template_name
  std::string digest;            // the registry's manifest digest ("sha256:...")
  std::vector<std::string> env;  // the image config's Env, "KEY=VALUE" in order
  std::string user, workdir;     // the image config's User and WorkingDir ("" = unset)
  bool cached = false;           // the image was installed already
};

StatusOr<OciBase> EnsureOciBase(const OciPullOptions& options);

// A digest of what makes an OCI base's tree besides the image itself
// (kOciFormatVersion, the image builder's version, the SHA-256 of the agent
// as installed), 20 hex digits: the builder's base hash covers it, so an
// agent change rebuilds the layers above. Copies and strips the agent in a
// temporary directory under <state_dir>/images/oci.
StatusOr<std::string> OciBaseVersion(const std::string& state_dir, const std::string& agent_binary);

// --- parts, exposed for unit tests

// OK for a reference skopeo's docker:// transport may be given: 1-512 of
// [A-Za-z0-9._:/@-], not starting with '-', '/', ':' or '@'.
Status ValidateImageRef(std::string_view ref);
// The registry a reference names, "" for a Docker Hub short name
// ("127.0.0.1:5000/a/b:1" -> "127.0.0.1:5000", "python:3" -> "").
std::string RegistryOf(std::string_view ref);
// The reference pinned to `digest`: the tag dropped, "@digest" added (a
// reference with a digest already is returned as is).
std::string PinnedRef(std::string_view ref, std::string_view digest);
// OK for HOST[:PORT] as serve --insecure-registry takes it.
Status ValidateRegistryHost(std::string_view host);
// skopeo's stderr as one line: the last fatal/error msg="..." unquoted,
// without skopeo's `Error parsing image name "docker://...": ` prefix,
// at most 600 bytes.
std::string SkopeoError(std::string_view stderr_text);

}  // namespace airlock::image
