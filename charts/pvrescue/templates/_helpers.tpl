{{/* Labels every object carries (the same as manifests/kustomization.yaml adds). */}}
{{- define "pvrescue.labels" -}}
app.kubernetes.io/part-of: pvrescue
{{- end -}}

{{- define "pvrescue.webhookImage" -}}
{{ .Values.webhook.image.repository }}:{{ .Values.webhook.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "pvrescue.agentImage" -}}
{{ .Values.agent.image.repository }}:{{ .Values.agent.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The pvrescue config file; helper.image defaults to the webhook image. */}}
{{- define "pvrescue.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $helper := default dict $cfg.helper -}}
{{- if not $helper.image -}}
{{- $_ := set $helper "image" (include "pvrescue.webhookImage" .) -}}
{{- end -}}
{{- $_ := set $cfg "helper" $helper -}}
{{ toYaml $cfg }}
{{- end -}}

{{/* Rolls both workloads when the config changes (kustomize does it with a name hash). */}}
{{- define "pvrescue.configChecksum" -}}
checksum/config: {{ include "pvrescue.config" . | sha256sum }}
{{- end -}}

{{- define "pvrescue.tlsSecret" -}}
{{- if eq .Values.tls.mode "existingSecret" -}}
{{ required "tls.existingSecret.name is required with tls.mode=existingSecret" .Values.tls.existingSecret.name }}
{{- else -}}
pvrescue-webhook-tls
{{- end -}}
{{- end -}}

{{- define "pvrescue.validate" -}}
{{- if not (has .Values.tls.mode (list "cert-manager" "bootstrap" "existingSecret")) -}}
{{- fail (printf "tls.mode must be cert-manager, bootstrap or existingSecret, not %q" .Values.tls.mode) -}}
{{- end -}}
{{- if not (has .Values.webhook.failurePolicy (list "Ignore" "Fail")) -}}
{{- fail (printf "webhook.failurePolicy must be Ignore or Fail, not %q" .Values.webhook.failurePolicy) -}}
{{- end -}}
{{- $t := int .Values.webhook.timeoutSeconds -}}
{{- if or (lt $t 1) (gt $t 30) -}}
{{- fail (printf "webhook.timeoutSeconds must be within 1..30 (the apiserver's limit), not %v" .Values.webhook.timeoutSeconds) -}}
{{- end -}}
{{- end -}}


{{/*
The agent's read-only host mounts for config.localBlock.pathRoots (the Go default when unset),
as a JSON list of {name, path}: every root outside /dev (mounted whole), named after its path
(/mnt/disks → mnt-disks).
*/}}
{{- define "pvrescue.agentPathRoots" -}}
{{- $roots := list "/dev/disk" "/mnt/disks" "/mnt/fast-disks" -}}
{{- with .Values.config.localBlock -}}
{{- if hasKey . "pathRoots" -}}{{- $roots = .pathRoots -}}{{- end -}}
{{- end -}}
{{- $out := list -}}
{{- $names := dict -}}
{{- range $roots -}}
{{- if not (or (eq . "/dev") (hasPrefix "/dev/" .)) -}}
{{- $name := regexReplaceAll "[^a-z0-9]+" (lower (trimPrefix "/" .)) "-" | trunc 63 | trimSuffix "-" -}}
{{- if hasKey $names $name -}}{{- fail (printf "config.localBlock.pathRoots: %q and %q give one volume name %q" (get $names $name) . $name) -}}{{- end -}}
{{- $_ := set $names $name . -}}
{{- $out = append $out (dict "name" $name "path" .) -}}
{{- end -}}
{{- end -}}
{{ toJson $out }}
{{- end -}}
