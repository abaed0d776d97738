"""The runtime plugin registry: exactly upstream's plugins, each capability where it is offered, and a new plugin
registered in one place is used by the effective job, validation and the build."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
import yaml

from trainguard.webhook.field import FieldError, invalid
from trainguard.webhook.runtime import build_objects, effective_job, placeholder_keys, registry, validate_trainjob
from trainguard.webhook.runtime.draft import env, upsert_into_container
from trainguard.webhook.runtime.objects import owned_object
from trainguard.webhook.runtime.plugin import (
    ML,
    BuildsObjects,
    CountsNodes,
    RuntimePlugin,
    ValidatesTrainJob,
)

from .fixtures import LLM_DDP, TORCH_RUNTIME, deep

REPO = Path(__file__).resolve().parents[3]


def _crd_policy_fields(field: str) -> set[str]:
    """The fields of ``spec.<field>`` in the ClusterTrainingRuntime CRD (upstream's, see crds/)."""
    text = (REPO / "crds" / "trainer.kubeflow.org_clustertrainingruntimes.yaml").read_text()
    crd = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # the CRD is large: libyaml
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return set(schema["properties"]["spec"]["properties"][field]["properties"])


def test_the_registry_holds_exactly_upstreams_plugins():
    # Upstream v2.3's registry (pkg/runtime/framework/plugins/registry.go): torch, mpi, jax, xgboost, flux and
    # plainml; coscheduling and volcano. Each selectable one is a field of the runtime's mlPolicy/podGroupPolicy.
    ml = {p.NAME for p in registry.ml_policies()}
    assert ml == {"torch", "mpi", "jax", "xgboost", "flux", "plain"}
    assert ml - {registry.FALLBACK_ML.NAME} == _crd_policy_fields("mlPolicy") - {"numNodes"}
    assert {p.NAME for p in registry.pod_group_policies()} == {"coscheduling", "volcano"} == _crd_policy_fields("podGroupPolicy")
    assert registry.PLUGINS[-1] is registry.FALLBACK_ML


# What each plugin can do: the capabilities the pipeline finds on it (and only those).
CAPABILITIES = {
    "torch": {ValidatesTrainJob},
    "mpi": {ValidatesTrainJob, BuildsObjects, CountsNodes},
    "jax": set(),
    "xgboost": {ValidatesTrainJob},
    "flux": {ValidatesTrainJob, BuildsObjects},
    "plain": set(),
    "coscheduling": {BuildsObjects},
    "volcano": {ValidatesTrainJob, BuildsObjects},
}


@pytest.mark.parametrize("plugin", registry.PLUGINS, ids=lambda p: p.NAME)
def test_each_plugin_offers_its_capabilities(plugin):
    assert isinstance(plugin, RuntimePlugin)
    offered = {cap for cap in (ValidatesTrainJob, BuildsObjects, CountsNodes) if isinstance(plugin, cap)}
    assert offered == CAPABILITIES[plugin.NAME]
    # What the pipeline asks (cached per plugin and capability) agrees with the Protocols.
    assert {cap for cap in (ValidatesTrainJob, BuildsObjects, CountsNodes) if registry.offers(plugin, cap)} == offered


def test_node_job_policies_are_the_ml_policies_that_address_node():
    assert set(registry.node_job_policies()) == {"torch", "mpi", "jax", "xgboost", "flux"}


def _toy_plugin() -> types.ModuleType:
    """An ML policy in the shape of the built-in modules: NAME, KIND, enforce, validate, build."""
    toy = types.ModuleType("toy")
    toy.NAME = "toy"
    toy.KIND = ML

    def enforce(draft):
        rj = draft.trainer_job()
        draft.counts[rj["name"]] = 3
        upsert_into_container(draft, rj, "node", env_vars=[env("TOY_WORLD", draft.counts[rj["name"]])])

    def validate(draft, ctx) -> list[FieldError]:
        if draft.trainer.num_nodes == 7:
            return [invalid("spec.trainer.numNodes", 7, "toy runs on any number of nodes but 7")]
        return []

    def build(draft, ctx) -> list[dict]:
        cm = owned_object("v1", "ConfigMap", f"{draft.name}-toy", ctx.trainjob)
        cm["data"] = {"pods": str(sum(ps.pods for ps in ctx.pod_sets))}
        return [cm]

    toy.enforce, toy.validate, toy.build = enforce, validate, build
    return toy


@pytest.fixture
def toy():
    plugin = registry.register(_toy_plugin())
    try:
        yield plugin
    finally:
        registry.unregister(plugin)


def _toy_runtime() -> dict:
    rt = deep(TORCH_RUNTIME)
    rt["metadata"]["name"] = "toy"
    rt["spec"]["mlPolicy"] = {"numNodes": 1, "toy": {}}
    return rt


def _node_env(job) -> dict:
    node = next(rj for rj in job.spec["replicatedJobs"] if rj["name"] == "node")
    container = node["template"]["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in container.get("env") or []}


def test_a_registered_plugin_is_used_by_effective_job_validation_and_build(toy):
    tj = deep(LLM_DDP)
    job = effective_job(tj, _toy_runtime())
    assert (job.ml_policy, job.num_nodes) == ("toy", 3)
    assert _node_env(job)["TOY_WORLD"] == "3"
    assert "PET_NNODES" not in _node_env(job)  # torch did not run

    assert validate_trainjob(tj, None, _toy_runtime(), None) == ([], [])
    tj["spec"]["trainer"]["numNodes"] = 7
    errors, _ = validate_trainjob(tj, None, _toy_runtime(), None)
    assert [str(e) for e in errors] == ["spec.trainer.numNodes: Invalid value: 7: toy runs on any number of nodes but 7"]

    objects = build_objects(deep(LLM_DDP), _toy_runtime(), keys=placeholder_keys())
    toys = [o for o in objects if o["kind"] == "ConfigMap"]
    assert [(o["metadata"]["name"], o["data"]) for o in toys] == [("llm-ddp-toy", {"pods": "3"})]


def test_an_unregistered_policy_falls_back_to_plain():
    job = effective_job(deep(LLM_DDP), _toy_runtime())
    assert job.ml_policy == "plain"
    assert "TOY_WORLD" not in _node_env(job)


def test_register_refuses_a_second_plugin_of_a_name_and_what_is_not_a_plugin(toy):
    with pytest.raises(ValueError, match="already registered"):
        registry.register(_toy_plugin())
    not_a_plugin = types.SimpleNamespace(NAME="half", KIND=ML)  # no enforce
    with pytest.raises(TypeError):
        registry.register(not_a_plugin)
    wrong_kind = types.SimpleNamespace(NAME="odd", KIND="scheduler", enforce=lambda draft: None)
    with pytest.raises(TypeError):
        registry.register(wrong_kind)
    assert [p.NAME for p in registry.PLUGINS].count("toy") == 1
