# Sourced by hack/ scripts that start and stop local processes.

# alive PIDFILE BINARY: the process recorded in PIDFILE is still the BINARY we started (pids get reused).
alive() {
  local pid
  [[ -f $1 ]] || return 1
  pid=$(<"$1")
  [[ -r /proc/$pid/cmdline ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$2"
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
