#!/usr/bin/env bash
# `make demo`: trainguard end to end among the real components it works with, changing nothing on the host: every
# process runs as this user and listens on 127.0.0.1 (no node, no containers, no iptables, no sysctls); kwok plays
# the kubelets. Most of its time is starting the cluster (step 1); the jobs themselves take about 20 s.
#
#  1. a simulated GPU cluster (hack/e2e-cluster.sh): etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
#     the JobSet controller v0.12.0, and kwok for 8 fake nodes x 8 nvidia.com/gpu in two NVLink cliques of 4 nodes;
#     a pod running the demo's trainer image is Running, then exits 0 5 s later (DEMO_POD_RUN_MS)
#  2. `trainguard webhook` (it creates its own CA in a Secret and injects it into the webhook configurations) and
#     `trainguard controller` (leader election on a Lease)
#  3. the Kueue manager v0.17.0 (Topology-Aware Scheduling), its webhooks registered by URL; what an admin applies:
#     the gpu-teams TrainJobPolicy and Kueue's queues (examples/kueue-gpu-queues.yaml: 48 of the 64 GPUs)
#  4. a TrainJob (4 nodes x 8 GPUs) through kubectl apply: what admission added, a denial
#  5. a second one queued by Kueue until the first gives its quota back
#  6. both run: Kueue admits them into one clique each, the JobSet controller creates the Jobs, the scheduler binds
#     the pods to the kwok nodes Kueue chose, and the TrainJobs follow their JobSets to Complete
#
# Everything is stopped and removed at the end; KEEP=1 leaves it running and prints how to reach it.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
# shellcheck source=hack/lib.sh
source hack/lib.sh
export TRAINGUARD_CLUSTER_DIR=${TRAINGUARD_DEMO_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/trainguard/demo}
py=$repo/.venv/bin
logs=$(mktemp -d -t trainguard-demo-XXXX)
ns=team-a
# The cluster: 8 x 8 GPUs, cliques of 4 nodes (32 GPUs, a whole 4 x 8-GPU job); the demo's trainer image
# (examples/torch-distributed-gpu.yaml) "trains" for run_ms once its pod runs.
run_ms=${DEMO_POD_RUN_MS:-5000}
export E2E_NODES=8 E2E_GPUS_PER_NODE=8 E2E_NODES_PER_CLIQUE=4 E2E_SUCCEED_IMAGE=ghcr.io/acme/train:1.0 \
  E2E_POD_RUN_MS=$run_ms
pids=()      # trainguard webhook, controller, Kueue
watchers=()  # background kubectl: Kueue's CRDs, the phase logs of steps 4 and 5

