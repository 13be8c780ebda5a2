#!/bin/sh
# /usr/local/bin/Xvfb in the desktop template (docs/desktop.md), ahead of
# /usr/bin/Xvfb on PATH. The template's session (session.sh) started an X
# server on :0 with the arguments @e2b/desktop asks for by default:
#   - asked for that display with those same arguments: that server is
#     adopted and this exits 0 (the SDK runs Xvfb in the background and
#     then polls xdpyinfo, which answers);
#   - asked for that display with other arguments (another resolution or
#     DPI): that server is killed at once and its XFCE session stopped, then
#     the real Xvfb runs with what was asked (this process becomes it);
#   - anything else (another display, no pre-started server): the real Xvfb.
# While a replacement is under way, /tmp/.airlock-desktop/<display>.replacing
# exists, until the new server answers: the SDK's xdpyinfo poll may still
# reach the old server, so the startxfce4 wrapper waits for it to go before
# it starts a session (on the new server).
real=/usr/bin/Xvfb
case "${1-}" in
  :[0-9]*) display=$1 ;;
  *) exec "$real" "$@" ;;
esac
case "$display" in
  *[!0-9:.]*) exec "$real" "$@" ;;
esac
dir=/tmp/.airlock-desktop/$display
[ -f "$dir/args" ] || exec "$real" "$@"
pid=$(cat "$dir/xvfb.pid" 2>/dev/null || true)
if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
  if [ "$(cat "$dir/args")" = "$*" ]; then
    exit 0
  fi
  marker=$dir.replacing
  : >"$marker"
  # From here nothing adopts the old session, and the old server answers no
  # more: the SDK polls xdpyinfo right after starting this in the
  # background, and must only ever reach the new server.
  rm -f "$dir/args"
  kill -KILL "$pid" 2>/dev/null || true
  session=$(cat "$dir/session.pid" 2>/dev/null || true)
  if [ -n "$session" ]; then kill -TERM -- "-$session" 2>/dev/null || true; fi
  # The old server gone, and the old session's programs too (the SDK's
  # pgrep for xfce4-session, xfwm4 and xfdesktop must only see the new one).
  tries=0
  while kill -0 "$pid" 2>/dev/null || { [ -n "$session" ] && pgrep -s "$session" >/dev/null; }; do
    tries=$((tries + 1))
    if [ "$tries" -eq 50 ] && [ -n "$session" ]; then kill -KILL -- "-$session" 2>/dev/null || true; fi
    if [ "$tries" -gt 100 ]; then
      rm -f "$marker"
      echo "airlock desktop: the pre-started desktop on $display (pid $pid, session $session) did not stop" >&2
      exit 1
    fi
    sleep 0.1
  done
  # A killed server leaves its lock behind.
  rm -f "/tmp/.X${display#:}-lock"
  rm -rf "$dir"
  # The marker goes once the new server answers (at most 60 s).
  # shellcheck disable=SC2016 # expanded by that shell
  sh -c 'n=0; until xdpyinfo -display "$2" >/dev/null 2>&1 || [ "$n" -ge 600 ]; do n=$((n + 1)); sleep 0.1; done; rm -f "$1"' \
    airlock-desktop "$marker" "$display" </dev/null >/dev/null 2>&1 &
  exec "$real" "$@"
fi
rm -rf "$dir"
exec "$real" "$@"
