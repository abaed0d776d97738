#!/usr/bin/env bash
# A real Kubernetes node on this machine: containerd + runc + CNI bridge + kubelet + kube-proxy (iptables), joined to
# a local control plane (hack/cluster.sh's etcd + kube-apiserver, plus kube-controller-manager and kube-scheduler),
# running real pods from the images hack/images.sh builds. No Docker, nothing pulled: every binary comes from
# hack/build-tools.sh node, every image from hack/images.sh.
#
#   hack/node.sh up      record the host settings it will change, start everything, load the images, wait for the
#                        Node to be Ready and for pods to reach the `kubernetes` Service; prints the kubeconfig path
#                        (last line). A second `up` while one is up is refused.
#   hack/node.sh down    stop exactly the processes `up` started (and the pods' processes, found by their cgroups),
#                        put back every recorded host setting, check nothing else differs, remove the state
#   hack/node.sh status  say what runs (pids), the kubeconfig; exits 1 when no node is up
#   hack/node.sh env     print `export KUBECONFIG=...` lines for a running node
#
# THIS CHANGES HOST SETTINGS (as root): it is meant for throwaway VMs and CI. Users with Docker use hack/kind.sh.
# What `up` changes, all recorded first (hack/node_host.py) and put back by `down`:
#   - sysctls: kernel.panic, kernel.panic_on_oops, vm.overcommit_memory (kubelet), net.ipv4.ip_forward and
#     conf.{all,default}.forwarding (the CNI bridge); kube-proxy is told to leave conntrack and route_localnet as
#     they are (recorded all the same)
#   - iptables: the KUBE-* chains of kube-proxy (with jumps from INPUT, FORWARD, OUTPUT, PREROUTING, POSTROUTING),
#     CNI-* chains of a hostPort, and TRAINGUARD-NODE-EGRESS in FORWARD, which rejects pod traffic leaving the pod
#     bridge (pods talk to each other and to this host, never to the network). kubelet's own chains are off
#     (makeIPTablesUtilChains: false).
#   - netfilter accounting objects: kube-proxy's ct_state_invalid_dropped_pkts and localhost_nps_accepted_pkts
#   - interfaces: tgnode0 (a bridge without ports carrying the node and apiserver address: this kernel has no
#     dummy driver), tgcni0 (the pods' bridge) and the pods' veths
#   - cgroups: /trainguard-node in every hierarchy (kubelet's cgroupRoot: kubepods and the pods live under it)
#   - mounts: a tmpfs for containerd's root, kubelet's bind mount of its root dir, pod volumes, container root
#     filesystems, network namespaces, all under the state directories below
#   - directories: /var/lib/trainguard-node and /run/trainguard-node (everything relocatable lives there: containerd's root and state, runc's
#     state, kubelet's root dir and pod logs, CNI config and IPAM, network namespaces, the control plane);
#     what cannot be relocated: /var/log/containers (kubelet's log symlinks, a constant), /var/lib/kubelet
#     (kubelet's device-plugin socket dir, a constant), /var/lib/cni (libcni's result cache), /run/containerd
#     (the runc shims' sockets, a constant): removed by `down` when `up` created them, else only their new entries
#   - listening ports: kubelet 10250 on the node address and 10248 on loopback (fixed, so one node per machine),
#     kube-proxy 10249/10256 on loopback, the apiserver on the node address
#
# Settings (environment): TRAINGUARD_NODE_STATE (/var/lib/trainguard-node), TRAINGUARD_NODE_RUN
# (/run/trainguard-node), TRAINGUARD_NODE_NAME (trainguard-node), TRAINGUARD_NODE_ADDRESS (10.245.0.1),
# TRAINGUARD_NODE_POD_CIDR (10.244.0.0/24), TRAINGUARD_NODE_IMAGES (the hack/images.sh images `up` loads into
# containerd, built beforehand: "pause base trainguard trainer"; "none" for a node that runs no pod),
# TRAINGUARD_NODE_KEEP_LOGS=DIR (`down` copies the components' logs there before removing the state),
# TRAINGUARD_NODE_CONTAINERD_TMPFS (8g: the size limit of the tmpfs containerd's root lives on; it holds the
# unpacked images and the containers' writable layers, in memory).
set -Eeuo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=hack/versions.sh
source "$here/versions.sh"
# shellcheck source=hack/lib.sh
source "$here/lib.sh"

