{{/* Object names follow the release name: infra/modules/grove installs it as forest-controller. */}}
{{- define "fc.name" -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Cluster-scoped names carry the namespace so two Groves' controllers could share a cluster. */}}
{{- define "fc.clusterName" -}}
{{- printf "%s-%s" .Release.Namespace .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "fc.selectorLabels" -}}
app.kubernetes.io/name: forest-controller
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "fc.labels" -}}
{{ include "fc.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: forest
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "fc.configMap" -}}
{{- .Values.existingConfigMap | default (printf "%s-config" (include "fc.name" .)) -}}
{{- end -}}

{{- define "fc.enrollmentSecret" -}}
{{- if .Values.enrollmentSecret -}}
{{- .Values.enrollmentSecret -}}
{{- else if .Values.enrollmentToken -}}
{{- printf "%s-enrollment" (include "fc.name" .) -}}
{{- end -}}
{{- end -}}

{{- define "fc.workNamespaces" -}}
{{- $names := list .Values.workNamespaces.trusted -}}
{{- if ne .Values.workNamespaces.untrusted .Values.workNamespaces.trusted -}}
{{- $names = append $names .Values.workNamespaces.untrusted -}}
{{- end -}}
{{- toJson $names -}}
{{- end -}}
