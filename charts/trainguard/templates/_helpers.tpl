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
