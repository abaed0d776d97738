{{- /*
Policies and runtimes from the values are admitted by trainguard's own webhook, whose configurations (failurePolicy
Fail) exist before its pods are ready: created with the rest of the release, they would be refused with "connection
refused" (or, under Ignore, admitted unchecked). So:

- On the release's first install they are post-install hooks, which Helm creates once `--wait` has seen the webhook
  ready; a bad one fails `helm install` with the webhook's denial. They carry Helm's ownership metadata.
- On upgrades they are ordinary release resources, patched in place. A hook is deleted and recreated on every run,
  and the moment without the policy would let the controller build a TrainJob that the policy keeps Blocked; a
  patch leaves no such moment. The first upgrade takes the install's objects over (Helm adopts an existing object
  whose ownership metadata names this release) but applies no change to an object it adopts: such an upgrade fails
  here, naming the object, when its spec or labels differ from the install's (the checksum annotation records them).
  The ConfigMap <fullname>-values-objects records which objects the release already holds, so that only objects
  still made by the install hook are checked.
- On uninstall a pre-delete hook of the same kind and name deletes each one (Helm's before-hook-creation), whether it
  is still the install's or already the release's; the hook's own object, deleted once created, is a stand-in that
  the webhook always admits.

An object of the same kind and name that this release does not own is never replaced: rendering fails naming it.

Usage: include "trainguard.adminObjects" (dict "root" $ "objects" (list $obj ...))
*/ -}}
{{- define "trainguard.adminObjects" -}}
{{- $root := .root -}}
{{- $ledgerName := printf "%s-values-objects" (include "trainguard.fullname" $root) -}}
{{- $held := list -}}
{{- with (lookup "v1" "ConfigMap" $root.Release.Namespace $ledgerName) }}
{{- $held = (index (.data | default dict) "objects" | default "[]") | fromJsonArray -}}
{{- end }}
{{- $seen := dict -}}
{{- $keys := list -}}
{{- range $obj := .objects }}
{{- $key := printf "%s/%s" $obj.kind $obj.metadata.name -}}
{{- if hasKey $seen $key }}
{{- fail (printf "%s %q is defined twice in the values (names must be unique across policies and defaultPolicy)" $obj.kind $obj.metadata.name) }}
{{- end }}
{{- $_ := set $seen $key true -}}
{{- $keys = append $keys $key -}}
{{- $userLabels := $obj.metadata.labels | default dict -}}
{{- $checksum := toJson (dict "labels" $userLabels "spec" $obj.spec) | sha256sum -}}
{{- $live := dict -}}
{{- /* lookup errors on a kind the cluster does not serve yet (the chart's CRDs on a first install) */ -}}
{{- if $root.Capabilities.APIVersions.Has (printf "%s/%s" $obj.apiVersion $obj.kind) }}
{{- $live = lookup $obj.apiVersion $obj.kind "" $obj.metadata.name -}}
{{- end }}
{{- if $live }}
{{- $liveAnnotations := $live.metadata.annotations | default dict -}}
{{- if or (ne (index $liveAnnotations "meta.helm.sh/release-name" | default "") $root.Release.Name) (ne (index $liveAnnotations "meta.helm.sh/release-namespace" | default "") $root.Release.Namespace) }}
{{- fail (printf "%s %q already exists and is not this release's: delete or rename it, or choose another name in the values" $obj.kind $obj.metadata.name) }}
{{- end }}
{{- if and $root.Release.IsUpgrade (not (has $key $held)) (hasKey $liveAnnotations "helm.sh/hook") (ne (index $liveAnnotations "trainguard.io/values-checksum" | default "") $checksum) }}
{{- fail (printf "%s %q was created by this release's install and this upgrade takes it over, but Helm applies no change to an object it takes over: upgrade once with its spec and labels as installed (e.g. the install's values), then with the change" $obj.kind $obj.metadata.name) }}
{{- end }}
{{- end }}
{{- $labels := merge (include "trainguard.labels" $root | fromYaml) (deepCopy $userLabels) -}}
{{- $owner := dict "meta.helm.sh/release-name" $root.Release.Name "meta.helm.sh/release-namespace" $root.Release.Namespace -}}
{{- $annotations := merge (dict "trainguard.io/values-checksum" $checksum) $owner -}}
{{- if $root.Release.IsInstall }}
{{- $_ := set $annotations "helm.sh/hook" "post-install,post-rollback" -}}
{{- $_ := set $annotations "helm.sh/hook-delete-policy" "before-hook-creation" -}}
{{- end }}
---
{{ toYaml (merge (dict "metadata" (dict "name" $obj.metadata.name "labels" $labels "annotations" $annotations)) (omit $obj "metadata")) }}
{{- $cleanup := merge (dict "helm.sh/hook" "pre-delete" "helm.sh/hook-delete-policy" "before-hook-creation,hook-succeeded") $owner }}
{{- /* The stand-in that the pre-delete hook creates (and deletes at once) after deleting the object must be admitted
whatever the values held (uninstalling after an upgrade the webhook refused uses that upgrade's hooks): a policy that
sets and limits nothing, a runtime the webhook does not review. */ -}}
{{- $standIn := dict "apiVersion" $obj.apiVersion "kind" $obj.kind "spec" (dict "mode" "Audit") }}
{{- $cleanupLabels := include "trainguard.labels" $root | fromYaml }}
{{- if ne $obj.kind "TrainJobPolicy" }}
{{- $standIn = include "trainguard.runtime.cleanupStandIn" $obj | fromYaml }}
{{- $_ := set $cleanupLabels "trainer.kubeflow.org/webhook-validation" "disabled" }}
{{- end }}
---
{{ toYaml (merge (dict "metadata" (dict "name" $obj.metadata.name "labels" $cleanupLabels "annotations" $cleanup)) $standIn) }}
{{- end }}
---
# The policies and runtimes this release holds as ordinary resources (none on the install: they are its hooks).
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ $ledgerName }}
  namespace: {{ $root.Release.Namespace }}
  labels: {{- include "trainguard.labels" $root | nindent 4 }}
data:
  objects: {{ (ternary list $keys $root.Release.IsInstall) | toJson | quote }}
{{- end -}}
