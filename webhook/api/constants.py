"""Reserved names, labels, annotations and defaults of the trainer.kubeflow.org API (v2.3).

One place for every string the API gives meaning to, so policy, runtime build and reconciler agree on them.
Values are facts about upstream Kubeflow Trainer; see shared/reference/kubeflow-trainer-v2.3.md sections 1-3.
"""

from __future__ import annotations

# -- groups, versions, kinds ---------------------------------------------------------------------------------
TRAINER_GROUP = "trainer.kubeflow.org"
TRAINER_VERSION = "v1alpha1"
TRAINER_API_VERSION = f"{TRAINER_GROUP}/{TRAINER_VERSION}"
TRAINJOB_KIND = "TrainJob"
TRAINING_RUNTIME_KIND = "TrainingRuntime"
CLUSTER_TRAINING_RUNTIME_KIND = "ClusterTrainingRuntime"

JOBSET_GROUP = "jobset.x-k8s.io"
JOBSET_VERSION = "v1alpha2"
JOBSET_API_VERSION = f"{JOBSET_GROUP}/{JOBSET_VERSION}"
JOBSET_KIND = "JobSet"

TRAINGUARD_GROUP = "trainguard.io"
TRAINGUARD_VERSION = "v1alpha1"
TRAINGUARD_API_VERSION = f"{TRAINGUARD_GROUP}/{TRAINGUARD_VERSION}"
TRAINJOB_POLICY_KIND = "TrainJobPolicy"
DATASET_CACHE_KIND = "DatasetCache"

# -- defaults the API server fills in (schema defaults) or code assumes (documented defaults) ---------------
DEFAULT_RUNTIME_REF_API_GROUP = TRAINER_GROUP
DEFAULT_RUNTIME_REF_KIND = CLUSTER_TRAINING_RUNTIME_KIND
TRAINJOB_CONTROLLER = "trainer.kubeflow.org/trainjob-controller"
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
ALLOWED_MANAGED_BY = (TRAINJOB_CONTROLLER, MULTIKUEUE_CONTROLLER)
DEFAULT_MANAGED_BY = TRAINJOB_CONTROLLER
DEFAULT_NUM_NODES = 1  # mlPolicy.numNodes when unset (applied in code, not by the schema)
DEFAULT_MPI_NUM_PROC_PER_NODE = 1
DEFAULT_MPI_IMPLEMENTATION = "OpenMPI"
DEFAULT_MPI_SSH_AUTH_MOUNT_PATH = "/root/.ssh"
DEFAULT_FLUX_NUM_PROC_PER_NODE = 1
DEFAULT_COSCHEDULING_TIMEOUT_SECONDS = 60
DEFAULT_VOLCANO_TOPOLOGY_MODE = "hard"
DEFAULT_VOLCANO_HIGHEST_TIER_ALLOWED = 1
DEFAULT_JOBSET_GROUP_NAME = "default"

# -- reserved labels and annotations ---------------------------------------------------------------------
LABEL_TRAINJOB_ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
"""On ``replicatedJobs[].template.metadata.labels``: which step of the job this replicatedJob is."""
ANCESTOR_DATASET_INITIALIZER = "dataset-initializer"
ANCESTOR_MODEL_INITIALIZER = "model-initializer"
ANCESTOR_TRAINER = "trainer"
ANCESTOR_STEPS = (ANCESTOR_DATASET_INITIALIZER, ANCESTOR_MODEL_INITIALIZER, ANCESTOR_TRAINER)

LABEL_FRAMEWORK = "trainer.kubeflow.org/framework"
"""Informational runtime label (torch, deepspeed, jax, xgboost, mlx, torchtune, ...), read by the SDK."""
LABEL_SUPPORT = "trainer.kubeflow.org/support"
SUPPORT_DEPRECATED = "deprecated"
"""``trainer.kubeflow.org/support: deprecated`` on a runtime makes TrainJobs referencing it get a warning."""
LABEL_WEBHOOK_VALIDATION = "trainer.kubeflow.org/webhook-validation"
WEBHOOK_VALIDATION_DISABLED = "disabled"
"""[2.3] objectSelector opt-out of the runtime validating webhooks."""

LABEL_JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
ANNOTATION_JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
LABEL_KUEUE_QUEUE_NAME = "kueue.x-k8s.io/queue-name"
LABEL_KUEUE_PRIORITY_CLASS = "kueue.x-k8s.io/priority-class"
LABEL_COSCHEDULING_POD_GROUP = "scheduling.x-k8s.io/pod-group"

# -- reserved replicatedJob / container / volume names ---------------------------------------------------
NODE = "node"
"""The trainer replicatedJob and its main container."""
LAUNCHER = "launcher"
"""The MPI launcher replicatedJob and container."""
DATASET_INITIALIZER = "dataset-initializer"
MODEL_INITIALIZER = "model-initializer"
INITIALIZER_VOLUME = "initializer"
DATASET_MOUNT_PATH = "/workspace/dataset"
MODEL_MOUNT_PATH = "/workspace/model"
TORCH_MASTER_PORT = 29500

# -- conditions ------------------------------------------------------------------------------------------
CONDITION_SUSPENDED = "Suspended"
CONDITION_COMPLETE = "Complete"
CONDITION_FAILED = "Failed"
REASON_SUSPENDED = "Suspended"
REASON_RESUMED = "Resumed"
REASON_RUNTIME_NOT_SUPPORTED = "TrainingRuntimeNotSupported"
REASON_DEADLINE_EXCEEDED = "DeadlineExceeded"
MESSAGE_SUSPENDED = "TrainJob is suspended"
MESSAGE_RESUMED = "TrainJob is resumed"
MESSAGE_DEADLINE_EXCEEDED = "TrainJob exceeded its active deadline"

# -- schema limits shared by models and validation code --------------------------------------------------
MAX_ENV = 128
MAX_RUNTIME_PATCHES = 16
MAX_COMMAND_ITEMS = 128
MAX_COMMAND_ITEM_LENGTH = 1048576
MAX_IMAGE_LENGTH = 500
MAX_STORAGE_URI_LENGTH = 2048
MAX_NAME_LENGTH = 253
MAX_CONDITIONS = 8
MAX_JOBS_STATUS = 100

# trainguard's own contract between the webhook, the build and the reconciler (things the TrainJob API cannot carry).
ANNOTATION_SCHEDULER_NAME = "trainguard.io/scheduler-name"  # written by policy, applied to pods by the build
ANNOTATION_POLICY_EFFECTS = "trainguard.io/policy-effects"  # on the JobSet: what the build applied for policy
ANNOTATION_DATASET_CACHE = "trainguard.io/dataset-cache"  # TrainJob opt-in to a DatasetCache by name
LABEL_STATE = "trainguard.io/state"  # Created | Running | Suspended | Blocked | Complete | Failed, kept by the reconciler
LABEL_NODES = "trainguard.io/nodes"  # trainer pods of the JobSet as built, kept by the reconciler (a printer column)
LABEL_GPUS = "trainguard.io/gpus"  # GPUs every pod of the JobSet requests, kept by the reconciler (a printer column)
