#!/usr/bin/env bash
# A real Kubernetes control plane on loopback: etcd + kube-apiserver built by hack/build-tools.sh from pinned Go
# modules (no Docker, no kind). The same thing envtest does, with binaries we build ourselves.
#
#   hack/cluster.sh up     start etcd and kube-apiserver, wait for /readyz, print the kubeconfig path (last line)
#   hack/cluster.sh down   stop exactly the processes `up` started and remove the state directory
#   hack/cluster.sh env    print `export KUBECONFIG=...` lines for a running cluster
#   hack/cluster.sh status say whether a cluster is running here
#
# State lives in $TRAINGUARD_CLUSTER_DIR (default ${XDG_STATE_HOME:-$HOME/.local/state}/trainguard/cluster),
# outside the repo. One cluster per state directory: a second `up` is an error, not a second cluster. The apiserver
# serves real TLS, authorizes with RBAC, signs service-account tokens, and trusts an admin client certificate
# (O=system:masters) written into the kubeconfig. Extra kube-apiserver flags: $TRAINGUARD_APISERVER_FLAGS.
#
# For a real node (hack/node.sh), two settings; unset, everything above stays as it is:
#   CLUSTER_ADVERTISE_ADDRESS=IP  the apiserver listens and advertises on IP (an address on a local interface that
#                                 pods can reach) instead of 127.0.0.1: its certificate carries IP and the
#                                 `kubernetes` Service ClusterIP (10.0.0.1), the kubeconfig names IP, and the
#                                 `kubernetes` Endpoints are kept (lease reconciler) so kube-proxy can route to it
#   CLUSTER_NODE=1                kubelets may join: Node authorization before RBAC, a client certificate for the
#                                 apiserver's calls to kubelets (logs, exec; the kubelet's self-signed serving
#                                 certificate is not verified), webhook Services dialled at their endpoint IPs
#                                 (--enable-aggregator-routing, no kube-proxy needed on the apiserver's path)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=hack/versions.sh
source "$here/versions.sh"
# shellcheck source=hack/lib.sh
source "$here/lib.sh"

state=${TRAINGUARD_CLUSTER_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/trainguard/cluster}
log() { printf 'cluster: %s\n' "$*" >&2; }
die() { printf 'cluster: error: %s\n' "$*" >&2; exit 1; }

advertise=${CLUSTER_ADVERTISE_ADDRESS:-}
node_mode=${CLUSTER_NODE:-}
# The first address of --service-cluster-ip-range below: the `kubernetes` Service's ClusterIP.
kubernetes_service_ip=10.0.0.1

running() { alive "$state/etcd.pid" "/etcd" || alive "$state/kube-apiserver.pid" "/kube-apiserver"; }

# Certificates: one CA signs the apiserver's serving certificate and the admin client certificate.
make_pki() {
  local pki=$state/pki
  mkdir -p "$pki" && chmod 700 "$pki"
  openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj "/CN=trainguard-local-ca" \
    -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" -keyout "$pki/apiserver.key" \
    -out "$pki/apiserver.csr" 2>/dev/null
  local san=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc
  # Pods dial the apiserver at the Service ClusterIP (kube-proxy rewrites it) or at the advertised address.
  [[ -z $advertise ]] || san+=",IP:$advertise,IP:$kubernetes_service_ip,DNS:kubernetes.default.svc.cluster.local"
  printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "$san" >"$pki/apiserver.ext"
  openssl x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 365 \
    -extfile "$pki/apiserver.ext" -out "$pki/apiserver.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=trainguard-admin" -keyout "$pki/admin.key" \
    -out "$pki/admin.csr" 2>/dev/null
  printf 'extendedKeyUsage=clientAuth\n' >"$pki/admin.ext"
  openssl x509 -req -in "$pki/admin.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 365 \
    -extfile "$pki/admin.ext" -out "$pki/admin.crt" 2>/dev/null
  if [[ -n $node_mode ]]; then
    # The apiserver's identity towards kubelets (logs, exec, port-forward): kubelets authorize it by webhook, and
    # system:masters passes that SubjectAccessReview.
    openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" \
      -keyout "$pki/kubelet-client.key" -out "$pki/kubelet-client.csr" 2>/dev/null
    openssl x509 -req -in "$pki/kubelet-client.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
      -days 365 -extfile "$pki/admin.ext" -out "$pki/kubelet-client.crt" 2>/dev/null
  fi
  openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
}

write_kubeconfig() {
  local port=$1 pki=$state/pki
  cat >"$state/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: trainguard-local
  cluster:
    server: https://${advertise:-127.0.0.1}:$port
    certificate-authority: $pki/ca.crt
users:
- name: trainguard-admin
  user:
    client-certificate: $pki/admin.crt
    client-key: $pki/admin.key
contexts:
- name: trainguard-local
  context: {cluster: trainguard-local, user: trainguard-admin}
current-context: trainguard-local
EOF
  chmod 600 "$state/kubeconfig"
}