state=${TRAINGUARD_NODE_STATE:-/var/lib/trainguard-node}
run=${TRAINGUARD_NODE_RUN:-/run/trainguard-node}
node_name=${TRAINGUARD_NODE_NAME:-trainguard-node}
address=${TRAINGUARD_NODE_ADDRESS:-10.245.0.1}
pod_cidr=${TRAINGUARD_NODE_POD_CIDR:-10.244.0.0/24}
cluster_cidr=10.244.0.0/16
containerd_tmpfs=${TRAINGUARD_NODE_CONTAINERD_TMPFS:-8g}
read -ra images <<<"${TRAINGUARD_NODE_IMAGES:-pause base trainguard trainer}"
api_link=tgnode0
cni_bridge=tgcni0
cni_network=trainguard-node
cgroup_root=trainguard-node
record=$run/host-record
pids=$run/pids
logs=$state/log
sock=$run/containerd/containerd.sock
cluster_dir=$state/cluster
pod_logs=$state/pod-logs
# The node's own processes, in the order `down` stops them (control plane last: kubelet reports to it).
node_components=(kube-proxy kubelet containerd)
cp_components=(kube-scheduler kube-controller-manager)
# Paths the components write that cannot be moved under $state/$run (see the header).
unrelocatable=(/var/log/containers /var/lib/kubelet /var/lib/cni /run/containerd)

log() { printf 'node: %s\n' "$*" >&2; }
die() { printf 'node: error: %s\n' "$*" >&2; exit 1; }

k() { "$cp_bin/kubectl" --kubeconfig "$cluster_dir/kubeconfig" "$@"; }

# up_or_running: a record exists (a node is up, or a `down` did not finish).
recorded() { [[ -f $record/before.json ]]; }
any_alive() {
  local n
  for n in "${node_components[@]}" "${cp_components[@]}"; do alive "$pids/$n.pid" "/$n" && return 0; done
  return 1
}

