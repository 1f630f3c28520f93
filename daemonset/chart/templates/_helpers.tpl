{{/* The labels every object carries (daemonset/base/kustomization.yaml's `labels`). */}}
{{- define "gpuprobe.labels" -}}
app.kubernetes.io/name: gpuprobe
app.kubernetes.io/part-of: gpuprobe
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* The agents' selector labels. */}}
{{- define "gpuprobe.selector" -}}
app.kubernetes.io/name: gpuprobe
app.kubernetes.io/component: node-agent
{{- end }}

{{/* The image: repository, then @digest or :tag (the tag defaults to appVersion). */}}
{{- define "gpuprobe.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/* The agent's config.yaml: the shipped file as is, or with `config` (and the taint
opt-in) merged over it. */}}
{{- define "gpuprobe.config" -}}
{{- $shipped := .Files.Get "files/config.yaml" -}}
{{- $overrides := deepCopy .Values.config -}}
{{- if .Values.taint.enabled -}}
{{- $overrides = mergeOverwrite $overrides (dict "kubernetes" (dict "taint" (dict "enabled" true))) -}}
{{- end -}}
{{- if $overrides -}}
{{ mergeOverwrite (fromYaml $shipped) $overrides | toYaml }}
{{- else -}}
{{ $shipped }}
{{- end -}}
{{- end }}

{{/* The rules file with the runbooks under prometheusRule.runbookBaseURL. */}}
{{- define "gpuprobe.rules" -}}
{{- .Files.Get "files/gpuprobe.rules.yml" | replace "https://gpuprobe.example/docs/" .Values.prometheusRule.runbookBaseURL -}}
{{- end }}
