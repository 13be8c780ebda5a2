// Sealing: AES-256-GCM (OpenSSL EVP) with a 32-byte key, and the key files
// such keys live in. Used by the secret store (each row of `secrets`, under
// <db dir>/secrets.key) and by a cluster node's secret replica (each row of
// the cluster registry's cluster_secrets, under the cluster key given with
// `serve --cluster-secrets-key`; docs/secrets.md, docs/multinode.md).
//
// Shapes: a sealed value is nonce(12) | ciphertext(len of plaintext) | tag(16)
// as raw bytes; the nonce is fresh and random per Seal. The additional
// authenticated data (`aad`) binds the value to where it belongs (the
// store's "airlock-secret-v1:<name>", the cluster's
// "airlock-cluster-secret-v1:<name>"), so a sealed value moved to another
// name or context does not unseal.
//
// A key file holds exactly 32 bytes, is a regular file owned by this
// process's effective uid and is not readable or writable by group or
// others. Errors name the path and the rule: PermissionDenied (mode, owner),
// DataLoss (size), FailedPrecondition (not a regular file), errno errors
// (open, fstat, read; NotFound when it does not exist).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/status.h"

namespace airlock::secrets {

inline constexpr size_t kSealKeyBytes = 32, kSealNonceBytes = 12, kSealTagBytes = 16;

// nonce | ciphertext | tag. InvalidArgument when key32 is not 32 bytes;
// Internal when OpenSSL fails.
StatusOr<std::string> Seal(const std::string& key32, const std::string& aad, const std::string& plaintext);
// The plaintext. DataLoss when `sealed` is shorter than nonce + tag or its
// tag does not verify (another key, another aad, a changed byte);
// InvalidArgument when key32 is not 32 bytes.
StatusOr<std::string> Unseal(const std::string& key32, const std::string& aad, const std::string& sealed);

// The additional data of a cluster secret's sealed value in the registry.
// The additional data a cluster secret's row is sealed under: its name and
// its info text exactly as the registry holds it (policy, API attributes,
// times; a tombstone's), so neither can be changed or moved without the
// key: "airlock-cluster-secret-v2:<name>\n<info>".
std::string ClusterSecretAad(const std::string& name, const std::string& info);

// 32 random bytes (a new key).
StatusOr<std::string> NewSealKey();
// Reads a key file under the rules above.
StatusOr<std::string> LoadKeyFile(const std::string& path);
// Creates `path` holding a new key when it does not exist: written to an
// O_EXCL temporary sibling with mode 0600, fsynced, then linked into place
// (never a partial key file, never replacing one). Returns true when made
// now, false when `path` already existed (left as it is: check it with
// LoadKeyFile). Errno errors name the path.
StatusOr<bool> CreateKeyFile(const std::string& path);

// Standard base64 with padding (the registry holds sealed values as text).
std::string EncodeBase64(std::string_view bytes);
// InvalidArgument when `text` is not standard padded base64.
StatusOr<std::string> DecodeBase64(std::string_view text);

// Overwrites a buffer that held a secret (OPENSSL_cleanse), then empties it.
void Wipe(std::string& s);

}  // namespace airlock::secrets
