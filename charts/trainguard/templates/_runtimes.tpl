{{- /*
Upstream Kubeflow Trainer v2.3's runtime set (its chart's files/runtimes), as ClusterTrainingRuntimes. Each define
takes the runtime's values (image, resources) and renders the object; runtimes.yaml decides which are enabled.
*/ -}}

{{- /* An image from {registry, repository, tag}; docker.io images are written without the registry, as upstream. */ -}}
{{- define "trainguard.runtimeImage" -}}
{{- if eq .registry "docker.io" -}}{{ .repository }}:{{ .tag }}{{- else -}}{{ .registry }}/{{ .repository }}:{{ .tag }}{{- end -}}
{{- end -}}

{{- define "trainguard.runtime.container" -}}
name: node
image: {{ include "trainguard.runtimeImage" .image | quote }}
{{- with .resources }}
resources: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- /* An MPI node container (deepspeed, mlx): sshd for the launcher to reach, as upstream. */ -}}
{{- define "trainguard.runtime.mpiContainer" -}}
{{ include "trainguard.runtime.container" . }}
securityContext: {runAsUser: 1000}
{{- end -}}

{{- define "trainguard.runtime.single" -}}
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata:
  name: {{ .name }}
  labels: {trainer.kubeflow.org/framework: {{ .framework }}}
spec:
  mlPolicy:
    numNodes: 1
    {{ .framework }}: {}
  template:
    spec:
      replicatedJobs:
      - name: node
        template:
          metadata:
            labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}
          spec:
            template:
              spec:
                containers:
                - {{- include "trainguard.runtime.container" .values | nindent 18 }}
{{- end -}}

{{- define "trainguard.runtime.mpi" -}}
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata:
  name: {{ .name }}
  labels: {trainer.kubeflow.org/framework: {{ .framework }}}
spec:
  mlPolicy:
    numNodes: 1
    mpi:
      numProcPerNode: 1
      mpiImplementation: OpenMPI
      sshAuthMountPath: /home/mpiuser/.ssh
      runLauncherAsNode: true
  template:
    spec:
      network:
        publishNotReadyAddresses: true
      successPolicy:
        operator: All
        targetReplicatedJobs: [launcher]
      replicatedJobs:
      - name: node
        template:
          spec:
            template:
              spec:
                securityContext: {fsGroup: 1000}
                containers:
                - {{- include "trainguard.runtime.mpiContainer" .values | nindent 18 }}
                  command: [/usr/sbin/sshd]
                  args: [-De, -f, /home/mpiuser/.sshd_config]
                  readinessProbe:
                    tcpSocket: {port: 2222}
                    initialDelaySeconds: 5
      - name: launcher
        dependsOn:
        - {name: node, status: Ready}
        template:
          metadata:
            labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}
          spec:
            template:
              spec:
                securityContext: {fsGroup: 1000}
                containers:
                - {{- include "trainguard.runtime.mpiContainer" .values | nindent 18 }}
{{- end -}}

{{- /* The enabled runtimes of `runtimes`, as a YAML list for admin-objects.yaml. */ -}}
{{- define "trainguard.runtimeObjects" -}}
{{- $r := .Values.runtimes }}
{{- $all := list
  (list "torchDistributed" "torch-distributed" "torch" "trainguard.runtime.single")
  (list "deepspeedDistributed" "deepspeed-distributed" "deepspeed" "trainguard.runtime.mpi")
  (list "mlxDistributed" "mlx-distributed" "mlx" "trainguard.runtime.mpi")
  (list "jaxDistributed" "jax-distributed" "jax" "trainguard.runtime.single")
  (list "xgboostDistributed" "xgboost-distributed" "xgboost" "trainguard.runtime.single") }}
{{- $objects := list }}
{{- range $entry := $all }}
{{- $values := index $r (index $entry 0) }}
{{- if or $r.defaultEnabled $values.enabled }}
{{- $obj := include (index $entry 3) (dict "name" (index $entry 1) "framework" (index $entry 2) "values" $values) | fromYaml }}
{{- $_ := set $obj.metadata "labels" (merge $obj.metadata.labels (deepCopy ($r.commonLabels | default dict))) }}
{{- $objects = append $objects $obj }}
{{- end }}
{{- end }}
{{- toYaml $objects }}
{{- end -}}

{{- /* The pre-delete hook's stand-in for a runtime (see _admin_objects.tpl): the smallest runtime the CRD accepts. */ -}}
{{- define "trainguard.runtime.cleanupStandIn" -}}
apiVersion: {{ .apiVersion }}
kind: {{ .kind }}
spec:
  mlPolicy: {numNodes: 1}
  template:
    spec:
      replicatedJobs:
      - name: node
        template:
          metadata:
            labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}
          spec:
            template:
              spec:
                containers:
                - {name: node, image: "registry.k8s.io/pause:3.10"}
{{- end -}}
