#include "net/nft_batch.h"

#include <nftables/libnftables.h>

#include "common/netns.h"

namespace airlock::net {

Status NftRunInNetns(const std::string& netns, const std::string& script) {
  return RunInNetns(netns, [&]() -> Status {
    // The context opens its netlink socket here, in the sandbox's netns.
    nft_ctx* ctx = nft_ctx_new(NFT_CTX_DEFAULT);
    if (!ctx) return Internal("nft: cannot create a libnftables context in netns " + netns);
    (void)nft_ctx_buffer_output(ctx);
    (void)nft_ctx_buffer_error(ctx);
    int rc = nft_run_cmd_from_buffer(ctx, script.c_str());
    std::string err = rc != 0 && nft_ctx_get_error_buffer(ctx) ? nft_ctx_get_error_buffer(ctx) : "";
    nft_ctx_free(ctx);
    if (rc == 0) return OkStatus();
    if (err.size() > 400) err.resize(400);
    while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
    return Internal("nft (netns " + netns + "): " + (err.empty() ? "script refused" : err));
  });
}

}  // namespace airlock::net
