"""``trainguard render`` reads its input as ``kubectl apply --validate=strict`` does: each document is decoded against
its CRD's schema (crds/), so a misspelt field, a wrong type or a wrong apiVersion exits 2 naming the file and the
field instead of being ignored or copied into the output. Also: ``-f -`` and directories, a null namespace, and a
reader that closes the pipe early."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from trainguard.webhook.render import EXIT_BROKEN_PIPE, main

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
TORCH = (EXAMPLES / "torch-distributed-gpu.yaml").read_text()
POLICY = (EXAMPLES / "gpu-topology-policy.yaml").read_text()
NOW = datetime(2026, 9, 1, 12, 0, 0, tzinfo=timezone.utc)


def render(*files, stdin=None, **kw):
    out, err = io.StringIO(), io.StringIO()
    code = main([str(f) for f in files], now=NOW, stdout=out, stderr=err,
                stdin=io.StringIO(stdin) if stdin is not None else None, **kw)
    return code, [o for o in yaml.safe_load_all(out.getvalue()) if o], err.getvalue()


def write(tmp_path, name, text):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def replaced(text, old, new):
    assert old in text, old
    return text.replace(old, new, 1)


def test_a_misspelt_policy_limit_is_refused_not_ignored(tmp_path):
    # maxGpuPerNode is not a field: before, the policy had no per-node limit and the 8-GPU node was admitted.
    policy = write(tmp_path, "policy.yaml", replaced(POLICY, "maxGpusPerNode:", "maxGpuPerNode:"))
    code, objects, err = render(EXAMPLES / "torch-distributed-gpu.yaml", policy)
    assert (code, objects) == (2, [])
    assert f'{policy}:9: TrainJobPolicy "gpu-teams" spec.limits.maxGpuPerNode: unknown field' in err, err


def test_an_unknown_trainjob_field_is_refused_not_copied(tmp_path):
    job = write(tmp_path, "job.yaml", replaced(TORCH, "    numNodes: 4\n", "    numNodes: 4\n    numNode: 2\n"))
    code, objects, err = render(job)
    assert (code, objects) == (2, [])
    assert f'{job}:16: TrainJob "llm-ddp" spec.trainer.numNode: unknown field' in err, err


def test_a_misspelt_runtime_container_field_is_refused(tmp_path):
    rt = write(tmp_path, "rt.yaml", replaced(TORCH, "{name: node, image:", "{name: node, imagePullPolice: Always, image:"))
    code, _, err = render(rt)
    assert code == 2
    assert (f'{rt}:3: ClusterTrainingRuntime "torch-distributed" spec.template.spec.replicatedJobs[0].template.spec.'
            "template.spec.containers[0].imagePullPolice: unknown field") in err, err


def test_a_wrong_type_is_refused_naming_the_field(tmp_path):
    job = write(tmp_path, "job.yaml", replaced(TORCH, "numNodes: 4", 'numNodes: "4"'))
    code, _, err = render(job)
    assert code == 2
    assert 'TrainJob "llm-ddp" spec.trainer.numNodes: Invalid value: string: must be of type integer' in err, err


@pytest.mark.parametrize("old, new, message", [
    ("apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob", "apiVersion: batch/v1\nkind: TrainJob",
     ":16: TrainJob has apiVersion 'batch/v1'; set apiVersion: trainer.kubeflow.org/v1alpha1"),
    ("apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob", "kind: TrainJob",
     ":16: TrainJob has no apiVersion; set apiVersion: trainer.kubeflow.org/v1alpha1"),
])
def test_a_wrong_api_version_is_refused(tmp_path, old, new, message):
    job = write(tmp_path, "job.yaml", replaced(TORCH, old, new))
    code, _, err = render(job)
    assert code == 2 and f"{job}{message}" in err, err


def test_every_unknown_field_of_a_document_is_listed_up_to_the_cap(tmp_path):
    extra = "".join(f"    typo{i}: 1\n" for i in range(25))
    job = write(tmp_path, "job.yaml", replaced(TORCH, "    numNodes: 4\n", "    numNodes: 4\n" + extra))
    code, _, err = render(job)
    assert code == 2
    assert [f"spec.trainer.typo{i}: unknown field" in err for i in range(25)] == [True] * 20 + [False] * 5
    lines = err.splitlines()
    assert len(lines) == 21 and all(line.startswith(f"trainguard render: {job}:16: ") for line in lines), err
    assert lines[-1].endswith('TrainJob "llm-ddp" and 5 more'), err


def test_the_old_trainjob_is_checked_too(tmp_path):
    old = write(tmp_path, "old.yaml", TORCH.split("---\n")[1].replace("numNodes: 4", "numNodez: 4"))
    code, _, err = render(EXAMPLES / "torch-distributed-gpu.yaml", operation="UPDATE", old=str(old))
    assert code == 2 and f'{old}:1: TrainJob "llm-ddp" spec.trainer.numNodez: unknown field' in err, err


def test_a_null_namespace_is_defaulted_as_a_missing_one(tmp_path):
    job = write(tmp_path, "job.yaml", replaced(TORCH, "namespace: team-a}", "namespace: null}"))
    code, objects, err = render(job)
    assert code == 0, err
    trainjob, jobset = objects[0], objects[1]
    assert trainjob["metadata"]["namespace"] == jobset["metadata"]["namespace"] == "default"


def test_missing_crds_exit_2_naming_the_flag(tmp_path):
    code, _, err = render(EXAMPLES / "torch-distributed-gpu.yaml", crds=tmp_path)
    assert code == 2 and "pass --crds DIR" in err


def test_dash_reads_stdin():
    code, objects, err = render("-", stdin=TORCH)
    assert code == 0, err
    assert [o["kind"] for o in objects] == ["TrainJob", "JobSet", "ConfigMap"]
    code, _, err = render("-", stdin=TORCH.replace("numNodes: 4", "numNodez: 4"))
    assert code == 2 and '<stdin>:16: TrainJob "llm-ddp" spec.trainer.numNodez: unknown field' in err, err


def test_a_directory_is_read_recursively_in_sorted_order(tmp_path):
    runtime, job = TORCH.split("---\n")
    namespace, policy = POLICY.split("\n---\n")
    write(tmp_path, "in/z.yaml", job.replace("name: llm-ddp", "name: job-z"))
    write(tmp_path, "in/b/job.yml", job.replace("name: llm-ddp", "name: job-b"))
    write(tmp_path, "in/a.yaml", runtime)
    write(tmp_path, "in/c/namespace.json", json.dumps(yaml.safe_load(namespace)))
    write(tmp_path, "in/c/d/policy.yaml", policy)
    write(tmp_path, "in/notes.txt", "not: a manifest\n")
    code, objects, err = render(tmp_path / "in")
    assert code == 0, err
    trainjobs = [o for o in objects if o["kind"] == "TrainJob"]
    assert [t["metadata"]["name"] for t in trainjobs] == ["job-b", "job-z"]
    # The namespace (JSON) and the policy two levels down were read: the policy's queue label is set.
    assert trainjobs[0]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-gpu"
    write(tmp_path, "in/c/zz.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")
    code, _, err = render(tmp_path / "in")
    assert code == 2 and f"{tmp_path / 'in/c/zz.yaml'}:1: unknown kind 'Pod'" in err, err


def test_a_reader_that_closes_the_pipe_early_ends_render_quietly(tmp_path):
    # 60 TrainJobs print about 180 KB, more than a pipe holds, so render is still writing when the reader leaves.
    runtime, job = TORCH.split("---\n")
    jobs = "".join(f"---\n{job.replace('name: llm-ddp', f'name: job-{i}')}" for i in range(60))
    path = write(tmp_path, "many.yaml", runtime + jobs)
    proc = subprocess.Popen([sys.executable, "-m", "trainguard.webhook.cli", "render", "-f", str(path),
                             "--now", "2026-09-01T12:00:00Z"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline() == b"---\n"
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == EXIT_BROKEN_PIPE == 141
    assert err == "", err


def test_the_crds_flag_reaches_render(tmp_path, capsys):
    from trainguard.webhook.cli import build_parser

    args = build_parser().parse_args(["render", "-f", str(EXAMPLES / "torch-distributed-gpu.yaml"),
                                      "--crds", str(tmp_path)])
    assert args.run(args) == 2
    assert f"{tmp_path}: no CRDs to check the input against; pass --crds DIR" in capsys.readouterr().err
    args = build_parser().parse_args(["render", "-f", str(EXAMPLES / "torch-distributed-gpu.yaml"),
                                      "--crds", str(REPO / "crds"), "--now", "2026-09-01T12:00:00Z"])
    assert args.run(args) == 0
