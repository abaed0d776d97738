"""Reserved names of the trainer.kubeflow.org runtime contract (reference §1.2, §3).

They are part of the wire contract with the SDK, Kueue and the training images, so they are spelled exactly as
upstream spells them; one place, so a typo cannot make two modules disagree.
"""

from __future__ import annotations

TRAINER_API_VERSION = "trainer.kubeflow.org/v1alpha1"
TRAINER_GROUP = "trainer.kubeflow.org"
TRAINJOB_KIND = "TrainJob"
TRAINING_RUNTIME_KIND = "TrainingRuntime"
CLUSTER_TRAINING_RUNTIME_KIND = "ClusterTrainingRuntime"
JOBSET_API_VERSION = "jobset.x-k8s.io/v1alpha2"

# replicatedJob template label naming the role a job plays in the TrainJob.
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
ANCESTOR_TRAINER = "trainer"
ANCESTOR_DATASET_INITIALIZER = "dataset-initializer"
ANCESTOR_MODEL_INITIALIZER = "model-initializer"

# replicatedJob and container names.
NODE = "node"
LAUNCHER = "launcher"
DATASET_INITIALIZER = "dataset-initializer"
MODEL_INITIALIZER = "model-initializer"

TRAINER_PORT = 29500
COMPLETION_INDEX_FIELD_PATH = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
STORAGE_URI_ENV = "STORAGE_URI"

# trainguard extras the TrainJob API cannot carry (written by the policy webhook, applied by the build).
SCHEDULER_NAME_ANNOTATION = "trainguard.io/scheduler-name"
POLICY_EFFECTS_ANNOTATION = "trainguard.io/policy-effects"
DATASET_CACHE_ANNOTATION = "trainguard.io/dataset-cache"
