// Running code inside a named network namespace (/run/netns/<name>, as made
// by `ip netns add`) without moving the caller: `fn` runs on a short-lived
// thread that has setns()ed there, with every signal blocked (signals are
// for the process's own handlers). Sockets it creates stay in that netns.
// InvalidArgument for a name that is not a plain file name; the errno of
// open/setns otherwise; else fn's status.
#pragma once

#include <functional>
#include <string>

#include "common/status.h"

namespace airlock {

Status RunInNetns(const std::string& netns, const std::function<Status()>& fn);

}  // namespace airlock
