{{/* Object names: <release>-<component> (forest-host-web, forest-host-worker, ...). */}}
{{- define "fh.name" -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{- define "fh.selectorLabels" -}}
app.kubernetes.io/name: forest-host
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "fh.labels" -}}
{{ include "fh.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: forest
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{/* The one environment every Host process gets (the migrate hook included): the operator's Secret as a
whole, then the chart's non-secret settings. No ConfigMap: the pre-install hook runs before any
chart-made object exists, and a changed setting changes every pod template, which rolls them. */}}
{{- define "fh.env" -}}
envFrom:
  - secretRef:
      name: {{ required "existingSecret: the name of the Secret with SECRET_KEY, DATABASE_URL, CELERY_BROKER_URL, ... (docs/deploy.md)" .Values.existingSecret }}
env:
  - name: FOREST_VAR_DIR
    value: /var/lib/forest
  {{- range $name, $value := .Values.env }}
  - name: {{ $name }}
    value: {{ $value | quote }}
  {{- end }}
{{- end -}}

{{/* Pod Security "restricted", for every pod: non-root numeric user (the image's), RuntimeDefault seccomp. */}}
{{- define "fh.podSecurity" -}}
automountServiceAccountToken: false
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  fsGroup: 65532
  seccompProfile:
    type: RuntimeDefault
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "fh.containerSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  runAsNonRoot: true
  capabilities:
    drop: ["ALL"]
  seccompProfile:
    type: RuntimeDefault
{{- end -}}

{{/* FOREST_VAR_DIR (heartbeat files, beat's schedule, the edge's nginx prefix, a filesystem CAS) and /tmp:
the only writable paths; the root filesystem is read-only. */}}
{{- define "fh.volumeMounts" -}}
volumeMounts:
  - name: var
    mountPath: /var/lib/forest
  - name: tmp
    mountPath: /tmp
{{- end -}}

{{- define "fh.volumes" -}}
- name: var
  {{- if .Values.varVolume.existingClaim }}
  persistentVolumeClaim:
    claimName: {{ .Values.varVolume.existingClaim }}
  {{- else }}
  emptyDir:
    sizeLimit: {{ .Values.varVolume.sizeLimit }}
  {{- end }}
- name: tmp
  emptyDir:
    sizeLimit: 256Mi
{{- end -}}

{{/* Liveness of worker, runner and beat: their heartbeat file is fresh (docker/host-healthcheck.py,
docs/deploy.md section 6): a minute without the broker restarts them, nothing shorter does. */}}
{{- define "fh.heartbeatProbe" -}}
livenessProbe:
  exec:
    command: ["python", "/app/docker/host-healthcheck.py"]
  initialDelaySeconds: 30
  periodSeconds: 15
  timeoutSeconds: 10
  failureThreshold: 3
{{- end -}}
