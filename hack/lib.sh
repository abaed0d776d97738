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
