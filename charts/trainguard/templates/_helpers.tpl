{{- define "trainguard.fullname" -}}
{{- if contains "trainguard" .Release.Name -}}{{ .Release.Name | trunc 50 | trimSuffix "-" }}{{- else -}}{{ printf "%s-trainguard" .Release.Name | trunc 50 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "trainguard.labels" -}}
app.kubernetes.io/name: trainguard
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "trainguard.selector" -}}
app.kubernetes.io/name: trainguard
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "trainguard.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "trainguard.webhookName" -}}{{ include "trainguard.fullname" . }}-webhook{{- end -}}
{{- define "trainguard.controllerName" -}}{{ include "trainguard.fullname" . }}-controller{{- end -}}
{{- define "trainguard.mutatingName" -}}{{ include "trainguard.fullname" . }}-mutating{{- end -}}
{{- define "trainguard.validatingName" -}}{{ include "trainguard.fullname" . }}-validating{{- end -}}

{{- /* What DatasetCaches may ask for their agents: the same flags for the webhook and the controller. The lists are
always passed (an empty value means none), so an admin's [] is never read as the binaries' default. */ -}}
{{- define "trainguard.datasetCacheAgentArgs" -}}
{{- $dc := .Values.datasetCache -}}
{{- $required := list -}}
{{- range $key, $value := $dc.requiredNodeSelector }}{{ $required = append $required (printf "%s=%s" $key $value) }}{{ end -}}
- {{ printf "--dataset-cache-allowed-priority-classes=%s" (join "," $dc.allowedPriorityClasses) | quote }}
- {{ printf "--dataset-cache-allowed-toleration-keys=%s" (join "," $dc.allowedTolerationKeys) | quote }}
- {{ printf "--dataset-cache-allowed-node-selector-keys=%s" (join "," $dc.allowedNodeSelectorKeys) | quote }}
- {{ printf "--dataset-cache-required-node-selector=%s" (join "," $required) | quote }}
- {{ printf "--dataset-cache-max-memory-budget=%v" $dc.maxMemoryBudget | quote }}
{{- end -}}
