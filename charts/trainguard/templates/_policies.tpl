{{- /* TrainJobPolicies from `policies` and the short form `defaultPolicy`, as a YAML list for admin-objects.yaml.
Their specs are passed through unchanged: the webhook, not the chart, is the judge of a policy. */ -}}
{{- define "trainguard.policyObjects" -}}
{{- $objects := list }}
{{- range $p := .Values.policies }}
{{- $objects = append $objects (dict "apiVersion" "trainguard.io/v1alpha1" "kind" "TrainJobPolicy"
      "metadata" (dict "name" $p.name "labels" ($p.labels | default dict)) "spec" $p.spec) }}
{{- end }}
{{- with .Values.defaultPolicy }}
{{- if .enabled }}
{{- $spec := dict "mode" .mode "priority" .priority }}
{{- if .namespaceSelector }}
{{- $_ := set $spec "selector" (dict "namespaceSelector" .namespaceSelector) }}
{{- end }}
{{- $kueue := dict }}
{{- with .kueue.queueName }}{{ $_ := set $kueue "queueName" . }}{{ end }}
{{- with .kueue.allowedQueueNames }}{{ $_ := set $kueue "allowedQueueNames" . }}{{ end }}
{{- with .kueue.priorityClass }}{{ $_ := set $kueue "priorityClass" . }}{{ end }}
{{- with .kueue.allowedPriorityClasses }}{{ $_ := set $kueue "allowedPriorityClasses" . }}{{ end }}
{{- if $kueue }}
{{- $_ := set $spec "scheduling" (dict "kueue" $kueue) }}
{{- end }}
{{- if .topologyLevels }}
{{- $_ := set $spec "topology" (dict "levels" .topologyLevels "placement" .topologyPlacement "target" .topologyTarget) }}
{{- end }}
{{- if .limits }}
{{- $_ := set $spec "limits" .limits }}
{{- end }}
{{- $objects = append $objects (dict "apiVersion" "trainguard.io/v1alpha1" "kind" "TrainJobPolicy"
      "metadata" (dict "name" .name "labels" dict) "spec" $spec) }}
{{- end }}
{{- end }}
{{- toYaml $objects }}
{{- end -}}
