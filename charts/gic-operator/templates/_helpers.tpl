{{/* Chart name, overridable with nameOverride. */}}
{{- define "gic-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name of the release's resources (Helm's usual rule): fullnameOverride when set; else
the release name when it already contains the chart name (nameOverride when set), e.g.
release gic-operator -> gic-operator; else <release>-<chart name>, e.g. release prod ->
prod-gic-operator. At most 63 characters.
*/}}
{{- define "gic-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The full name with a suffix: "gic-operator.suffixedName" (list . "metrics") ->
<fullname>-metrics. The full name is shortened so that the result still has at most 63
characters (a Service name is a DNS label) and keeps its suffix.
*/}}
{{- define "gic-operator.suffixedName" -}}
{{- $root := index . 0 }}
{{- $suffix := index . 1 }}
{{- $base := include "gic-operator.fullname" $root | trunc (int (sub 62 (len $suffix))) | trimSuffix "-" }}
{{- printf "%s-%s" $base $suffix }}
{{- end }}

{{/* Labels that select the operator pods (never change them: Deployment selectors are immutable). */}}
{{- define "gic-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gic-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of every resource of the chart. */}}
{{- define "gic-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "gic-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gic
{{- end }}

{{/* "true" when the operator serves metrics on a fixed port (metrics.port -1 turns them
off; 0, any free port, cannot be declared as a container port either). */}}
{{- define "gic-operator.metricsOn" -}}
{{- if gt (int .Values.metrics.port) 0 }}true{{ end }}
{{- end }}

{{/* The operator's service account. */}}
{{- define "gic-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gic-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Spark driver service account (fixed: GICJobs cannot choose theirs). */}}
{{- define "gic-operator.sparkServiceAccount" -}}
gic-spark
{{- end }}

{{/* Namespaces the operator watches, as a JSON list (empty when it watches all of them). */}}
{{- define "gic-operator.watchNamespaces" -}}
{{- if and .Values.clusterWide .Values.watchNamespaces }}
{{- fail "give watchNamespaces or clusterWide: true, not both" }}
{{- end }}
{{- if .Values.clusterWide }}
{{- list | toJson }}
{{- else }}
{{- .Values.watchNamespaces | default (list .Release.Namespace) | toJson }}
{{- end }}
{{- end }}

{{/* Namespaces that get the Spark driver service account, as a JSON list. */}}
{{- define "gic-operator.sparkNamespaces" -}}
{{- .Values.spark.namespaces | default .Values.watchNamespaces | default (list .Release.Namespace) | toJson }}
{{- end }}

{{/*
Rules the operator needs in every namespace it watches (a Role there, or the ClusterRole when
it watches all namespaces): exactly what gic_operator/kube/permissions.py lists (the chart tests
compare the two). Secrets: create only (each job's Spark authentication Secret); the
operator reads none, pods get credentials by secretKeyRef.
*/}}
{{- define "gic-operator.namespacedRules" -}}
- apiGroups: ["gic.io"]
  resources: ["gicjobs"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["gic.io"]
  resources: ["savepoints"]
  verbs: ["get", "list", "watch", "patch", "create", "delete"]
- apiGroups: ["gic.io"]
  resources: ["gicjobs/status", "savepoints/status"]
  verbs: ["patch"]
- apiGroups: ["gic.io"]
  resources: ["gicjobs/finalizers"]
  verbs: ["update"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "delete"]
- apiGroups: [""]
  resources: ["services", "secrets"]
  verbs: ["create", "get"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["create", "get", "update"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["create", "get"]
{{- end }}

{{/* Read access kopf needs cluster-wide to discover resources (CRDs). */}}
{{- define "gic-operator.scanRules" -}}
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["list", "watch"]
{{- end }}

{{/* Labels of the pods of GIC jobs (drivers and executors) in NetworkPolicy selectors. */}}
{{- define "gic-operator.jobPodSelector" -}}
matchExpressions:
  - key: gic.io/job
    operator: Exists
{{- end }}