step() { printf '\n\033[1m== %s\033[0m \033[2m(at %d s)\033[0m\n' "$*" "$SECONDS"; }
note() { printf '\033[2m%s\033[0m\n' "$*"; }
cleanup() {
  local rc=$? pid
  for pid in "${watchers[@]}"; do kill "$pid" 2>/dev/null || true; done
  if [[ ${KEEP:-0} == 1 && $rc == 0 ]]; then
    step "left running (KEEP=1)"
    echo "  export KUBECONFIG=$kubeconfig   # webhook, controller, Kueue: pids ${pids[*]}; logs in $logs"
    echo "  stop: kill ${pids[*]}; TRAINGUARD_CLUSTER_DIR=$TRAINGUARD_CLUSTER_DIR hack/e2e-cluster.sh down"
    exit 0
  fi
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}" "${watchers[@]}"; do wait "$pid" 2>/dev/null || true; done
  hack/e2e-cluster.sh down >/dev/null 2>&1 || true
  if [[ $rc != 0 ]]; then
    echo "demo failed (exit $rc); last lines of the logs in $logs:" >&2
    tail -n 20 "$logs"/*.log >&2 2>/dev/null || true
  else
    rm -rf "$logs"
  fi
}
trap cleanup EXIT

exec 3>&2  # wait_until silences its probes; serving() reports a dead server here
# serving NAME PID URL: URL answers 200; the whole demo stops at once if the process PID has exited.
serving() {
  kill -0 "$2" 2>/dev/null || { echo "$1 exited (its log is below)" >&3; exit 1; }
  curl -sf "$3"
}
wait_until() {  # wait_until SECONDS DESCRIPTION COMMAND...
  local deadline=$((SECONDS + $1)) what=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || { echo "timed out waiting for $what" >&2; return 1; }
    sleep 0.3
  done
}

# What `KEEP=1 make demo` left running: trainguard and Kueue first (the pids it recorded, each only if it still has
# this state directory in its arguments, since pids get reused), then the cluster.
stop_previous() {
  local pid
  [[ -f $TRAINGUARD_CLUSTER_DIR/demo.pids ]] || return 0
  for pid in $(<"$TRAINGUARD_CLUSTER_DIR/demo.pids"); do
    if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$TRAINGUARD_CLUSTER_DIR"; then
      kill "$pid" 2>/dev/null || true
    fi
  done
}
record() { echo "${pids[*]}" >"$TRAINGUARD_CLUSTER_DIR/demo.pids"; }

step "1. a simulated GPU cluster: the real control plane and JobSet controller, kwok for the kubelets"
note "(kwok marks pods Running and Succeeded without starting a container: kubectl logs and the SDK's get_job_logs()"
note " have nothing to show here; make test-node runs the trainer's containers on a real kubelet and reads their logs)"
stop_previous
hack/e2e-cluster.sh down >/dev/null 2>&1 || true
kubeconfig=$(hack/e2e-cluster.sh up 2> >(grep --line-buffered -v '^build-tools: ' >&2) | tail -n 1)
bin=$(cat "$TRAINGUARD_CLUSTER_DIR/bin_dir")
k() { "$bin/kubectl" --kubeconfig "$kubeconfig" "$@"; }
export -f k && export bin kubeconfig  # for the `bash -c` probes below
# Kueue's CRDs are large (the apiserver takes a while to serve them): installed in the background while trainguard
# starts; the Kueue manager starts once they are served.
k apply --server-side -f "$bin/crds/kueue/" >"$logs/kueue-crds.log" 2>&1 &
crds_pid=$!
watchers+=("$crds_pid")
k get nodes -o custom-columns='NODE:.metadata.name,CLIQUE:.metadata.labels.nvidia\.com/gpu\.clique,GPUS:.status.allocatable.nvidia\.com/gpu,READY:.status.conditions[?(@.type=="Ready")].status'

step "2. trainguard webhook + controller, and the Kueue manager v0.17.0"
k create namespace trainguard-system >/dev/null
port=$(free_port); health=$(free_port); metrics=$(free_port)
# The webhook configurations point at the loopback URL; the webhook fills in caBundle itself from its Secret.
"$py/python" -m trainguard.webhook.admission.registration --url "https://127.0.0.1:$port" --namespace trainguard-system \
  | k apply -f - >/dev/null
"$py/trainguard" webhook --bind-address 127.0.0.1 --port "$port" --health-port "$health" --kubeconfig "$kubeconfig" \
  --namespace trainguard-system --cert-secret trainguard-webhook-cert --cert-ip 127.0.0.1 \
  --mutating-configuration trainguard-mutating --validating-configuration trainguard-validating \
  >"$logs/webhook.log" 2>&1 &
pids+=($!)
"$py/trainguard" controller --kubeconfig "$kubeconfig" --metrics-bind-address "127.0.0.1:$metrics" \
  --leader-elect-namespace trainguard-system >"$logs/controller.log" 2>&1 &
pids+=($!)
record

# Kueue out of cluster, started beside trainguard: its serving certificate (127.0.0.1) from the cluster CA, which
# its webhook configurations then trust; Topology-Aware Scheduling on (Beta, on by default in v0.17: explicit, so
# a later default cannot turn the demo's placement off); VisibilityOnDemand would need an APIService;
# KUEUE_METRICS_CERT_DIR: see hack/tools/kueue/main.go.
kueue_bin=$(hack/build-tools.sh kueue 2>"$logs/build-tools.log" | tail -n 1)/kueue
kdir=$TRAINGUARD_CLUSTER_DIR/kueue
mkdir -p "$kdir/certs"
openssl req -newkey rsa:2048 -nodes -subj "/CN=kueue-webhook" -keyout "$kdir/certs/tls.key" -out "$kdir/tls.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$kdir/serving.ext"
openssl x509 -req -in "$kdir/tls.csr" -CA "$TRAINGUARD_CLUSTER_DIR/pki/ca.crt" -CAkey "$TRAINGUARD_CLUSTER_DIR/pki/ca.key" \
  -CAcreateserial -days 1 -extfile "$kdir/serving.ext" -out "$kdir/certs/tls.crt" 2>/dev/null
kueue_port=$(free_port); kueue_health=$(free_port)
cat >"$kdir/config.yaml" <<EOF
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
health: {healthProbeBindAddress: "127.0.0.1:$kueue_health"}
metrics: {bindAddress: "0"}
webhook: {host: 127.0.0.1, port: $kueue_port, certDir: "$kdir/certs"}
leaderElection: {leaderElect: false}
internalCertManagement: {enable: false}
manageJobsWithoutQueueName: false
integrations: {frameworks: [trainer.kubeflow.org/trainjob, jobset.x-k8s.io/jobset]}
EOF
wait "$crds_pid" || { echo "installing Kueue's CRDs failed:" >&2; cat "$logs/kueue-crds.log" >&2; exit 1; }
watchers=()
wait_until 60 "Kueue's kinds to be served" \
  k get workloads,clusterqueues,localqueues,resourceflavors,topologies,workloadpriorityclasses -A
KUEUE_METRICS_CERT_DIR=$kdir/certs "$kueue_bin" --config "$kdir/config.yaml" --kubeconfig "$kubeconfig" \
  --feature-gates VisibilityOnDemand=false,TopologyAwareScheduling=true >"$logs/kueue.log" 2>&1 &
pids+=($!)
record
# Kueue's own webhook configurations (config/components/webhook in the pinned module), for the kinds used here,
# pointed at the loopback URL. Their names sort before trainguard's, so the apiserver calls Kueue's mutating
# webhook first, as in a cluster where both are installed.
kueue_src=$(cd hack/tools/kueue && GOFLAGS=-mod=mod GOTOOLCHAIN=local go mod download -json sigs.k8s.io/kueue \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
"$py/python" - "$kueue_src/config/components/webhook/manifests.yaml" "https://127.0.0.1:$kueue_port" \
  "$TRAINGUARD_CLUSTER_DIR/pki/ca.crt" >"$kdir/webhooks.yaml" <<'EOF'
import base64, sys, yaml
src, url, ca = sys.argv[1], sys.argv[2], base64.b64encode(open(sys.argv[3], "rb").read()).decode()
groups = {"kueue.x-k8s.io", "trainer.kubeflow.org", "jobset.x-k8s.io"}
out = []
for doc in yaml.safe_load_all(open(src)):
    if not doc:
        continue
    kind = doc["kind"]
    doc["metadata"] = {"name": "kueue-mutating-webhook-configuration" if kind.startswith("Mutating")
                       else "kueue-validating-webhook-configuration"}
    doc["webhooks"] = [dict(w, clientConfig={"url": url + w["clientConfig"]["service"]["path"], "caBundle": ca})
                       for w in doc["webhooks"] if {g for r in w["rules"] for g in r["apiGroups"]} <= groups]
    out.append(doc)
yaml.safe_dump_all(out, sys.stdout)
EOF

wait_until 60 "webhook /readyz" serving "trainguard webhook" "${pids[0]}" "http://127.0.0.1:$health/readyz"
wait_until 60 "controller /readyz" serving "trainguard controller" "${pids[1]}" "http://127.0.0.1:$metrics/readyz"
wait_until 30 "CA injected into the webhook configurations" \
  bash -c '[[ -n $(k get validatingwebhookconfiguration trainguard-validating -o jsonpath="{.webhooks[0].clientConfig.caBundle}") ]]'
wait_until 90 "Kueue /readyz" serving "the Kueue manager" "${pids[2]}" "http://127.0.0.1:$kueue_health/readyz"
k apply -f "$kdir/webhooks.yaml" >/dev/null
echo "trainguard webhook https://127.0.0.1:$port (health :$health), controller metrics :$metrics"
echo "Kueue manager v0.17.0 webhook https://127.0.0.1:$kueue_port (health :$kueue_health)"
k -n trainguard-system get lease -o custom-columns=LEASE:.metadata.name,HOLDER:.spec.holderIdentity

step "3. what the platform admin applies: a TrainJobPolicy and Kueue's queues"
k apply --server-side -f examples/gpu-topology-policy.yaml
# Kueue's webhooks take a moment to reach the apiserver's admission chain: retry the first apply.
wait_until 30 "Kueue's webhooks" k apply --server-side -f examples/kueue-gpu-queues.yaml
k apply --server-side -f examples/kueue-gpu-queues.yaml
wait_until 60 "ClusterQueue team-gpu to be active" \
  bash -c '[[ $(k get clusterqueue team-gpu -o jsonpath="{.status.conditions[?(@.type==\"Active\")].status}") == True ]]'
k get clusterqueue team-gpu -o custom-columns='CLUSTERQUEUE:.metadata.name,FLAVOR:.spec.resourceGroups[0].flavors[0].name,GPU QUOTA:.spec.resourceGroups[0].flavors[0].resources[2].nominalQuota,NAMESPACES:.spec.namespaceSelector.matchLabels'
k get resourceflavor h100 -o custom-columns='FLAVOR:.metadata.name,NODES:.spec.nodeLabels,TOPOLOGY:.spec.topologyName'
k -n "$ns" get localqueue

step "4. a TrainJob through kubectl apply: what admission added"
k apply --server-side -f examples/torch-distributed-gpu.yaml -l trainer.kubeflow.org/framework=torch
# Ready when a server-side dry run comes back through both webhooks (the policy's queue and Kueue's patch) with
# trainguard's cache holding the policy and the runtime.
wait_until 60 "Kueue's and trainguard's webhooks with the policy" bash -c \
  'k apply --server-side --dry-run=server -o json -f examples/torch-distributed-gpu.yaml | grep -q "\"manager\": \"kueue.x-k8s.io/manager\"" '
phases() {  # phases NAME: each new trainguard.io/state (the STATE column) of TrainJob NAME, timed from now
  local start=${EPOCHREALTIME/./} last="" now us
  while :; do
    now=$(k -n "$ns" get trainjob "$1" -o jsonpath='{.metadata.labels.trainguard\.io/state}' 2>/dev/null) || now=""
    if [[ -n $now && $now != "$last" ]]; then
      us=$((${EPOCHREALTIME/./} - start))
      printf '  %3d.%ds  %s\n' $((us / 1000000)) $((us / 100000 % 10)) "$now"
      last=$now
    fi
    [[ $now == Complete || $now == Failed ]] && return
    sleep 0.2
  done
}
phases llm-ddp >"$logs/llm-ddp.phases" &
watchers+=($!)
k apply --server-side -o json -f examples/torch-distributed-gpu.yaml >"$logs/applied.json"
note "(the manifest had no labels, no suspend and no runtimePatches; this is the object as stored at CREATE)"
"$py/python" - "$logs/applied.json" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
(tj,) = [o for o in doc.get("items", [doc]) if o["kind"] == "TrainJob"]
spec, labels = tj["spec"], tj["metadata"].get("labels") or {}
print("  labels:", json.dumps({k: v for k, v in labels.items() if k.startswith("kueue.x-k8s.io/")}, separators=(",", ":")))
print("  suspend:", json.dumps(spec.get("suspend")))
print("  activeDeadlineSeconds:", spec.get("activeDeadlineSeconds"))
print("  runtimePatches managers:", ", ".join(p["manager"] for p in spec.get("runtimePatches") or []))
(policy,) = [p for p in spec["runtimePatches"] if p["manager"] == "trainguard.io/policy"]
(node,) = policy["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
pod = node["template"]["spec"]["template"]
print("  pod annotations:", json.dumps(pod["metadata"]["annotations"], separators=(",", ":")))
print("  pod tolerations:", json.dumps(pod["spec"]["tolerations"], separators=(",", ":")))
EOF
echo
echo "A job that does not fit is denied at kubectl apply (nothing is stored):"
set +e
sed -e 's/name: llm-ddp/name: too-wide/' -e 's/nvidia.com\/gpu: 8/nvidia.com\/gpu: 16/' examples/torch-distributed-gpu.yaml \
  | k apply --server-side -f - 2>&1 | grep -v "^clustertrainingruntime"
set -e

step "5. Kueue queues the next job until the quota allows it"
note "(llm-ddp-2, another 4 x 8 GPUs, applied while llm-ddp holds 32 of the ClusterQueue's 48 GPUs)"
wait_until 30 "Kueue to admit llm-ddp" \
  bash -c '[[ $(k -n team-a get workloads -o jsonpath="{.items[?(@.metadata.ownerReferences[0].name==\"llm-ddp\")].status.conditions[?(@.type==\"Admitted\")].status}") == True ]]'
phases llm-ddp-2 >"$logs/llm-ddp-2.phases" &
watchers+=($!)
sed -e 's/name: llm-ddp,/name: llm-ddp-2,/' examples/torch-distributed-gpu.yaml | k apply --server-side -f - -l '!trainer.kubeflow.org/framework'
wait_until 30 "Kueue to hold llm-ddp-2 for quota" \
  bash -c 'k -n team-a get workloads -o jsonpath="{.items[?(@.metadata.ownerReferences[0].name==\"llm-ddp-2\")].status.conditions[?(@.type==\"QuotaReserved\")].message}" | grep -q "insufficient unused quota"'
wait_until 30 "the JobSet of llm-ddp-2" k -n "$ns" get jobset llm-ddp-2
k -n "$ns" get workloads -o custom-columns='WORKLOAD:.metadata.name,TRAINJOB:.metadata.ownerReferences[0].name,QUEUE:.spec.queueName,ADMITTED:.status.conditions[?(@.type=="Admitted")].status,MESSAGE:.status.conditions[?(@.type=="QuotaReserved")].message'
echo
echo "The JobSets trainguard's controller built (suspended until Kueue admits their workload):"
k -n "$ns" get jobsets -o custom-columns='JOBSET:.metadata.name,SUSPEND:.spec.suspend,NODES:.spec.replicatedJobs[0].template.spec.parallelism'
k -n "$ns" get jobset llm-ddp -o jsonpath='{"  llm-ddp node env: "}{range .spec.replicatedJobs[0].template.spec.template.spec.containers[0].env[*]}{.name}{"="}{.value}{" "}{end}{"\n"}'

step "6. both run to Complete: pods on one clique each, status flowing back"
note "(Kueue places each job's 4 pods in one clique, as the policy's topology hint requires, and llm-ddp-2 only once"
note " llm-ddp's workload finished; kube-scheduler binds the pods, kwok runs them, the JobSet controller completes)"
wait_until 90 "llm-ddp-2 to complete" bash -c '[[ $(k -n team-a get trainjob llm-ddp-2 -o jsonpath="{.metadata.labels.trainguard\.io/state}") == Complete ]]'
for pid in "${watchers[@]}"; do wait "$pid"; done
watchers=()
declare -A clique
while read -r node c; do clique[$node]=$c; done < <(k get nodes -o jsonpath='{range .items[*]}{.metadata.name}{" "}{.metadata.labels.nvidia\.com/gpu\.clique}{"\n"}{end}')
for job in llm-ddp llm-ddp-2; do
  echo "$job: phases (trainguard.io/state, seconds after kubectl apply)"
  cat "$logs/$job.phases"
  k -n "$ns" get pods -l "jobset.sigs.k8s.io/jobset-name=$job" --no-headers \
    -o custom-columns='POD:.metadata.name,NODE:.spec.nodeName,PHASE:.status.phase' \
    | while read -r pod node phase; do printf '  pod %-28s on %-11s (%s)  %s\n' "$pod" "$node" "${clique[$node]:-?}" "$phase"; done
done
echo
k -n "$ns" get workloads -o custom-columns='WORKLOAD:.metadata.name,TRAINJOB:.metadata.ownerReferences[0].name,ADMITTED:.status.conditions[?(@.type=="Admitted")].status,FINISHED:.status.conditions[?(@.type=="Finished")].status'
k -n "$ns" get trainjobs
k -n "$ns" get trainjob llm-ddp -o jsonpath='{range .status.conditions[*]}{"  "}{.type}{"="}{.status}{" ("}{.reason}{": "}{.message}{")\n"}{end}'

step "done"
echo "Offline, the same admission and build: .venv/bin/trainguard render -f examples/torch-distributed-gpu.yaml -f examples/gpu-topology-policy.yaml"
