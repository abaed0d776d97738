"""Reserved names of the trainer.kubeflow.org runtime contract (upstream's ``pkg/constants``).

They are part of the wire contract with the SDK, Kueue and the training images, so they are spelled exactly as
upstream spells them; one place, so a typo cannot make two modules disagree.
"""

from __future__ import annotations

from trainguard.webhook.api import constants as api

# The API's own constants, under the names the runtime framework uses (one source, trainguard.webhook.api.constants).
TRAINER_API_VERSION = api.TRAINER_API_VERSION
TRAINER_GROUP = api.TRAINER_GROUP
TRAINJOB_KIND = api.TRAINJOB_KIND
TRAINING_RUNTIME_KIND = api.TRAINING_RUNTIME_KIND
CLUSTER_TRAINING_RUNTIME_KIND = api.CLUSTER_TRAINING_RUNTIME_KIND
JOBSET_API_VERSION = api.JOBSET_API_VERSION

# replicatedJob template label naming the role a job plays in the TrainJob.
ANCESTOR_LABEL = api.LABEL_TRAINJOB_ANCESTOR
ANCESTOR_TRAINER = api.ANCESTOR_TRAINER
ANCESTOR_DATASET_INITIALIZER = api.ANCESTOR_DATASET_INITIALIZER
ANCESTOR_MODEL_INITIALIZER = api.ANCESTOR_MODEL_INITIALIZER

# replicatedJob and container names.
NODE = api.NODE
LAUNCHER = api.LAUNCHER
DATASET_INITIALIZER = api.DATASET_INITIALIZER
MODEL_INITIALIZER = api.MODEL_INITIALIZER

TRAINER_PORT = api.TORCH_MASTER_PORT
COMPLETION_INDEX_FIELD_PATH = f"metadata.annotations['{api.ANNOTATION_JOB_COMPLETION_INDEX}']"
STORAGE_URI_ENV = "STORAGE_URI"

# trainguard extras the TrainJob API cannot carry (written by the policy webhook, applied by the build).
SCHEDULER_NAME_ANNOTATION = api.ANNOTATION_SCHEDULER_NAME
POLICY_EFFECTS_ANNOTATION = api.ANNOTATION_POLICY_EFFECTS
DATASET_CACHE_ANNOTATION = api.ANNOTATION_DATASET_CACHE
