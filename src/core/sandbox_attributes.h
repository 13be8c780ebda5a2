// What a sandbox carries for the API besides its machine (core/manager.h
// Sandbox keeps it; the registry row, core/registry.h SandboxRecord,
// persists it; GET /sandboxes/{id} shows it).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace airlock {

// A volume mounted into a sandbox (E2B's SandboxVolumeMount, docs/volumes.md).
struct SandboxVolumeMount {
  std::string name;       // the volume's name, as the create named it
  std::string path;       // absolute guest path
  std::string volume_id;  // core/volumes.h
  std::string host_dir;   // where the volume is mounted on the host (VolumeStore::MountedRoot)
  bool operator==(const SandboxVolumeMount&) const = default;
};

// What a sandbox carries for the API besides its machine: kept by the
// Sandbox, persisted in its registry row (SandboxRecord), shown by
// GET /sandboxes/{id}.
struct SandboxAttributes {
  std::map<std::string, std::string> metadata;
  // E2B's trafficAccessToken and network.maskRequestHost (SandboxRecord).
  std::string traffic_token;
  std::string mask_request_host;
  // E2B's network.httpsPorts: guest ports that serve TLS themselves; the
  // data plane reaches them over TLS (not verified: self-signed works).
  std::vector<uint16_t> https_ports;
  // The team that owns it (tenancy, docs/security.md).
  std::string owner_team;
  // Lifecycle (spec §1.5.1): at TTL pause instead of kill (keeping memory
  // or not); resume a paused sandbox on data-plane traffic.
  bool auto_pause = false;
  bool auto_pause_memory = true;
  bool auto_resume = false;
  // Idle sleep (airlock's lifecycle.idleTimeout, serve --idle-timeout;
  // docs/snapshots.md "Sleep when idle"): paused with its memory after this
  // many seconds without a data-plane request or open stream (0: never);
  // idle_keeps_processes: a process started through the API that still
  // runs keeps it awake too.
  int idle_timeout_s = 0;
  bool idle_keeps_processes = false;
  // Volumes mounted into it (create's volumeMounts); kept by pauses,
  // resumes and rollbacks, inherited by fork children.
  std::vector<SandboxVolumeMount> volume_mounts;
  // Its env vars as the registry keeps them (brokered secrets' values are
  // left out); nullopt: CreateOptions::env_vars.
  std::optional<std::map<std::string, std::string>> recorded_env_vars;
};

// One lifecycle event of a sandbox (GET /v2/sandboxes/{id}/logs).
struct SandboxLogEvent {
  int64_t ts_ms = 0;  // Unix ms
  std::string level;  // "info" | "warn"
  std::string message;
};

}  // namespace airlock
