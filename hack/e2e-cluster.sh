#!/usr/bin/env bash
# A simulated GPU cluster for end-to-end tests, on loopback, without Docker: hack/cluster.sh's etcd +
# kube-apiserver, plus
#   - kube-controller-manager (job, garbage collector, namespace, node lifecycle, service accounts and their
#     tokens, root CA ConfigMap), with its own client certificate; each controller runs under its ServiceAccount
#   - kube-scheduler, with its own client certificate
#   - kwok: plays kubelet for fake nodes (leases, node status, pod phases driven by Stage objects)
#   - the JobSet controller v0.12.0 (the version Kubeflow Trainer v2.3 uses), under its upstream ClusterRole, with
#     its validating/mutating webhooks registered by URL (https://127.0.0.1:PORT) and a serving certificate from
#     the cluster CA (its internal cert management assumes an in-cluster Service, so it is off)
# and E2E_NODES (4) fake nodes with E2E_GPUS_PER_NODE (8) nvidia.com/gpu each, labelled kubernetes.io/hostname
# and nvidia.com/gpu.clique (E2E_NODES_PER_CLIQUE (2) nodes per clique). The CRDs (JobSet, scheduler-plugins
# PodGroup, trainguard's crds/) are installed before the controllers start.
#
# E2E_ROLE=manager starts only kube-controller-manager beside the apiserver (no scheduler, kwok, JobSet controller
# or nodes): a MultiKueue manager cluster, which runs no pods of its own but needs the garbage collector (a deleted
# TrainJob's Kueue Workload goes through it, and MultiKueue deletes the worker's copy when that Workload goes).
#
#   hack/e2e-cluster.sh up     start everything, wait until it works, print the kubeconfig path (last line)
#   hack/e2e-cluster.sh down   stop exactly the processes `up` started (pids in the state dir), remove the state
#   hack/e2e-cluster.sh env    print `export ...` lines for a running cluster (as hack/cluster.sh env)
#   hack/e2e-cluster.sh status say whether it is running
#
# Pod phases (kwok Stage objects: kwok's own node-initialize, node-heartbeat-with-lease, pod-ready and pod-delete,
# plus ours): a pod bound to a fake node becomes Running; a pod owned by a Job whose container image is
# $E2E_SUCCEED_IMAGE (trainguard.invalid/e2e/succeed:v1) exits 0 (Succeeded) E2E_POD_RUN_MS (2000) ms later.
# Any other image keeps running. Pods that fit no node stay Pending (Unschedulable), as on a real cluster.
#
# State lives in $TRAINGUARD_CLUSTER_DIR (default ${XDG_STATE_HOME:-$HOME/.local/state}/trainguard/e2e-cluster);
# the extra components' pids, logs, certificates and configs are in its e2e/ subdirectory.
set -Eeuo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=hack/lib.sh
source "$here/lib.sh"
export TRAINGUARD_CLUSTER_DIR=${TRAINGUARD_CLUSTER_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/trainguard/e2e-cluster}
state=$TRAINGUARD_CLUSTER_DIR
e2e=$state/e2e
nodes=${E2E_NODES:-4}
gpus=${E2E_GPUS_PER_NODE:-8}
per_clique=${E2E_NODES_PER_CLIQUE:-2}
succeed_image=${E2E_SUCCEED_IMAGE:-trainguard.invalid/e2e/succeed:v1}
run_ms=${E2E_POD_RUN_MS:-2000}
role=${E2E_ROLE:-worker}
case $role in
  worker) components=(kube-controller-manager kube-scheduler kwok jobset-controller) ;;
  manager) components=(kube-controller-manager) ;;
  *) printf 'e2e-cluster: error: E2E_ROLE must be worker or manager, not %s\n' "$role" >&2; exit 2 ;;
esac
worker() { [[ $role == worker ]]; }

log() { printf 'e2e-cluster: %s\n' "$*" >&2; }
die() { printf 'e2e-cluster: error: %s\n' "$*" >&2; exit 1; }
[[ $per_clique =~ ^[1-9][0-9]*$ ]] || die "E2E_NODES_PER_CLIQUE must be a positive integer, not '$per_clique'"

