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