require_host() {
  [[ $(id -u) -eq 0 ]] || die "a node needs root (it mounts, creates interfaces and cgroups, writes sysctls)"
  [[ $(uname -s) == Linux ]] || die "a node needs Linux"
  local missing=() t
  for t in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore nft nfacct ip mount \
    umount ss; do
    command -v "$t" >/dev/null 2>&1 || missing+=("$t")
  done
  if ((${#missing[@]})); then
    log "missing host tools: ${missing[*]}; installing them (hack/deps.sh node-host)"
    "$here/deps.sh" node-host
  fi
}

node_bin=""
cp_bin=""
find_binaries() {
  node_bin=$(trainguard_node_dir)
  local b missing=()
  for b in runc containerd ctr containerd-shim-runc-v2 kubelet kube-proxy cni/bridge cni/host-local cni/loopback \
    cni/portmap; do
    [[ -x $node_bin/$b ]] || missing+=("$b")
  done
  ((${#missing[@]} == 0)) || die "node binaries missing in $node_bin: ${missing[*]} (build them: hack/build-tools.sh node)"
  cp_bin=$("$here/build-tools.sh" control-plane kube-controller-manager kube-scheduler | tail -n 1)
}

# start NAME ARGS...: a process that outlives this script (setsid), stopped only by `down`, by pid.
start() {
  local name=$1; shift
  setsid "$@" >"$logs/$name.log" 2>&1 </dev/null &
  echo $! >"$pids/$name.pid"
  exec_seen "$pids/$name.pid" "/$name"
}

# exited NAME: the component this script started is gone, seen twice 0.5 s apart (one read of /proc can miss a
# process that is there: kube-proxy was twice called dead with an empty log, right after its start). Sets
# exit_how to how it ended when this shell can reap it (its own background child).
exit_how=""
exited() {
  local pidfile=$pids/$1.pid pid code
  [[ -f $pidfile ]] || return 1
  alive "$pidfile" "/$1" && return 1
  sleep 0.5
  if alive "$pidfile" "/$1"; then log "$1: one look at /proc missed it; it is running"; return 1; fi
  pid=$(<"$pidfile")
  if wait "$pid" 2>/dev/null; then code=0; else code=$?; fi
  case $code in
    127) exit_how="not a child of this shell" ;;
    129|13[0-9]|14[0-9]|15[0-9]) exit_how="killed by signal $((code - 128))" ;;
    *) exit_how="exit status $code" ;;
  esac
}

wait_for() {  # SECONDS WHAT COMMAND...
  local deadline=$((SECONDS + $1)) what=$2 n; shift 2
  until "$@" >/dev/null 2>&1; do
    for n in "${node_components[@]}" "${cp_components[@]}"; do
      if exited "$n"; then fail "$n exited ($exit_how) while waiting for $what"; fi
    done
    ((SECONDS < deadline)) || fail "timed out after $1 s waiting for $what"
    sleep 0.5
  done
}

start_kube_proxy() {
  start kube-proxy "$node_bin/kube-proxy" --kubeconfig "$state/kube-proxy.kubeconfig" \
    --hostname-override "$node_name" --proxy-mode iptables --cluster-cidr "$cluster_cidr" \
    --conntrack-max-per-core 0 --conntrack-tcp-timeout-established 0 --conntrack-tcp-timeout-close-wait 0 \
    --nodeport-addresses "$address/32" --metrics-bind-address 127.0.0.1:10249 \
    --healthz-bind-address 127.0.0.1:10256 --iptables-localhost-nodeports=false --oom-score-adj 0
}

fail() {
  trap - ERR
  log "$1; last lines of the logs:"
  local f
  for f in "$logs"/*.log "$cluster_dir"/*.log; do
    [[ -f $f ]] && { printf '==> %s <==\n' "$f" >&2; tail -n 15 "$f" >&2; }
  done
  down >&2 || true
  # The reason again, last: a caller that keeps only the tail of the output (the tests do) still has it.
  die "up failed: $1 (the host was put back; logs above)"
}

# sign NAME SUBJECT [EXT]: a key and certificate from the cluster CA, in $state/pki.
sign() {
  local name=$1 subj=$2 ext=${3:-extendedKeyUsage=clientAuth} pki=$cluster_dir/pki
  openssl req -newkey rsa:2048 -nodes -subj "$subj" -keyout "$state/pki/$name.key" -out "$state/pki/$name.csr" \
    2>/dev/null
  printf '%s\n' "$ext" >"$state/pki/$name.ext"
  openssl x509 -req -in "$state/pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 7 \
    -extfile "$state/pki/$name.ext" -out "$state/pki/$name.crt" 2>/dev/null
}

# component_kubeconfig NAME: a kubeconfig for $state/pki/NAME.{crt,key}.
component_kubeconfig() {
  local name=$1 server
  server=$(sed -n 's/^ *server: *//p' "$cluster_dir/kubeconfig" | head -n 1)
  cat >"$state/$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "$server", certificate-authority: "$cluster_dir/pki/ca.crt"}
users:
- name: $name
  user: {client-certificate: "$state/pki/$name.crt", client-key: "$state/pki/$name.key"}
contexts:
- name: local
  context: {cluster: local, user: $name}
current-context: local
EOF
  chmod 600 "$state/$name.kubeconfig"
}

make_cgroups() {
  local h
  for h in $(awk '$9 == "cgroup" || $9 == "cgroup2" {print $5}' /proc/self/mountinfo | sort -u); do
    # node_host.py recorded the tops first; a clash means someone else's tree of that name
    [[ ! -e $h/$cgroup_root ]] || die "$h/$cgroup_root exists already (not this node's): remove it or pick another machine"
    mkdir "$h/$cgroup_root"
    # a new v1 cpuset group has no CPUs or memory nodes until given its parent's
    if [[ -f $h/cpuset.cpus ]]; then
      cat "$h/cpuset.cpus" >"$h/$cgroup_root/cpuset.cpus"
      cat "$h/cpuset.mems" >"$h/$cgroup_root/cpuset.mems"
    fi
  done
}

write_containerd_config() {
  cat >"$state/containerd.toml" <<EOF
# hack/node.sh: everything under $state and $run; CRI only, nothing pulled.
version = 3
root = "$state/containerd"
state = "$run/containerd"
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.internal.v1.tracing", "io.containerd.image-verifier.v1.bindir"]

[grpc]
  address = "$sock"

[ttrpc]
  address = "$sock.ttrpc"

[plugins.'io.containerd.internal.v1.opt']
  path = "$state/containerd-opt"

[plugins.'io.containerd.cri.v1.runtime']
  # no CAP_SYS_RESOURCE in a VM like this one: a sandbox may not lower its oom_score_adj below containerd's
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      runtime_path = "$node_bin/containerd-shim-runc-v2"
      disable_pause_image_pull = true
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "$node_bin/runc"
        Root = "$run/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["$node_bin/cni"]
    conf_dir = "$state/cni/net.d"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "localhost/trainguard/pause:3.10"
EOF
}

write_cni_config() {
  mkdir -p "$state/cni/net.d" "$state/cni/ipam"
  cat >"$state/cni/net.d/10-$cni_network.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$cni_network",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$cni_bridge",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$pod_cidr"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$state/cni/ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
}

write_kubelet_config() {
  cat >"$state/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $address
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
containerRuntimeEndpoint: unix://$sock
cgroupDriver: cgroupfs
cgroupRoot: /$cgroup_root
# this machine kind: cgroup v1 hierarchies, swap allowed
failCgroupV1: false
failSwapOn: false
# the node's iptables are kube-proxy's; kubelet's hint and firewall chains stay off
makeIPTablesUtilChains: false
podLogsDir: $pod_logs
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $cluster_dir/pki/ca.crt}
authorization: {mode: Webhook}
clusterDomain: cluster.local
# a small disk: evict late, never garbage-collect the loaded images (nothing can pull them back)
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
EOF
}

node_ready() {
  [[ $(k get node "$node_name" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}/{.spec.taints}') == True/ ]]
}

# kube-proxy has written the `kubernetes` Service's rules: pods can reach the apiserver at its ClusterIP.
service_routed() {
  iptables-save -t nat | grep -q -- '-A KUBE-SERVICES .*default/kubernetes:https.* -j KUBE-SVC-'
}

up() {
  require_host
  if recorded || any_alive; then
    die "a node is already up here ($run; kubeconfig $cluster_dir/kubeconfig): run 'hack/node.sh down' first"
  fi
  [[ ! -e $run && ! -e $state ]] || die "$run or $state exists but holds no node record: remove it by hand first"
  if ss -ltnH "( sport = :10250 or sport = :10248 or sport = :10249 or sport = :10256 )" | grep -q .; then
    die "a port a node needs (10250, 10248, 10249, 10256) is taken: another kubelet or kube-proxy runs here"
  fi
  find_binaries
  local i
  if [[ ${images[*]} != none ]]; then
    for i in "${images[@]}"; do
      [[ -n $("$here/images.sh" dir "$i") ]] || die "image $i is not built (hack/images.sh build $i); nothing can be pulled here"
    done
  fi
  local t0=$SECONDS
  trap 'fail "command failed at hack/node.sh line $LINENO"' ERR

  # 1. Write down everything this will change, before changing any of it.
  local args=(--owned "$state" --owned "$run" --link "$api_link" --link "$cni_bridge" --cgroup "$cgroup_root"
    --cni-network "$cni_network" --pod-logs "$pod_logs") p
  for p in "${unrelocatable[@]}"; do args+=(--touched "$p"); done
  python3 "$here/node_host.py" record "$record" "${args[@]}"
  mkdir -p "$pids" "$state" "$logs" "$state/pki" "$pod_logs" && chmod 700 "$state" "$run"
  log "host settings recorded in $record"

  # 2. The apiserver's address, reachable from pods through the bridge's gateway.
  ip link add "$api_link" type bridge
  ip addr add "$address/32" dev "$api_link"
  ip link set "$api_link" up
  make_cgroups
  # Pods reach each other and this host; nothing they send leaves through another interface.
  iptables -N TRAINGUARD-NODE-EGRESS
  iptables -A TRAINGUARD-NODE-EGRESS -s "$pod_cidr" ! -o "$cni_bridge" -m comment \
    --comment "trainguard node: pods stay on this host" -j REJECT
  iptables -I FORWARD 1 -j TRAINGUARD-NODE-EGRESS

  # 3. The control plane, on the node address.
  TRAINGUARD_CLUSTER_DIR=$cluster_dir CLUSTER_ADVERTISE_ADDRESS=$address CLUSTER_NODE=1 TRAINGUARD_BIN_DIR=$cp_bin \
    "$here/cluster.sh" up >/dev/null
  sign kube-controller-manager /CN=system:kube-controller-manager
  sign kube-scheduler /CN=system:kube-scheduler
  sign kubelet "/O=system:nodes/CN=system:node:$node_name"
  sign kube-proxy /CN=system:kube-proxy
  local c
  for c in kube-controller-manager kube-scheduler kubelet kube-proxy; do component_kubeconfig "$c"; done
  # What real pods need: Deployments and DaemonSets, Services' endpoints, ServiceAccounts and their CA, Jobs,
  # the node lifecycle (lifts the not-ready taint), pod garbage collection.
  local controllers=job-controller,garbage-collector-controller,namespace-controller,node-lifecycle-controller
  controllers+=,serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller
  controllers+=,deployment-controller,replicaset-controller,daemonset-controller,endpoints-controller
  controllers+=,endpointslice-controller,disruption-controller,pod-garbage-collector-controller
  controllers+=,clusterrole-aggregation-controller,ttl-after-finished-controller
  local kcm_port sched_port
  kcm_port=$(free_port); sched_port=$(free_port)
  start kube-controller-manager "$cp_bin/kube-controller-manager" \
    --kubeconfig "$state/kube-controller-manager.kubeconfig" --bind-address 127.0.0.1 --secure-port "$kcm_port" \
    --controllers "$controllers" --use-service-account-credentials \
    --service-account-private-key-file "$cluster_dir/pki/sa.key" --root-ca-file "$cluster_dir/pki/ca.crt" \
    --cluster-cidr "$cluster_cidr" --leader-elect=false
  start kube-scheduler "$cp_bin/kube-scheduler" --kubeconfig "$state/kube-scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$sched_port" --leader-elect=false

  # 4. containerd, the images, the CNI network. Its root (the unpacked images) on a tmpfs: images load faster and
  # `down` frees them by unmounting instead of deleting tens of thousands of files.
  mkdir -p "$state/containerd"
  mount -t tmpfs -o "size=$containerd_tmpfs,mode=0700" trainguard-node-containerd "$state/containerd"
  write_containerd_config
  write_cni_config
  PATH=$node_bin:$PATH start containerd "$node_bin/containerd" --config "$state/containerd.toml"
  wait_for 60 "containerd's socket" "$node_bin/ctr" --address "$sock" version
  if [[ ${images[*]} != none ]]; then
    TRAINGUARD_NODE_CONTAINERD_SOCK=$sock "$here/images.sh" load "${images[@]}" >&2 \
      || fail "loading the images ${images[*]} failed"
  fi

  # 5. kubelet, registered as $node_name at $address.
  write_kubelet_config
  PATH=$node_bin:$PATH start kubelet "$node_bin/kubelet" --config "$state/kubelet.yaml" \
    --kubeconfig "$state/kubelet.kubeconfig" --root-dir "$state/kubelet" --cert-dir "$state/kubelet-pki" \
    --hostname-override "$node_name" --node-ip "$address" --v 1
  wait_for 120 "node $node_name Ready and untainted" node_ready

  # 6. kube-proxy: Services' ClusterIPs (the `kubernetes` one above all) rewritten to their endpoints. It leaves
  # the conntrack table's size and timeouts as they are (0 = unchanged) and answers NodePorts only on the node
  # address, so it never sets route_localnet.
  start_kube_proxy
  # In a cluster kube-proxy is a DaemonSet pod the kubelet restarts; here it is started once more if it ends in
  # its first 10 s (twice in rehearsals it ended at once with an empty log, and the next `up` was fine). A second
  # end fails the start as any other component's does.
  local first=$SECONDS
  while ((SECONDS - first < 10)) && ! service_routed >/dev/null 2>&1; do
    if exited kube-proxy; then
      log "kube-proxy ended ($exit_how) right after its start; starting it once more (first log: kube-proxy.1.log)"
      mv "$logs/kube-proxy.log" "$logs/kube-proxy.1.log"
      start_kube_proxy
      break
    fi
    sleep 0.5
  done
  wait_for 60 "kube-proxy's rules for the kubernetes Service" service_routed
  wait_for 60 "the default ServiceAccount" k -n default get serviceaccount default

  trap - ERR
  {
    echo "node=$node_name address=$address pod_cidr=$pod_cidr"
    echo "kube-controller-manager https://127.0.0.1:$kcm_port kube-scheduler https://127.0.0.1:$sched_port"
  } >"$run/endpoints"
  log "node $node_name Ready in $((SECONDS - t0)) s (kubelet + containerd + kube-proxy, control plane on https://$address)"
  echo "$cluster_dir/kubeconfig"
}

# The processes in the node's cgroup tree (pods' containers, whatever their shim left).
cgroup_pids() {
  local h
  for h in /sys/fs/cgroup/pids /sys/fs/cgroup/memory /sys/fs/cgroup/unified /sys/fs/cgroup; do
    if [[ -d $h/$cgroup_root ]]; then
      find "$h/$cgroup_root" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u
      return
    fi
  done
}

# Containers (pod sandboxes included) whose processes still run.
running_tasks() {
  "$node_bin/ctr" --address "$sock" -n k8s.io tasks ls 2>/dev/null | awk '$3 == "RUNNING" {print $1}'
}

# The runc shims containerd started for this node: they name its socket on their command line.
shim_pids() {
  local p
  for p in /proc/[0-9]*; do
    [[ $( { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null) == *containerd-shim-runc-v2*"-address $sock"* ]] && echo "${p#/proc/}"
  done
  return 0
}

down() {
  if ! recorded && ! any_alive; then
    log "no node is up ($run holds no record)"
    return 0
  fi
  local t0=$SECONDS n stopped=0
  cp_bin=$(cat "$cluster_dir/bin_dir" 2>/dev/null || true)
  node_bin=$(trainguard_node_dir)
  # Pods first, through kubelet, so their networks are torn down by CNI: with the controllers stopped nothing
  # recreates them.
  for n in "${cp_components[@]}"; do stop_recorded "$pids" "$n" && stopped=$((stopped + 1)); done
  if alive "$pids/kubelet.pid" /kubelet && [[ -n $cp_bin ]] && k get --raw /readyz >/dev/null 2>&1; then
    k delete pods --all-namespaces --all --force --grace-period=0 --wait=false >/dev/null 2>&1 || true
    local deadline=$((SECONDS + 30))
    while ((SECONDS < deadline)) && running_tasks | grep -q .; do sleep 0.5; done
  fi
  local t_pods=$SECONDS
  for n in kube-proxy kubelet; do stop_recorded "$pids" "$n" && stopped=$((stopped + 1)); done
  # Whatever kubelet did not stop: killed through containerd, then containerd itself.
  if alive "$pids/containerd.pid" /containerd; then
    local id
    for id in $(running_tasks); do
      "$node_bin/ctr" --address "$sock" -n k8s.io tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
    done
    stop_recorded "$pids" containerd && stopped=$((stopped + 1))
  fi
  local left
  left=$( { shim_pids; cgroup_pids; } | sort -u | tr '\n' ' ')
  if [[ -n ${left// /} ]]; then
    log "killing what containerd left: $left"
    # shellcheck disable=SC2086
    kill -9 $left 2>/dev/null || true
    for _ in $(seq 1 50); do [[ -z $( { shim_pids; cgroup_pids; } ) ]] && break; sleep 0.1; done
  fi
  local t_node=$SECONDS
  if [[ -f $cluster_dir/kubeconfig || -f $cluster_dir/etcd.pid ]]; then
    TRAINGUARD_CLUSTER_DIR=$cluster_dir "$here/cluster.sh" down 2>/dev/null && stopped=$((stopped + 2))
  fi
  if [[ -n ${TRAINGUARD_NODE_KEEP_LOGS:-} && -d $logs ]]; then
    mkdir -p "$TRAINGUARD_NODE_KEEP_LOGS" && cp -r "$logs"/. "$TRAINGUARD_NODE_KEEP_LOGS"/ 2>/dev/null || true
  fi
  log "stopped $stopped process(es) in $((SECONDS - t0)) s (pods $((t_pods - t0)) s, node $((t_node - t_pods)) s, control plane $((SECONDS - t_node)) s); putting the host back"
  if ! recorded; then die "no host record in $record: nothing to put back"; fi
  python3 "$here/node_host.py" undo "$record"
  log "down in $((SECONDS - t0)) s: the host is as 'up' found it"
}

status() {
  if ! recorded && ! any_alive; then echo "no node is up ($run)"; return 1; fi
  local n
  for n in "${cp_components[@]}" "${node_components[@]}"; do
    if alive "$pids/$n.pid" "/$n"; then echo "$n: running, pid $(<"$pids/$n.pid")"; else echo "$n: not running"; fi
  done
  TRAINGUARD_CLUSTER_DIR=$cluster_dir "$here/cluster.sh" status | sed 's/^/control plane: /' || true
  [[ -f $run/endpoints ]] && cat "$run/endpoints"
  echo "kubeconfig: $cluster_dir/kubeconfig"
}

case ${1:-} in
  up) up ;;
  down) down ;;
  status) status ;;
  env)
    recorded || die "no node is up here; start one with 'hack/node.sh up'"
    echo "export KUBECONFIG=$cluster_dir/kubeconfig"
    echo "export TRAINGUARD_KUBECONFIG=$cluster_dir/kubeconfig"
    ;;
  *) echo "usage: hack/node.sh up|down|status|env" >&2; exit 2 ;;
esac
