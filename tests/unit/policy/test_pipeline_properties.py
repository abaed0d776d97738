"""Properties of the mutating pipeline over generated TrainJobs and policies:

* idempotent: admitting the admitted object again changes nothing;
* the JSON patch from the original to the result applies cleanly and reproduces the result;
* lossless: every field the pipeline does not own (unknown fields, user labels, trainer) is unchanged.
"""

from __future__ import annotations

import copy

import jsonpatch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policy_helpers import GPU_LEVELS, NOW, policy, runtime, trainjob
from trainguard.webhook.policy.pipeline import mutate_trainjob
from trainguard.webhook.policy.verdict import AdmissionInput, ClusterSnapshot

OWNED_SPEC = {"runtimePatches", "suspend", "activeDeadlineSeconds"}

label_values = st.text(alphabet="abcxyz019-", min_size=1, max_size=6)
user_patch = st.builds(
    lambda mgr, pool: {"manager": f"acme.io/{mgr}", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": {"nodeSelector": {"pool": pool}}}}}}]}}}},
    st.sampled_from(["a", "b", "c"]), label_values)

policies = st.lists(st.builds(
    lambda name, prio, queue, topo, target, placement, tol: policy(
        name, priority=prio,
        **({"scheduling": {"kueue": {"queueName": queue}}} if queue else {}),
        **({"topology": {"levels": GPU_LEVELS[:topo], "target": target, "placement": placement,
                         "kaiTopology": "t"}} if topo else {}),
        **({"defaults": {"tolerations": [{"key": tol, "operator": "Exists"}], "nodeSelector": {"pool": tol}}}
           if tol else {})),
    st.sampled_from(["p1", "p2", "p3"]), st.integers(-2, 2), st.none() | label_values, st.integers(0, 4),
    st.sampled_from(["Kueue", "KAI", "Both"]), st.sampled_from(["Required", "Preferred"]), st.none() | label_values,
), max_size=3, unique_by=lambda p: p["metadata"]["name"])

jobs = st.builds(
    lambda nodes, gpus, labels, patches, extra: trainjob(
        trainer={"numNodes": nodes, **({"resourcesPerNode": {"limits": {"nvidia.com/gpu": gpus}}} if gpus else {})},
        labels=labels or None, patches=list({p["manager"]: p for p in patches}.values()) or None,
        **({"futureField": extra} if extra else {})),
    st.integers(1, 200), st.sampled_from([0, 1, 4, 8]),
    st.dictionaries(st.sampled_from(["team", "kueue.x-k8s.io/queue-name"]), label_values, max_size=2),
    st.lists(user_patch, max_size=2), st.none() | st.dictionaries(label_values, label_values, max_size=2))


def mutate(obj, snapshot):
    return mutate_trainjob(AdmissionInput("CREATE", obj, None, NOW), snapshot).obj


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=jobs, pols=policies)
def test_mutation_is_idempotent_patchable_and_lossless(job, pols):
    snapshot = ClusterSnapshot(cluster_training_runtimes={"torch-distributed": runtime()},
                               policies={p["metadata"]["name"]: p for p in pols})
    original = copy.deepcopy(job)
    once = mutate(job, snapshot)
    assert job == original, "the input object must not be modified"
    assert mutate(once, snapshot) == once

    patch = jsonpatch.make_patch(original, once)
    assert patch.apply(copy.deepcopy(original)) == once

    assert {k: v for k, v in once["spec"].items() if k not in OWNED_SPEC} == \
        {k: v for k, v in original["spec"].items() if k not in OWNED_SPEC}
    for key, value in (original["metadata"].get("labels") or {}).items():
        assert once["metadata"]["labels"][key] == value, "user labels win"
    user = [p for p in original["spec"].get("runtimePatches") or []]
    kept = [{k: v for k, v in p.items() if k != "time"} for p in once["spec"].get("runtimePatches") or []
            if p["manager"] != "trainguard.io/policy"]
    assert kept == user, "user patches keep their content and order"
    assert sum(p["manager"] == "trainguard.io/policy" for p in once["spec"].get("runtimePatches") or []) <= 1
