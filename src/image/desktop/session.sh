#!/bin/sh
# The desktop template's session (docs/desktop.md), installed at
# /usr/local/lib/airlock/desktop/session and run once per boot by the agent
# as the service "desktop" (user `user`, DISPLAY=:0), so the template's
# memory snapshot, and every sandbox restored from it, already holds a
# running X server and XFCE session.
#
# What it starts is exactly what @e2b/desktop's Sandbox.create() starts
# itself (its _start(): `Xvfb <display> -ac -screen 0 1024x768x24 -retro
# -dpi 96 -nolisten tcp -nolisten unix`, then `startxfce4`). The wrappers
# /usr/local/bin/Xvfb and /usr/local/bin/startxfce4 adopt these when the SDK
# asks for the same again, and replace them when it asks for another screen
# (a `resolution` or `dpi` option).
#
# State, per display: /tmp/.airlock-desktop/<display>/
#   args         the X server's arguments, written once it answers
#   xvfb.pid     its pid;  session.pid  startxfce4's (its own session and
#                process group, setsid)
#   xvfb.log, session.log
# Exit: 0 once both are started (the agent does not restart it: "restart":
# "on-failure"); 1 when the X server did not answer within 60 s.
set -eu
display=${DISPLAY:-:0}
dir=/tmp/.airlock-desktop/$display
args="$display -ac -screen 0 1024x768x24 -retro -dpi 96 -nolisten tcp -nolisten unix"
mkdir -p "$dir"
# shellcheck disable=SC2086 # $args is a word list
setsid /usr/bin/Xvfb $args </dev/null >"$dir/xvfb.log" 2>&1 &
echo $! >"$dir/xvfb.pid"
tries=0
until xdpyinfo -display "$display" >/dev/null 2>&1; do
  tries=$((tries + 1))
  if [ "$tries" -gt 600 ]; then
    echo "airlock desktop: the X server on $display did not answer within 60 s" >&2
    exit 1
  fi
  sleep 0.1
done
printf '%s\n' "$args" >"$dir/args"
DISPLAY=$display setsid /usr/bin/startxfce4 </dev/null >"$dir/session.log" 2>&1 &
echo $! >"$dir/session.pid"
