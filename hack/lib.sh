# Sourced by hack/ scripts that start and stop local processes.

# alive PIDFILE BINARY: the process recorded in PIDFILE is still the BINARY we started (pids get reused).
alive() {
  local pid
  [[ -f $1 ]] || return 1
  pid=$(<"$1")
  [[ -r /proc/$pid/cmdline ]] || return 1
  # A process that exits between the test and the read fails the read (ESRCH): not alive, and no message.
  { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -q -- "$2"
}

# exec_seen PIDFILE BINARY: wait (up to 10 s) until the process just started with `setsid BINARY ... &` shows
# BINARY in its command line. Until the forked child has exec'd, /proc shows this script's command line, and a
# check right after the start (`alive`, in a wait loop) would call a process that is still starting dead. Returns
# early when the process is gone, so the caller's wait loop reports it with its log.
exec_seen() {
  local pid deadline=$((SECONDS + 10))
  pid=$(<"$1")
  until alive "$1" "$2"; do
    kill -0 "$pid" 2>/dev/null || return 0
    ((SECONDS < deadline)) || return 0
    sleep 0.05
  done
}

# free_port: a loopback TCP port nothing listens on right now.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# stop_recorded DIR NAME: stop the NAME process whose pid is in DIR/NAME.pid, if it is still the one we started
# (SIGTERM, up to 10 s, then SIGKILL). Returns 1 when there was nothing to stop.
stop_recorded() {
  local pidfile=$1/$2.pid pid
  alive "$pidfile" "/$2" || return 1
  pid=$(<"$pidfile")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do alive "$pidfile" "/$2" || break; sleep 0.1; done
  if alive "$pidfile" "/$2"; then kill -9 "$pid" 2>/dev/null || true; fi
}
