{{- /*
Policies and runtimes the chart creates are admitted by trainguard's own webhook, whose configurations (failurePolicy
Fail) exist before its pods are ready: created with the rest of the release, they would be refused with "connection
refused" (or, under Ignore, admitted unchecked). So on the release's first install they are post-install hooks, which
Helm runs once `--wait` finds the webhook ready; a bad one fails `helm install` with the webhook's denial. They carry
Helm's ownership metadata, so the first upgrade adopts them as ordinary release resources, patched in place (a hook
is deleted and recreated, which would leave a moment without the policy). On uninstall a pre-delete hook of the same
kind and name deletes the object (Helm's before-hook-creation), whether it is still a hook or already adopted.

Usage: include "trainguard.adminObjects" (dict "root" $ "objects" (list $obj ...))
*/ -}}
{{- define "trainguard.adminObjects" -}}
{{- $root := .root -}}
{{- $seen := dict -}}
{{- range $obj := .objects }}
{{- $key := printf "%s/%s" $obj.kind $obj.metadata.name -}}
{{- if hasKey $seen $key }}
{{- fail (printf "%s %q is defined twice in the chart's values (names must be unique across policies and defaultPolicy, runtimes)" $obj.kind $obj.metadata.name) }}
{{- end }}
{{- $_ := set $seen $key true -}}
{{- $labels := merge (include "trainguard.labels" $root | fromYaml) (deepCopy ($obj.metadata.labels | default dict)) -}}
{{- $owner := dict "meta.helm.sh/release-name" $root.Release.Name "meta.helm.sh/release-namespace" $root.Release.Namespace -}}
{{- $annotations := deepCopy $owner -}}
{{- if $root.Release.IsInstall }}
{{- $_ := set $annotations "helm.sh/hook" "post-install,post-rollback" -}}
{{- $_ := set $annotations "helm.sh/hook-delete-policy" "before-hook-creation" -}}
{{- end }}
{{- $meta := dict "name" $obj.metadata.name "labels" $labels "annotations" $annotations }}
---
{{ toYaml (merge (dict "metadata" $meta) (omit $obj "metadata")) }}
{{- $cleanup := merge (dict "helm.sh/hook" "pre-delete" "helm.sh/hook-delete-policy" "before-hook-creation,hook-succeeded") $owner }}
---
{{ toYaml (merge (dict "metadata" (dict "name" $obj.metadata.name "labels" $labels "annotations" $cleanup)) (omit $obj "metadata")) }}
{{- end }}
{{- end -}}
