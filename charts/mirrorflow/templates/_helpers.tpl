{{/*
Chart name, overridable.
*/}}
{{- define "mirrorflow.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name of the release's objects: `<release>-<chart>`, or the release name when it already
contains the chart name. 63 characters at most (DNS label).
*/}}
{{- define "mirrorflow.fullname" -}}
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
`helm.sh/chart` label value.
*/}}
{{- define "mirrorflow.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Selector labels of the controller. The component label keeps them disjoint from the worker
pods, which the controller labels app.kubernetes.io/name=mirrorflow,
app.kubernetes.io/instance=<flow>, app.kubernetes.io/component=worker.
*/}}
{{- define "mirrorflow.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mirrorflow.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end }}

{{/*
Labels of every object of the chart.
*/}}
{{- define "mirrorflow.labels" -}}
helm.sh/chart: {{ include "mirrorflow.chart" . }}
{{ include "mirrorflow.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: mirrorflow
{{- end }}

{{/*
The controller's ServiceAccount. Without `serviceAccount.create` a name is required: binding
the controller's RBAC to the namespace's `default` account would hand it to every pod there.
*/}}
{{- define "mirrorflow.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "mirrorflow.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Controller image reference: repository@digest, else repository:tag (tag defaults to appVersion).
*/}}
{{- define "mirrorflow.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
Worker image reference (MIRRORFLOW_IMAGE): `workerImage`, else the controller image.
*/}}
{{- define "mirrorflow.workerImage" -}}
{{- default (include "mirrorflow.image" .) .Values.workerImage }}
{{- end }}

{{/*
Name of the leader-election Lease.
*/}}
{{- define "mirrorflow.leaseName" -}}
{{- default (include "mirrorflow.fullname" .) .Values.leaderElection.leaseName }}
{{- end }}

{{/*
Checks between values that a JSON schema cannot express; included by the Deployment.
*/}}
{{- define "mirrorflow.validate" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) }}
{{- fail (printf "replicaCount: %d replicas need leaderElection.enabled=true, otherwise several controllers reconcile the same flows at once" (int .Values.replicaCount)) }}
{{- end }}
{{- end }}
