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
// by their rootfs); templates::Builder::CollectGarbage removes an "oci-*"
// image no layer is built on, and only while no build from an OCI image
// holds OciBasesHold (below).
//
// Network (issue 32 item 6; pull_proxy.h): skopeo runs on the host in a
// network namespace of its own that holds only a proxy of ours, which
// connects to a registry named in `registry_allow` (serve --registry-allow
// HOST[:PORT]) wherever it resolves, and to any other host only when every
// address it resolves to is public and not the host's. A reference naming
// `localhost` or a literal address that the rule refuses fails before skopeo
// runs. TLS is verified except for the registries named in
// `insecure_registries` (HOST[:PORT], as the reference writes them: serve
// --insecure-registry), for which plain HTTP or an unverified certificate is
// accepted. Credentials go to skopeo in an auth file of the pull's work dir
// (mode 0600, containers-auth.json: WriteAuthFile), never on its command
// line; without credentials the auth file is empty, so the host's own
// logins (~/.docker/config.json, $XDG_RUNTIME_DIR/containers/auth.json) are
// never used for a tenant's pull.
//
// Errors (the message is meant for the build's reason):
//   InvalidArgument     a malformed reference; registry type other than
//                       "registry" is refused by the caller (builder)
//   FailedPrecondition  skopeo/umoci missing; the image cannot be pulled:
//                       "cannot pull image 'REF': " and one of three fixed
//                       reasons (PullFailureText): not found, unauthorized,
//                       or "the registry refused or could not be reached"
//                       (a refused registry, a closed port, a timeout, TLS,
//                       HTTP vs HTTPS: all the same). skopeo's own text and
//                       what the proxy refused go to the daemon's log only;
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

#include "common/fd.h"
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
  // Registries (HOST[:PORT]; without a port: every port) that may be pulled
  // from whatever they resolve to (serve --registry-allow; pull_proxy.h).
  std::vector<std::string> registry_allow;
  std::string agent_binary;  // the static airlock-agent
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

// Between a pull and the first layer built on it, nothing on disk says an
// "oci-*" image is wanted, and the sweep of unused OCI bases (a daemon's
// start, a template's deletion: any daemon on the state dir) would remove it
// under a build that is about to start its sandbox on it (seen in CI: another
// suite's daemon started 3 s after a pull). So a build from an OCI image holds
// a shared flock on <state_dir>/images/oci-bases.lock from before its pull
// until it ends (OciBasesHold: waits while a sweep runs), and the sweep runs
// only under an exclusive one it can take at once (TryOciBasesSweep:
// FailedPrecondition while a build holds it; the next sweep does the work).
StatusOr<UniqueFd> OciBasesHold(const std::string& state_dir);
StatusOr<UniqueFd> TryOciBasesSweep(const std::string& state_dir);

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
// What a tenant is told of a failed pull, from skopeo's error (SkopeoError):
// "cannot pull image 'REF': " + "not found (...)" when the registry said so
// (manifest/name unknown, not found), "unauthorized (...)" when it refused
// the credentials or the access, else "the registry refused or could not be
// reached". The reference's words are taken out of the text first.
std::string PullFailureText(std::string_view ref, std::string_view skopeo_error);
// The registry key of a reference in an auth file: RegistryOf, or
// "docker.io" for a Docker Hub name.
std::string AuthRegistryOf(std::string_view ref);
// Writes <dir>/auth.json, mode 0600 (O_EXCL): {"auths":{KEY:{"auth":
// base64(username:password)}}} with the credentials, {"auths":{}} without.
// Returns its path.
StatusOr<std::string> WriteAuthFile(const std::string& dir, const OciPullOptions& o);
// skopeo's argv: `inspect` of o.ref, and `copy` of the reference pinned to
// `digest` into the OCI layout `layout`, with the auth file `authfile`.
std::vector<std::string> SkopeoInspectArgv(const OciPullOptions& o, const std::string& authfile);
std::vector<std::string> SkopeoCopyArgv(const OciPullOptions& o, const std::string& authfile, const std::string& digest,
                                        const std::string& layout);

}  // namespace airlock::image