up() {
  if running; then
    die "a cluster is already running in $state (kubeconfig: $state/kubeconfig); run 'hack/cluster.sh down' first, or set TRAINGUARD_CLUSTER_DIR for a second one"
  fi
  if [[ -n $advertise ]] && ! ip -o addr show | awk '{print $4}' | grep -q "^$advertise/"; then
    die "CLUSTER_ADVERTISE_ADDRESS=$advertise is on no local interface (ip addr); the apiserver could not listen there"
  fi
  if [[ -n $node_mode && -z $advertise ]]; then
    die "CLUSTER_NODE=1 needs CLUSTER_ADVERTISE_ADDRESS: a kubelet's pods cannot reach an apiserver on 127.0.0.1"
  fi
  local bin
  bin=$("$here/build-tools.sh" control-plane | tail -n 1)
  rm -rf "$state" && mkdir -p "$state" && chmod 700 "$state"
  local start=$SECONDS t0
  t0=$(date +%s.%N)
  make_pki
  local etcd_port peer_port api_port
  etcd_port=$(free_port); peer_port=$(free_port); api_port=$(free_port)
  echo "$bin" >"$state/bin_dir"
  local addressing=(--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --endpoint-reconciler-type none)
  local authorization=(--authorization-mode RBAC) node_flags=()
  if [[ -n $advertise ]]; then
    addressing=(--bind-address "$advertise" --advertise-address "$advertise" --endpoint-reconciler-type lease)
  fi
  if [[ -n $node_mode ]]; then
    authorization=(--authorization-mode Node,RBAC)
    node_flags=(--kubelet-client-certificate "$state/pki/kubelet-client.crt"
      --kubelet-client-key "$state/pki/kubelet-client.key" --kubelet-preferred-address-types InternalIP
      --enable-aggregator-routing=true)
  fi

  # setsid: the servers outlive this script and are stopped only by `down`, by pid.
  setsid "$bin/etcd" --name trainguard --data-dir "$state/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "trainguard=http://127.0.0.1:$peer_port" --unsafe-no-fsync --log-level warn \
    >"$state/etcd.log" 2>&1 </dev/null &
  echo $! >"$state/etcd.pid"

  local pki=$state/pki
  # shellcheck disable=SC2086
  setsid "$bin/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    "${addressing[@]}" --secure-port "$api_port" \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" --tls-min-version VersionTLS12 \
    --client-ca-file "$pki/ca.crt" \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --service-account-issuer https://kubernetes.default.svc \
    --service-cluster-ip-range 10.0.0.0/24 \
    "${authorization[@]}" "${node_flags[@]}" \
    --allow-privileged=true \
    ${TRAINGUARD_APISERVER_FLAGS:-} \
    >"$state/kube-apiserver.log" 2>&1 </dev/null &
  echo $! >"$state/kube-apiserver.pid"
  write_kubeconfig "$api_port"

  local deadline=$((SECONDS + 90))
  until "$bin/kubectl" --kubeconfig "$state/kubeconfig" get --raw /readyz >/dev/null 2>&1; do
    if ! running || ((SECONDS > deadline)); then
      log "the control plane did not become ready; last lines of the logs:"
      tail -n 15 "$state/etcd.log" "$state/kube-apiserver.log" >&2 || true
      down >/dev/null 2>&1 || true
      die "start failed"
    fi
    sleep 0.2
  done
  local ready_s
  ready_s=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)")
  echo "$ready_s" >"$state/start-to-ready-seconds"
  log "kube-apiserver ${KUBERNETES_VERSION} + etcd ${ETCD_VERSION} ready on https://${advertise:-127.0.0.1}:$api_port in ${ready_s} s (certificates included)"
  echo "$state/kubeconfig"
}

down() {
  local stopped=0 name
  for name in kube-apiserver etcd; do
    if stop_recorded "$state" "$name"; then stopped=$((stopped + 1)); fi
  done
  rm -rf "$state"
  log "stopped $stopped process(es), removed $state"
}

case ${1:-} in
  up) up ;;
  down) down ;;
  env)
    running || die "no cluster is running in $state; start one with 'hack/cluster.sh up'"
    echo "export KUBECONFIG=$state/kubeconfig"
    echo "export TRAINGUARD_KUBECONFIG=$state/kubeconfig"
    echo "export TRAINGUARD_BIN_DIR=$(<"$state/bin_dir")"
    echo "export PATH=$(<"$state/bin_dir"):\$PATH"
    ;;
  status)
    if running; then echo "running: $state/kubeconfig"; else echo "not running ($state)"; exit 1; fi ;;
  *) echo "usage: hack/cluster.sh up|down|env|status" >&2; exit 2 ;;
esac
