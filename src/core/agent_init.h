// POST /init to a sandbox's agent (spec §4; docs/agent.md): the one call that
// makes a guest fresh. Every start path uses it: a cold boot (token, env),
// a restore from a template snapshot or a fork (new token, hostname), and a
// resume (clock, entropy; after a cold resume also token and env).
#pragma once

#include <map>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "core/sandbox_attributes.h"

namespace airlock {

struct AgentInitRequest {
  std::string host;                         // the agent's address (the sandbox's netns IP)
  std::string auth_token;                   // X-Access-Token: the token the agent holds now; empty: none yet
  std::optional<std::string> access_token;  // the token it must want from now on
  std::optional<std::map<std::string, std::string>> env_vars;  // sandbox-wide env of new processes
  std::string hostname;                                        // empty: unchanged
  // The NFS volume mounts the guest must have, exactly (agent
  // volume_mounts.h; others it has are detached); nullopt: leave them.
  std::optional<std::vector<SandboxVolumeMount>> volume_mounts;
};

// Sends the request plus the host's wall clock (milliseconds; the agent steps
// its clock when off by > 100 ms) and 64 fresh bytes of entropy (the agent
// mixes them into the kernel pool and reseeds). Unavailable when the agent
// does not answer 200/204 within 10 s, with the start of its reply.
Status PostAgentInit(const AgentInitRequest& request);

// Base64 of 64 bytes from getrandom(2), for the agent's /init "entropy".
std::string FreshEntropyBase64();

}  // namespace airlock
