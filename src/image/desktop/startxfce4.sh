#!/bin/sh
# /usr/local/bin/startxfce4 in the desktop template (docs/desktop.md), ahead
# of /usr/bin/startxfce4 on PATH: while the XFCE session the template
# started (session.sh) runs on $DISPLAY, it is adopted and this exits 0
# (@e2b/desktop's create then sees xfce4-session, xfwm4 and xfdesktop
# running, as after its own startxfce4); otherwise the real startxfce4,
# once a replacement of the X server the Xvfb wrapper is making is done.
dir=/tmp/.airlock-desktop/${DISPLAY-}
tries=0
while [ -e "$dir.replacing" ] && [ "$tries" -lt 600 ]; do
  tries=$((tries + 1))
  sleep 0.1
done
if [ -n "${DISPLAY-}" ] && [ -f "$dir/args" ] && pgrep -x xfce4-session >/dev/null; then
  exit 0
fi
exec /usr/bin/startxfce4 "$@"