# client_kubeconfig NAME CN [O]: a client certificate signed by the cluster CA and a kubeconfig that uses it.
client_kubeconfig() {
  local name=$1 cn=$2 org=${3:-} pki=$state/pki subj
  subj="/CN=$cn"
  [[ -z $org ]] || subj="/O=$org$subj"
  openssl req -newkey rsa:2048 -nodes -subj "$subj" -keyout "$e2e/pki/$name.key" -out "$e2e/pki/$name.csr" 2>/dev/null
  printf 'extendedKeyUsage=clientAuth\n' >"$e2e/pki/client.ext"
  openssl x509 -req -in "$e2e/pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 7 \
    -extfile "$e2e/pki/client.ext" -out "$e2e/pki/$name.crt" 2>/dev/null
  cat >"$e2e/$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "$server", certificate-authority: "$pki/ca.crt"}
users:
- name: $name
  user: {client-certificate: "$e2e/pki/$name.crt", client-key: "$e2e/pki/$name.key"}
contexts:
- name: local
  context: {cluster: local, user: $name}
current-context: local
EOF
  chmod 600 "$e2e/$name.kubeconfig"
}

# start NAME BINARY ARGS...: a server that outlives this script (setsid), stopped only by `down`, by pid.
start() {
  local name=$1; shift
  setsid "$@" >"$e2e/$name.log" 2>&1 </dev/null &
  echo $! >"$e2e/$name.pid"
  exec_seen "$e2e/$name.pid" "/$name"
}

# wait_for SECONDS WHAT COMMAND...: poll until COMMAND succeeds; on timeout or a dead component, fail with logs.
wait_for() {
  local deadline=$((SECONDS + $1)) what=$2 name; shift 2
  until "$@" >/dev/null 2>&1; do
    for name in "${components[@]}"; do
      if [[ -f $e2e/$name.pid ]] && ! alive "$e2e/$name.pid" "/$name"; then
        fail "$name exited while waiting for $what"
      fi
    done
    ((SECONDS < deadline)) || fail "timed out after $1 s waiting for $what"
    sleep 0.25
  done
}

