# trainguard: the two commands a newcomer needs are `make demo` and `make test`; everything else is here for the
# people working on it. Every target installs what it needs (pinned) on a fresh machine.

PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: help setup tools torch-env test test-unit test-integration test-node demo cluster-up cluster-down crds verify-crds lock bench clean

help:
	@echo "make demo         a simulated GPU cluster with Kueue and the JobSet controller: trainguard end to end"
	@echo "make test         install, build the pinned Kubernetes binaries if missing, run the whole suite"
	@echo "make test-unit    the tests that need no cluster (seconds)"
	@echo "make test-node    the chart, the cache agents and TrainJobs as real pods on a real node (root; changes host settings)"
	@echo "make cluster-up   start etcd + kube-apiserver on loopback (prints the kubeconfig path)"
	@echo "make cluster-down stop it"
	@echo "make crds         regenerate crds/ from the API models"
	@echo "make bench        run the benchmarks in bench/"

# The virtualenv is rebuilt when the pins change.
$(STAMP): requirements.lock requirements-build.lock pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) (set PYTHON=... to another 3.11+ interpreter)" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-input -r requirements-build.lock
	$(PY) -m pip install --quiet --disable-pip-version-check --no-input -r requirements.lock
	$(PY) -m pip install --quiet --disable-pip-version-check --no-input --no-deps --no-build-isolation -e .
	@touch $@

setup: $(STAMP)

tools:
	hack/build-tools.sh all

# torch (its CUDA build, about 5.7 GB), for the one test that runs Shard.torch() for real
# (tests/unit/cache/test_torch_zero_copy.py): a hash-checked environment in ~/.cache/trainguard/torch/, built when
# missing. Only `make test` needs it; `make test-unit` never downloads it.
torch-env:
	hack/torch-env.sh build

# The three installs are independent (pip, Go builds, the torch download): run side by side, the downloads overlap
# the compiles on a cold machine. Not --output-sync: a recipe line's output would wait until it ends (30 min cold);
# each tool prefixes its own lines (build-tools:, torch-env:).
test:
	@$(MAKE) --no-print-directory -j3 setup tools torch-env
	$(PY) -m pytest -m "not node"

test-unit: setup
	$(PY) -m pytest -m "not cluster and not tools and not node"

test-integration: setup tools
	$(PY) -m pytest -m cluster

# A real node (containerd + runc + kubelet on this machine, hack/node.sh, started by the tests' session fixture) and
# the images built here: root only, changes host settings (restored at the end); for throwaway VMs and CI.
test-node: setup tools
	@# every host tool the builds, the node and the tests use (the lifecycle test snapshots the host with
	@# iptables-save before hack/node.sh starts anything), installed before any of them runs
	hack/deps.sh node node-host images
	hack/build-tools.sh node
	hack/images.sh build
	$(PY) -m pytest -m node tests/node

demo: setup
	@# hack/demo.sh builds what it runs (the e2e cluster's binaries and Kueue), not the parity peer.
	hack/demo.sh

cluster-up: tools
	hack/cluster.sh up

cluster-down:
	hack/cluster.sh down

crds: setup
	$(PY) hack/gen_crds.py

lock:
	$(PYTHON) -m venv /tmp/trainguard-lock && /tmp/trainguard-lock/bin/pip install --quiet -e '.[test]' && \
	  { echo "# Exact pins for \`make setup\` (pip install -r requirements.lock). Regenerate with \`make lock\` after changing pyproject.toml."; \
	    /tmp/trainguard-lock/bin/pip freeze --exclude-editable | grep -v '^trainguard'; } > requirements.lock; \
	  rm -rf /tmp/trainguard-lock

bench: setup
	$(PY) bench/cache_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
