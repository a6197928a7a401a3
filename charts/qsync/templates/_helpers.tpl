{{/*
File: charts/qsync/templates/_helpers.tpl
Names, labels and the derived namespaces every template shares.
*/}}

{{/* The chart name, at most 63 characters. */}}
{{- define "qsync.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The full name of the release's objects: the release name, plus the chart name unless the
release name already contains it. */}}
{{- define "qsync.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels that select the operator's pods. */}}
{{- define "qsync.selectorLabels" -}}
app.kubernetes.io/name: {{ include "qsync.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{/* Labels on every object of the release. */}}
{{- define "qsync.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "qsync.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: qsync
{{- end -}}

{{/* The operator's ServiceAccount. */}}
{{- define "qsync.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "qsync.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name must name an existing ServiceAccount when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The namespace the operator watches; empty means every namespace. Namespaced RBAC grants
nothing outside one namespace, so there an empty watchNamespace means the release namespace. */}}
{{- define "qsync.watchNamespace" -}}
{{- if .Values.watchNamespace -}}
{{- .Values.watchNamespace -}}
{{- else if .Values.rbac.namespaced -}}
{{- .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/* The namespace of the leader-election Lease. */}}
{{- define "qsync.leaderElectionNamespace" -}}
{{- default .Release.Namespace .Values.leaderElection.namespace -}}
{{- end -}}

{{/* The operator image reference. */}}
{{- define "qsync.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
