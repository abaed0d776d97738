"""The TrainJobPolicy view: every field the rules read, absent, null, present, empty and of the wrong type.

Absent and null read as the CRD default (a file given to ``render`` is not defaulted by an apiserver); a wrong type
is the door's to refuse (``parse_policy`` names the field), and a section of the wrong type reads as absent, so a
view over an unvalidated dict never raises. The view copies nothing and writes nothing.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

import pytest

from trainguard.webhook.api.meta import label_selector_matches
from trainguard.webhook.api.views import LabelSelector, PolicyTopology, TopologyLevel, TrainJobPolicy
from trainguard.webhook.policy.policy_model import PolicyParseError, parse_policy

ABSENT: Any = object()
LEVEL = {"nodeLabel": "kubernetes.io/hostname", "gpusPerDomain": 8}
TOPOLOGY = {"topology": {"levels": [LEVEL]}}  # a topology the CRD accepts: levels are required


def policy(path: str, value: Any, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """A TrainJobPolicy whose ``spec.<path>`` is ``value`` (parents created; ABSENT: parents only)."""
    spec = copy.deepcopy(base or {})
    *parents, leaf = path.split(".")
    node = spec
    for key in parents:
        node = node.setdefault(key, {})
    if value is not ABSENT:
        node[leaf] = value
    return {"apiVersion": "trainguard.io/v1alpha1", "kind": "TrainJobPolicy", "metadata": {"name": "p"}, "spec": spec}


def _kueue(field: str) -> Callable[[TrainJobPolicy], Any]:
    return lambda p: getattr(p.spec.scheduling.kueue, field) if p.spec.scheduling.kueue else None


def _selector(view: LabelSelector | None) -> Any:
    return None if view is None else dict(view.raw)


# (spec path, read, default when absent or null, a valid value, what it reads as, a value of the wrong type, base)
FIELDS: list[tuple[str, Callable[[TrainJobPolicy], Any], Any, Any, Any, Any, dict[str, Any] | None]] = [
    ("mode", lambda p: p.spec.mode, "Enforce", "Audit", "Audit", 1, None),
    ("priority", lambda p: p.spec.priority, 0, -5, -5, "high", None),
    ("selector.namespaceSelector", lambda p: _selector(p.spec.selector.namespace), None,
     {"matchLabels": {"team": "a"}}, {"matchLabels": {"team": "a"}}, "team=a", None),
    ("selector.trainJobSelector", lambda p: _selector(p.spec.selector.trainjob), None,
     {"matchExpressions": [{"key": "k", "operator": "Exists"}]},
     {"matchExpressions": [{"key": "k", "operator": "Exists"}]}, ["k"], None),
    ("selector.runtimeSelector.names", lambda p: p.spec.selector.runtime_names, None, ["torch", "mpi"],
     ("torch", "mpi"), "torch", None),
    ("selector.runtimeSelector.kinds", lambda p: p.spec.selector.runtime_kinds, None, ["TrainingRuntime"],
     ("TrainingRuntime",), "TrainingRuntime", None),
    ("selector.runtimeSelector.labelSelector", lambda p: _selector(p.spec.selector.runtime_labels), None,
     {"matchLabels": {"f": "torch"}}, {"matchLabels": {"f": "torch"}}, 3, None),
    ("scheduling.kueue.queueName", _kueue("queue_name"), None, "team-a", "team-a", 7, None),
    ("scheduling.kueue.priorityClass", _kueue("priority_class"), None, "high", "high", True, None),
    ("scheduling.kai.queue", lambda p: p.spec.scheduling.kai_queue, None, "research", "research", 7, None),
    ("scheduling.schedulerName", lambda p: p.spec.scheduling.scheduler_name, None, "kai-scheduler",
     "kai-scheduler", ["kai"], None),
    ("topology.gpuResourceName", lambda p: p.spec.topology.gpu_resource_name, "nvidia.com/gpu", "amd.com/gpu",
     "amd.com/gpu", 1, TOPOLOGY),
    ("topology.placement", lambda p: p.spec.topology.placement, "Preferred", "Required", "Required", "Sometimes",
     TOPOLOGY),
    ("topology.target", lambda p: p.spec.topology.schedulers, ("Kueue",), "Both", ("Kueue", "KAI"), "Slurm",
     TOPOLOGY),
    ("topology.kaiTopology", lambda p: p.spec.topology.kai_topology, None, "gpu-topology", "gpu-topology", 1,
     TOPOLOGY),
    ("topology.levels", lambda p: [(lv.node_label, lv.gpus_per_domain) for lv in p.spec.topology.levels], [],
     [LEVEL], [("kubernetes.io/hostname", 8)], {"host": 8}, None),
    ("limits.maxNodes", lambda p: p.spec.limits.max_nodes, None, 4, 4, "many", None),
    ("limits.maxGpusPerNode", lambda p: p.spec.limits.max_gpus_per_node, None, 8, 8, 8.5, None),
    ("limits.maxTotalGpus", lambda p: p.spec.limits.max_total_gpus, None, 64, 64, "64", None),
    ("limits.allowedRuntimes", lambda p: p.spec.limits.allowed_runtimes, (), ["torch"], ("torch",), "torch", None),
    ("limits.allowedImagePrefixes", lambda p: p.spec.limits.allowed_image_prefixes, (), ["ghcr.io/acme/"],
     ("ghcr.io/acme/",), "ghcr.io/acme/", None),
    ("limits.requiredResourceRequests", lambda p: p.spec.limits.required_requests, (), ["cpu", "memory"],
     ("cpu", "memory"), "cpu", None),
    ("limits.podSecurity", lambda p: p.spec.limits.pod_security, None, "Baseline", "Baseline", "Restricted", None),
    ("defaults.activeDeadlineSeconds", lambda p: p.spec.defaults.active_deadline_seconds, None, 3600, 3600, "1h",
     None),
    ("defaults.labels", lambda p: p.spec.defaults.labels, None, {"team": "a"}, {"team": "a"}, ["team"], None),
    ("defaults.nodeSelector", lambda p: p.spec.defaults.node_selector, None, {"pool": "gpu"}, {"pool": "gpu"},
     "pool=gpu", None),
    ("defaults.tolerations", lambda p: p.spec.defaults.tolerations, None, [{"key": "gpu", "operator": "Exists"}],
     ({"key": "gpu", "operator": "Exists"},), {"key": "gpu"}, None),
]
IDS = [f[0] for f in FIELDS]


@pytest.mark.parametrize(("path", "read", "default", "value", "reads", "wrong", "base"), FIELDS, ids=IDS)
def test_absent_and_null_read_as_the_crd_default(path, read, default, value, reads, wrong, base):
    assert read(TrainJobPolicy(policy(path, ABSENT, base))) == default
    assert read(TrainJobPolicy(policy(path, None, base))) == default


@pytest.mark.parametrize(("path", "read", "default", "value", "reads", "wrong", "base"), FIELDS, ids=IDS)
def test_a_valid_value_passes_the_door_and_reads_as_written(path, read, default, value, reads, wrong, base):
    obj = policy(path, value, base)
    view = parse_policy(obj)
    assert isinstance(view, TrainJobPolicy) and view.raw is obj  # the view over the caller's dict, no copy
    assert read(view) == reads


@pytest.mark.parametrize(("path", "read", "default", "value", "reads", "wrong", "base"), FIELDS, ids=IDS)
def test_a_wrong_type_is_refused_at_the_door_naming_the_field(path, read, default, value, reads, wrong, base):
    with pytest.raises(PolicyParseError) as info:
        parse_policy(policy(path, wrong, base))
    assert info.value.policy == "p"
    assert info.value.path.startswith(f"spec.{path}"), info.value.path


@pytest.mark.parametrize(
    ("path", "read", "empty"),
    [
        ("selector.runtimeSelector.names", lambda p: p.spec.selector.runtime_names, []),
        ("selector.runtimeSelector.kinds", lambda p: p.spec.selector.runtime_kinds, []),
        ("defaults.labels", lambda p: p.spec.defaults.labels, {}),
        ("defaults.nodeSelector", lambda p: p.spec.defaults.node_selector, {}),
        ("defaults.tolerations", lambda p: p.spec.defaults.tolerations, []),
        ("topology.gpuResourceName", lambda p: p.spec.topology.gpu_resource_name, ""),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_an_empty_value_constrains_or_sets_nothing(path, read, empty):
    expected = "nvidia.com/gpu" if path == "topology.gpuResourceName" else None
    assert read(TrainJobPolicy(policy(path, empty, TOPOLOGY))) == expected


LISTS = [(f[0], f[1]) for f in FIELDS if isinstance(f[3], list) and f[0] != "topology.levels"]
LISTS.append(("topology.levels", lambda p: p.spec.topology.levels))


@pytest.mark.parametrize(("path", "read"), LISTS, ids=[x[0] for x in LISTS])
def test_a_list_of_the_wrong_type_reads_as_empty(path, read):
    # Never iterated as written: a string would read as its characters.
    assert read(TrainJobPolicy(policy(path, "torch", TOPOLOGY))) in ((), None)


@pytest.mark.parametrize("section", ["selector", "scheduling", "topology", "limits", "defaults"])
def test_a_section_of_the_wrong_type_reads_as_absent(section):
    wrong = policy(section, "oops")
    view = TrainJobPolicy(wrong)
    absent = TrainJobPolicy(policy(section, ABSENT))
    for read, _ in [(f[1], f[0]) for f in FIELDS if f[0].startswith(section + ".") and section != "topology"]:
        assert read(view) == read(absent)
    if section == "topology":
        assert PolicyTopology("oops").levels == () and PolicyTopology("oops").placement == "Preferred"
    with pytest.raises(PolicyParseError) as info:
        parse_policy(wrong)
    assert info.value.path == f"spec.{section}"


@pytest.mark.parametrize("path", ["selector.runtimeSelector", "selector.namespaceSelector", "scheduling.kueue",
                                  "scheduling.kai", "topology.levels", "selector.trainJobSelector.matchExpressions"])
@pytest.mark.parametrize("wrong", ["x", 3, ["x"]])
def test_an_object_of_the_wrong_type_never_raises(path, wrong):
    view = TrainJobPolicy(policy(path, wrong, TOPOLOGY))
    for _, read, *_ in FIELDS:
        read(view)
    if view.spec.selector.trainjob is not None:  # a malformed term has no known operator: it matches nothing
        assert label_selector_matches(view.spec.selector.trainjob, {"k": "v"}) is (wrong != ["x"])


@pytest.mark.parametrize(
    ("spec", "topology_is_none", "kueue_is_none"),
    [({}, True, True), ({"topology": None, "scheduling": {"kueue": None}}, True, True),
     ({"topology": {"levels": [LEVEL]}, "scheduling": {"kueue": {}}}, False, False)],
    ids=["absent", "null", "present"],
)
def test_optional_sections_are_none_only_when_not_written(spec, topology_is_none, kueue_is_none):
    view = TrainJobPolicy({"spec": spec})
    assert (view.spec.topology is None) is topology_is_none
    assert (view.spec.scheduling.kueue is None) is kueue_is_none


@pytest.mark.parametrize(
    ("obj", "name", "enforcing"),
    [({}, "", True), ({"metadata": None, "spec": None}, "", True), ({"metadata": "x", "spec": []}, "", True),
     ({"metadata": {"name": "gpu"}, "spec": {"mode": "Audit"}}, "gpu", False),
     ({"metadata": {"name": "gpu"}, "spec": {"mode": "Enforce"}}, "gpu", True)],
    ids=["absent", "null", "wrong-type", "audit", "enforce"],
)
def test_name_and_mode(obj, name, enforcing):
    view = TrainJobPolicy(obj)
    assert (view.name, view.enforcing) == (name, enforcing)


def test_the_view_copies_nothing_and_writes_nothing():
    obj = policy("defaults", {"labels": {"a": "b"}, "nodeSelector": {"n": "1"}, "tolerations": [{"key": "t"}]},
                 {"topology": {"levels": [LEVEL]}, "selector": {"namespaceSelector": {"matchLabels": {"x": "y"}}}})
    before = copy.deepcopy(obj)
    view = TrainJobPolicy(obj)
    for _, read, *_ in FIELDS:
        try:
            read(view)
        except AttributeError:  # a nested read under a section this object does not write (kueue)
            pass
    view.spec.topology.effective()
    assert obj == before
    defaults = obj["spec"]["defaults"]
    assert view.spec.defaults.labels is defaults["labels"]
    assert view.spec.defaults.node_selector is defaults["nodeSelector"]
    assert view.spec.defaults.tolerations[0] is defaults["tolerations"][0]
    assert view.spec.selector.namespace.raw is obj["spec"]["selector"]["namespaceSelector"]
    assert view.spec.topology.levels[0].raw is LEVEL or view.spec.topology.levels[0].raw == LEVEL


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        ({"matchLabels": {"a": "b"}}, {"matchLabels": {"a": "b"}}, True),
        ({"matchLabels": {"a": "b"}, "matchExpressions": None}, {"matchLabels": {"a": "b"}}, True),  # null = absent
        ({"matchExpressions": [{"key": "k", "operator": "Exists", "values": None}]},
         {"matchExpressions": [{"key": "k", "operator": "Exists"}]}, True),
        ({"matchLabels": {}}, {}, False),  # as the API model compares them: {} is written, absent is not
        ({"matchLabels": {"a": "b"}}, {"matchLabels": {"a": "c"}}, False),
    ],
    ids=["same", "null-expressions", "null-values", "empty-vs-absent", "different"],
)
def test_label_selectors_compare_by_what_they_select(a, b, equal):
    assert (LabelSelector(a) == LabelSelector(b)) is equal
    assert (LabelSelector(a) != LabelSelector(b)) is not equal


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ({}, {}, True),
        ({"matchLabels": {"team": "a"}}, {"team": "a", "x": "y"}, True),
        ({"matchLabels": {"team": "a"}}, {"team": "b"}, False),
        ({"matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}]}, {"team": "b"}, True),
        ({"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]}, {}, False),
        ({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]}, {"team": "a"}, False),
        ({"matchExpressions": [{"key": "team", "operator": "Exists"}]}, {"team": ""}, True),
        ({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}, {"team": "a"}, False),
        ({"matchExpressions": [{"key": "team", "operator": "In"}]}, {"team": "a"}, False),  # values absent: none
        ({"matchExpressions": [{"key": "team", "operator": "Exists"}, {"key": "gpu", "operator": "Exists"}]},
         {"team": "a"}, False),  # every term must hold
    ],
)
def test_the_selector_view_is_what_label_selector_matches_reads(selector, labels, matches):
    assert label_selector_matches(LabelSelector(selector), labels) is matches


def test_topology_levels_compare_and_hash_by_value():
    a, b = TopologyLevel(dict(LEVEL)), TopologyLevel(dict(LEVEL))
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != TopologyLevel({"nodeLabel": "kubernetes.io/hostname", "gpusPerDomain": 4})


def test_topology_settings_compare_with_the_defaults_applied():
    written = PolicyTopology({"levels": [LEVEL], "placement": "Preferred", "target": "Kueue",
                              "gpuResourceName": "nvidia.com/gpu"})
    assert written.effective() == PolicyTopology({"levels": [LEVEL]}).effective()
    assert written.effective() != PolicyTopology({"levels": [LEVEL], "target": "Both"}).effective()
    assert PolicyTopology({"levels": [LEVEL]}).effective() == {
        "gpu_resource_name": "nvidia.com/gpu", "placement": "Preferred", "schedulers": ("Kueue",),
        "kai_topology": None, "levels": ({"node_label": "kubernetes.io/hostname", "gpus_per_domain": 8},)}


@pytest.mark.parametrize("raw", [{}, {"nodeLabel": None, "gpusPerDomain": None, "key": None, "operator": None}, "x"],
                         ids=["absent", "null", "wrong-type"])
def test_a_level_and_a_term_read_missing_fields_as_empty(raw):
    level = TopologyLevel(raw)
    assert (level.node_label, level.gpus_per_domain) == ("", 0)  # a level that holds no GPU: never chosen
    term = LabelSelector({"matchExpressions": [raw]}).match_expressions[0]
    assert (term.key, term.operator, term.values) == ("", "", None)
    assert label_selector_matches(LabelSelector({"matchExpressions": [raw]}), {"": ""}) is False  # no operator: no match