fail() {
  trap - ERR
  log "$1; last lines of the logs:"
  local f
  for f in "$state"/*.log "$e2e"/*.log; do
    [[ -f $f ]] && { printf '==> %s <==\n' "$f" >&2; tail -n 12 "$f" >&2; }
  done
  down >/dev/null 2>&1 || true
  die "start failed"
}

k() { "$bin/kubectl" --kubeconfig "$kubeconfig" "$@"; }

healthz() { curl -skf "https://127.0.0.1:$1/healthz" >/dev/null; }

kwok_config() {
  local stages=$bin/kwok-manifests/kustomize/stage f
  for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
    pod/fast/pod-ready.yaml pod/fast/pod-delete.yaml; do
    cat "$stages/$f"
    echo "---"
  done
  # Ours instead of kwok's pod-complete (which completes every Job pod at once): only the test image exits 0,
  # after a delay, so a test sees the pods Running first.
  cat <<EOF
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-complete-e2e-image
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: ".metadata.deletionTimestamp", operator: DoesNotExist}
    - {key: ".status.phase", operator: In, values: [Running]}
    - {key: ".metadata.ownerReferences.[].kind", operator: In, values: [Job]}
    - {key: ".spec.containers.[].image", operator: In, values: ["$succeed_image"]}
  delay:
    durationMilliseconds: $run_ms
  next:
    statusTemplate: |
      {{ \$now := Now }}
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: 0
            finishedAt: {{ \$now | Quote }}
            reason: Completed
            startedAt: {{ \$now | Quote }}
      {{ end }}
      phase: Succeeded
EOF
}

fake_nodes() {
  local i
  for ((i = 0; i < nodes; i++)); do
    cat <<EOF
apiVersion: v1
kind: Node
metadata:
  name: kwok-gpu-$i
  annotations: {kwok.x-k8s.io/node: fake, node.alpha.kubernetes.io/ttl: "0"}
  labels:
    type: kwok
    kubernetes.io/hostname: kwok-gpu-$i
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    nvidia.com/gpu.present: "true"
    nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3
    nvidia.com/gpu.clique: clique-$((i / per_clique))
status:
  capacity: {cpu: "128", memory: 2Ti, pods: "110", nvidia.com/gpu: "$gpus"}
  allocatable: {cpu: "128", memory: 2Ti, pods: "110", nvidia.com/gpu: "$gpus"}
---
EOF
  done
}

# JobSet's own webhook configurations (config/components/webhook, rendered by kustomize with its patches), pointed
# at the loopback URL with the cluster CA instead of the in-cluster Service.
jobset_webhooks() {
  k kustomize "$bin/jobset-manifests/config/components/webhook" \
    | k create --dry-run=client -o json -f - \
    | python3 -c '
import base64, json, sys
base, ca = sys.argv[1], base64.b64encode(open(sys.argv[2], "rb").read()).decode()
text, dec, pos, items = sys.stdin.read(), json.JSONDecoder(), 0, []
while text[pos:].strip():  # kubectl prints one JSON document per object
    obj, pos = dec.raw_decode(text, pos + len(text[pos:]) - len(text[pos:].lstrip()))
    items.append(obj)
out = []
for o in items:
    if o["kind"] not in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        continue
    o["metadata"] = {"name": "jobset-" + o["metadata"]["name"]}
    for w in o["webhooks"]:
        w["clientConfig"] = {"url": base + w["clientConfig"]["service"]["path"], "caBundle": ca}
    out.append(o)
assert len(out) == 2, out
json.dump({"apiVersion": "v1", "kind": "List", "items": out}, sys.stdout)
' "https://127.0.0.1:$jobset_webhook_port" "$state/pki/ca.crt"
}

# The JobSet controller under upstream's ClusterRole (config/components/rbac/role.yaml), bound to its certificate's
# user, so a permission JobSet lacks fails here as it would in a cluster.
jobset_rbac() {
  sed 's/^  name: manager-role$/  name: jobset-manager-role/' "$bin/jobset-manifests/config/components/rbac/role.yaml"
  cat <<EOF
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: jobset-manager-rolebinding}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: jobset-manager-role}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: jobset-controller}]
EOF
}

probe_jobset() {
  cat <<EOF
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: e2e-probe, namespace: default}
spec:
  replicatedJobs:
  - name: w
    template:
      spec:
        template:
          spec:
            restartPolicy: Never
            containers: [{name: c, image: "$succeed_image"}]
EOF
}

crds_established() {
  ! k get crd -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Established")].status}{"\n"}{end}' \
    | grep -vqx True
}

# Ready (kwok's heartbeats) and schedulable (the not-ready taint lifted by the node-lifecycle controller).
nodes_ready() {
  local ready
  ready=$(k get nodes -l type=kwok -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}/{.spec.taints}{"\n"}{end}')
  [[ $(grep -cx 'True/' <<<"$ready") == "$nodes" ]]
}

running() {
  alive "$e2e/jobset-controller.pid" "/jobset-controller" || alive "$e2e/kwok.pid" "/kwok" \
    || "$here/cluster.sh" status >/dev/null 2>&1
}

up() {
  if running; then
    die "an e2e cluster is already running in $state; run 'hack/e2e-cluster.sh down' first, or set TRAINGUARD_CLUSTER_DIR"
  fi
  local t0=$SECONDS
  bin=$("$here/build-tools.sh" e2e | tail -n 1)
  # From here on, any failing command stops what was started and reports the logs.
  trap 'fail "command failed at hack/e2e-cluster.sh line $LINENO"' ERR
  export TRAINGUARD_BIN_DIR=$bin
  kubeconfig=$("$here/cluster.sh" up | tail -n 1)
  mkdir -p "$e2e/pki" && chmod 700 "$e2e/pki"
  server=$(sed -n 's/^ *server: *//p' "$kubeconfig" | head -n 1)

  client_kubeconfig kube-controller-manager system:kube-controller-manager
  if worker; then
    client_kubeconfig kube-scheduler system:kube-scheduler
    client_kubeconfig kwok kwok-controller system:masters
    client_kubeconfig jobset-controller jobset-controller
    # The JobSet webhook's serving certificate: SAN 127.0.0.1, signed by the cluster CA (the caBundle below).
    mkdir -p "$e2e/jobset-certs"
    openssl req -newkey rsa:2048 -nodes -subj "/CN=jobset-webhook" -keyout "$e2e/jobset-certs/tls.key" \
      -out "$e2e/pki/jobset-webhook.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >"$e2e/pki/serving.ext"
    openssl x509 -req -in "$e2e/pki/jobset-webhook.csr" -CA "$state/pki/ca.crt" -CAkey "$state/pki/ca.key" \
      -CAcreateserial -days 7 -extfile "$e2e/pki/serving.ext" -out "$e2e/jobset-certs/tls.crt" 2>/dev/null
  fi

  # CRDs first: JobSet's manager needs its own at start, and kube-controller-manager's garbage collector only
  # discovers kinds that appear later on its 30 s resync (a TrainJob's JobSet would outlive it that long).
  k apply --server-side -f "$bin/crds/jobset/" -f "$bin/crds/scheduler-plugins/" -f "$here/../crds/" >/dev/null
  wait_for 60 "the CRDs to be established" crds_established
  if worker; then jobset_rbac | k apply -f - >/dev/null; fi

  # node-lifecycle: the apiserver taints every new Node node.kubernetes.io/not-ready (TaintNodesByCondition) and
  # this controller lifts the taint once kwok reports the node Ready (and would mark it NotReady without heartbeats).
  local kcm_controllers=job-controller,garbage-collector-controller,namespace-controller,node-lifecycle-controller
  kcm_controllers+=,serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller
  local kcm_port sched_port jobset_health_port
  kcm_port=$(free_port); sched_port=$(free_port); jobset_health_port=$(free_port); jobset_webhook_port=$(free_port)
  start kube-controller-manager "$bin/kube-controller-manager" \
    --kubeconfig "$e2e/kube-controller-manager.kubeconfig" --bind-address 127.0.0.1 --secure-port "$kcm_port" \
    --controllers "$kcm_controllers" \
    --use-service-account-credentials --service-account-private-key-file "$state/pki/sa.key" \
    --root-ca-file "$state/pki/ca.crt" --leader-elect=false
  if ! worker; then
    wait_for 60 "kube-controller-manager /healthz" healthz "$kcm_port"
    wait_for 60 "the default ServiceAccount (kube-controller-manager's serviceaccount controller)" \
      k -n default get serviceaccount default
    echo "kube-controller-manager https://127.0.0.1:$kcm_port" >"$e2e/endpoints"
    trap - ERR
    log "e2e manager cluster ready in $((SECONDS - t0)) s: apiserver + etcd, kube-controller-manager"
    echo "$kubeconfig"
    return
  fi
  start kube-scheduler "$bin/kube-scheduler" \
    --kubeconfig "$e2e/kube-scheduler.kubeconfig" --bind-address 127.0.0.1 --secure-port "$sched_port" \
    --leader-elect=false

  kwok_config >"$e2e/kwok.yaml"
  start kwok "$bin/kwok" --kubeconfig "$e2e/kwok.kubeconfig" --config "$e2e/kwok.yaml" \
    --manage-all-nodes=false --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --node-lease-duration-seconds 40 --cidr 10.244.0.1/16 --node-ip 10.255.0.1

  cat >"$e2e/jobset-config.yaml" <<EOF
apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
leaderElection: {leaderElect: false}
health: {healthProbeBindAddress: "127.0.0.1:$jobset_health_port"}
metrics: {bindAddress: "0"}
webhook: {host: 127.0.0.1, port: $jobset_webhook_port, certDir: "$e2e/jobset-certs"}
internalCertManagement: {enable: false}
EOF
  KUBECONFIG=$e2e/jobset-controller.kubeconfig start jobset-controller "$bin/jobset-controller" \
    --config "$e2e/jobset-config.yaml" --zap-log-level info

  fake_nodes | k apply -f - >/dev/null
  jobset_webhooks | k apply -f - >/dev/null

  wait_for 60 "kube-controller-manager /healthz" healthz "$kcm_port"
  wait_for 60 "kube-scheduler /healthz" healthz "$sched_port"
  wait_for 60 "JobSet controller /readyz" curl -sf "http://127.0.0.1:$jobset_health_port/readyz"
  wait_for 60 "$nodes kwok nodes Ready and untainted" nodes_ready
  wait_for 60 "the default ServiceAccount (kube-controller-manager's serviceaccount controller)" \
    k -n default get serviceaccount default
  # Registered and serving is not yet called: a server-side dry run goes through JobSet's webhooks for real.
  probe_jobset >"$e2e/probe-jobset.yaml"
  wait_for 60 "the JobSet webhooks to answer the apiserver" k create --dry-run=server -f "$e2e/probe-jobset.yaml"

  {
    echo "kube-controller-manager https://127.0.0.1:$kcm_port"
    echo "kube-scheduler https://127.0.0.1:$sched_port"
    echo "jobset-controller health http://127.0.0.1:$jobset_health_port webhook https://127.0.0.1:$jobset_webhook_port"
  } >"$e2e/endpoints"
  trap - ERR
  log "e2e cluster ready in $((SECONDS - t0)) s: apiserver + etcd, kube-controller-manager, kube-scheduler, kwok ($nodes nodes x $gpus nvidia.com/gpu), JobSet controller"
  echo "$kubeconfig"
}

down() {
  local stopped=0 name
  for name in jobset-controller kwok kube-scheduler kube-controller-manager; do
    if stop_recorded "$e2e" "$name"; then stopped=$((stopped + 1)); fi
  done
  log "stopped $stopped e2e component(s)"
  "$here/cluster.sh" down
}

case ${1:-} in
  up) up ;;
  down) down ;;
  env) "$here/cluster.sh" env ;;
  status)
    if running; then echo "running: $state/kubeconfig"; else echo "not running ($state)"; exit 1; fi ;;
  *) echo "usage: hack/e2e-cluster.sh up|down|env|status" >&2; exit 2 ;;
esac
