#!/usr/bin/env bash
# `make demo`: trainguard end to end on a real local control plane, in about a minute.
#
#  1. start etcd + kube-apiserver on loopback (hack/cluster.sh), install the JobSet CRD and trainguard's CRDs
#  2. start `trainguard webhook` (it creates its own CA in a Secret and injects it into the webhook configurations)
#     and `trainguard controller` (leader election on a Lease)
#  3. apply a ClusterTrainingRuntime, a TrainJobPolicy and a TrainJob with kubectl, and show what admission did
#     (Kueue labels, suspend, GPU topology hints) and the JobSet the controller built
#  4. show a denial, play Kueue (resume) and the JobSet controller (complete), and watch the TrainJob follow
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
pids=()

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
cleanup() {
  local rc=$?
  if [[ ${KEEP:-0} == 1 && $rc == 0 ]]; then
    step "left running (KEEP=1)"
    echo "  export KUBECONFIG=$kubeconfig   # webhook pid ${pids[0]:-}, controller pid ${pids[1]:-}; logs in $logs"
    echo "  stop: kill ${pids[*]:-}; TRAINGUARD_CLUSTER_DIR=$TRAINGUARD_CLUSTER_DIR hack/cluster.sh down"
    exit 0
  fi
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  hack/cluster.sh down >/dev/null 2>&1 || true
  if [[ $rc != 0 ]]; then
    echo "demo failed (exit $rc); last lines of the logs in $logs:" >&2
    tail -n 20 "$logs"/*.log >&2 2>/dev/null || true
  else
    rm -rf "$logs"
  fi
}
trap cleanup EXIT

wait_until() {  # wait_until SECONDS DESCRIPTION COMMAND...
  local deadline=$((SECONDS + $1)) what=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || { echo "timed out waiting for $what" >&2; return 1; }
    sleep 0.3
  done
}

step "1. local control plane"
hack/cluster.sh down >/dev/null 2>&1 || true
kubeconfig=$(hack/cluster.sh up | tail -n 1)
bin=$(cat "$TRAINGUARD_CLUSTER_DIR/bin_dir")
k() { "$bin/kubectl" --kubeconfig "$kubeconfig" "$@"; }
k apply --server-side -f "$bin/crds/jobset/" -f "$bin/crds/scheduler-plugins/" -f crds/ >/dev/null
for crd in $(k get crd -o name); do k wait --for condition=established --timeout=60s "$crd" >/dev/null; done
k get crd -o custom-columns=CRD:.metadata.name,GROUP:.spec.group,SCOPE:.spec.scope
k create namespace trainguard-system >/dev/null

step "2. trainguard webhook + controller"
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
wait_until 60 "webhook /readyz" curl -sf "http://127.0.0.1:$health/readyz"
wait_until 60 "controller /readyz" curl -sf "http://127.0.0.1:$metrics/readyz"
wait_until 30 "CA injected into the webhook configurations" \
  bash -c "[[ -n \$('$bin/kubectl' --kubeconfig '$kubeconfig' get validatingwebhookconfiguration trainguard-validating -o jsonpath='{.webhooks[0].clientConfig.caBundle}') ]]"
echo "webhook https://127.0.0.1:$port (health :$health), controller metrics :$metrics; leader lease:"
k -n trainguard-system get lease -o custom-columns=LEASE:.metadata.name,HOLDER:.spec.holderIdentity

step "3. a runtime, a platform policy and a TrainJob, through kubectl apply"
k apply --server-side -f examples/gpu-topology-policy.yaml
# The webhook configuration takes a moment to reach the apiserver's admission chain: retry the first apply.
wait_until 30 "the TrainJob to be admitted" k apply --server-side -f examples/torch-distributed-gpu.yaml
k apply --server-side -f examples/torch-distributed-gpu.yaml
echo
echo "What admission added (the manifest had no labels, no suspend and no patches):"
k -n team-a get trainjob llm-ddp -o jsonpath='{"  labels:  "}{.metadata.labels}{"\n  suspend: "}{.spec.suspend}{"\n  activeDeadlineSeconds: "}{.spec.activeDeadlineSeconds}{"\n  runtimePatches[0].manager: "}{.spec.runtimePatches[0].manager}{"\n  pod annotations: "}{.spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.metadata.annotations}{"\n"}'
wait_until 30 "the JobSet" k -n team-a get jobset llm-ddp
echo
echo "The JobSet the controller built (suspended, as Kueue expects until it admits the workload):"
k -n team-a get jobset llm-ddp -o jsonpath='{"  suspend: "}{.spec.suspend}{"\n  node parallelism: "}{.spec.replicatedJobs[0].template.spec.parallelism}{"\n  node env: "}{range .spec.replicatedJobs[0].template.spec.template.spec.containers[0].env[*]}{.name}{"="}{.value}{" "}{end}{"\n"}'
k -n team-a get trainjob

step "4. a job that does not fit is denied at kubectl apply"
set +e
sed -e 's/name: llm-ddp/name: too-wide/' -e 's/nvidia.com\/gpu: 8/nvidia.com\/gpu: 16/' examples/torch-distributed-gpu.yaml \
  | k apply --server-side -f - 2>&1 | grep -v "^clustertrainingruntime"
set -e

step "5. Kueue admits it (resume), the JobSet runs and completes"
k -n team-a patch trainjob llm-ddp --type merge -p '{"spec":{"suspend":false}}' >/dev/null
wait_until 30 "the JobSet to resume" bash -c "[[ \$('$bin/kubectl' --kubeconfig '$kubeconfig' -n team-a get jobset llm-ddp -o jsonpath='{.spec.suspend}') == false ]]"
echo "JobSet resumed; no JobSet controller runs here, so we write the status it would write:"
now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
k -n team-a patch jobset llm-ddp --subresource status --type merge -p "{\"status\":{\"replicatedJobsStatus\":[{\"name\":\"node\",\"ready\":0,\"succeeded\":1,\"failed\":0,\"active\":0,\"suspended\":0}],\"conditions\":[{\"type\":\"Completed\",\"status\":\"True\",\"reason\":\"AllJobsCompleted\",\"message\":\"jobset completed successfully\",\"lastTransitionTime\":\"$now\"}]}}" >/dev/null
wait_until 30 "the TrainJob to complete" bash -c "'$bin/kubectl' --kubeconfig '$kubeconfig' -n team-a get trainjob llm-ddp -o jsonpath='{.status.conditions[*].type}' | grep -q Complete"
k -n team-a get trainjob
k -n team-a get trainjob llm-ddp -o jsonpath='{range .status.conditions[*]}{"  "}{.type}{"="}{.status}{" ("}{.reason}{": "}{.message}{")\n"}{end}'

step "done"
echo "Offline, the same admission and build: .venv/bin/trainguard render -f examples/torch-distributed-gpu.yaml -f examples/gpu-topology-policy.yaml"
