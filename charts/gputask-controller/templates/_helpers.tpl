{{/* The chart name, or nameOverride. */}}
{{- define "gputask-controller.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of the release's objects: fullnameOverride, else the release
name when it already holds the chart name, else release-chart. A release named
gputask-controller gets the names artifacts/deploy uses.
*/}}
{{- define "gputask-controller.fullname" -}}
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

{{- define "gputask-controller.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "gputask-controller.labels" -}}
helm.sh/chart: {{ include "gputask-controller.chart" . }}
{{ include "gputask-controller.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: controller
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The labels that select the controller pods; never change after install. */}}
{{- define "gputask-controller.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gputask-controller.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gputask-controller.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gputask-controller.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "gputask-controller.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The controller's flags, one a line, as "--name=value". Durations are passed
as written in values.yaml; the controller validates every flag and names it in
its error. extraArgs come last, so they win over the chart's own.
*/}}
{{- define "gputask-controller.args" -}}
{{- $c := .Values.controller -}}
{{- $le := .Values.leaderElection -}}
{{- $args := list (printf "--leader-elect=%t" $le.enabled) -}}
{{- if $le.enabled }}
{{- $args = append $args (printf "--leader-elect-lease-duration=%s" $le.leaseDuration) }}
{{- $args = append $args (printf "--leader-elect-renew-deadline=%s" $le.renewDeadline) }}
{{- $args = append $args (printf "--leader-elect-retry-period=%s" $le.retryPeriod) }}
{{- /* The Lease goes where the chart grants the leader-election Role. */}}
{{- $args = append $args (printf "--leader-elect-resource-namespace=%s" .Release.Namespace) }}
{{- with $le.resourceName }}
{{- $args = append $args (printf "--leader-elect-resource-name=%s" .) }}
{{- end }}
{{- end }}
{{- if .Values.metrics.enabled }}
{{- $args = append $args (printf "--metrics-bind-address=:%d" (.Values.metrics.port | int64)) }}
{{- else }}
{{- $args = append $args "--metrics-bind-address=0" }}
{{- end }}
{{- $args = append $args (printf "--health-probe-bind-address=:%d" (.Values.health.port | int64)) }}
{{- $args = append $args (printf "--workers=%d" ($c.workers | int64)) }}
{{- $args = append $args (printf "--task-workers=%d" ($c.taskWorkers | int64)) }}
{{- $args = append $args (printf "--kube-api-qps=%v" $c.kubeAPIQPS) }}
{{- $args = append $args (printf "--kube-api-burst=%d" ($c.kubeAPIBurst | int64)) }}
{{- $args = append $args (printf "--kube-api-content-type=%s" $c.kubeAPIContentType) }}
{{- $args = append $args (printf "--gpu-resource-name=%s" $c.gpuResourceName) }}
{{- $args = append $args (printf "--gpu-label-key=%s" $c.gpuLabelKey) }}
{{- $args = append $args (printf "--gpu-allocation=%s" $c.gpuAllocation) }}
{{- $args = append $args (printf "--dra-device-class=%s" $c.draDeviceClass) }}
{{- $args = append $args (printf "--dra-model-attribute=%s" $c.draModelAttribute) }}
{{- $args = append $args (printf "--default-image=%s" $c.defaultImage) }}
{{- $args = append $args (printf "--gpu-taint-toleration=%t" $c.gpuTaintToleration) }}
{{- $args = append $args (printf "--reschedule-interval=%s" $c.rescheduleInterval) }}
{{- $args = append $args (printf "--pending-timeout=%s" $c.pendingTimeout) }}
{{- $args = append $args (printf "--node-not-ready-timeout=%s" $c.nodeNotReadyTimeout) }}
{{- $args = append $args (printf "--max-concurrent-reschedules=%d" ($c.maxConcurrentReschedules | int64)) }}
{{- $args = append $args (printf "--informer-resync=%s" $c.informerResync) }}
{{- $args = append $args (printf "--shutdown-grace-period=%s" $c.shutdownGracePeriod) }}
{{- $args = append $args (printf "--profiling=%t" $c.profiling) }}
{{- with $c.loadIndex.allowedCIDRs }}
{{- $args = append $args (printf "--load-index-allowed-cidrs=%s" (join "," .)) }}
{{- end }}
{{- $args = append $args (printf "--load-index-allow-loopback=%t" $c.loadIndex.allowLoopback) }}
{{- $args = append $args (printf "-v=%d" ($c.logLevel | int64)) }}
{{- $args = concat $args .Values.extraArgs }}
{{- toYaml $args }}
{{- end }}

{{/* The labels that select the packing scheduler's pods, apart from the controller's. */}}
{{- define "gputask-controller.packingSchedulerLabels" -}}
app.kubernetes.io/name: gputask-pack-scheduler
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
