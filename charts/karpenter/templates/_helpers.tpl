{{/* Names ------------------------------------------------------------------------------- */}}

{{- define "karpenter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release-scoped name; the release name alone when it already contains the chart name. */}}
{{- define "karpenter.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "karpenter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "karpenter.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "karpenter.containerName" -}}
{{- default "controller" .Values.controller.containerName -}}
{{- end -}}

{{/* The image by digest when one is given, else by tag (the appVersion by default). */}}
{{- define "karpenter.image" -}}
{{- $image := .Values.controller.image -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $image.repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $image.repository (default .Chart.AppVersion $image.tag) -}}
{{- end -}}
{{- end -}}

{{/* Labels -------------------------------------------------------------------------------- */}}

{{- define "karpenter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "karpenter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "karpenter.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "karpenter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Metadata shared by every object: labels and the user's extra annotations. */}}
{{- define "karpenter.metadata" -}}
labels:
  {{- include "karpenter.labels" . | nindent 2 }}
{{- with .Values.additionalAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Scheduling ---------------------------------------------------------------------------- */}}

{{/* The affinity value, with the chart's selector labels added to pod (anti-)affinity terms
     that name none, so "one controller per node" works without repeating the labels. */}}
{{- define "karpenter.affinity" -}}
{{- $selector := include "karpenter.selectorLabels" . | fromYaml -}}
{{- $affinity := deepCopy .Values.affinity -}}
{{- range $kind := list "podAffinity" "podAntiAffinity" -}}
{{- with index $affinity $kind -}}
{{- range $term := (get . "requiredDuringSchedulingIgnoredDuringExecution" | default list) -}}
{{- if not (hasKey $term "labelSelector") -}}
{{- $_ := set $term "labelSelector" (dict "matchLabels" $selector) -}}
{{- end -}}
{{- end -}}
{{- range $weighted := (get . "preferredDuringSchedulingIgnoredDuringExecution" | default list) -}}
{{- if and (hasKey $weighted "podAffinityTerm") (not (hasKey $weighted.podAffinityTerm "labelSelector")) -}}
{{- $_ := set $weighted.podAffinityTerm "labelSelector" (dict "matchLabels" $selector) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toYaml $affinity -}}
{{- end -}}

{{/* The spread constraints, each with the chart's selector labels unless it names a selector. */}}
{{- define "karpenter.topologySpreadConstraints" -}}
{{- $selector := include "karpenter.selectorLabels" . | fromYaml -}}
{{- $constraints := list -}}
{{- range $constraint := .Values.topologySpreadConstraints -}}
{{- $copy := deepCopy $constraint -}}
{{- if not (hasKey $copy "labelSelector") -}}
{{- $_ := set $copy "labelSelector" (dict "matchLabels" $selector) -}}
{{- end -}}
{{- $constraints = append $constraints $copy -}}
{{- end -}}
{{- toYaml $constraints -}}
{{- end -}}

{{/* Values this chart reads ------------------------------------------------------------- */}}

{{/*
The keys of values.yaml this chart reads. A key mapped to a mapping is a section whose keys are
checked in turn; a key mapped to ~ is read whole (free-form maps and lists). Keys a user sets
that are not here (an older Karpenter's, or a typo) are accepted by values.schema.json, as
Karpenter's chart accepts them, and named in NOTES.txt. tests/chart.rs renders the defaults and
expects no such key, so a key added to values.yaml must be added here too.
*/}}
{{- define "karpenter.knownValues" -}}
global: ~
nameOverride: ~
fullnameOverride: ~
additionalLabels: ~
additionalAnnotations: ~
imagePullPolicy: ~
imagePullSecrets: ~
service:
  annotations: ~
serviceAccount:
  create: ~
  name: ~
  annotations: ~
additionalClusterRoleRules: ~
serviceMonitor:
  enabled: ~
  additionalLabels: ~
  relabelings: ~
  metricRelabelings: ~
  endpointConfig: ~
replicas: ~
revisionHistoryLimit: ~
strategy: ~
podLabels: ~
podAnnotations: ~
podDisruptionBudget:
  name: ~
  maxUnavailable: ~
podSecurityContext: ~
priorityClassName: ~
terminationGracePeriodSeconds: ~
hostNetwork: ~
schedulerName: ~
dnsPolicy: ~
dnsConfig: ~
initContainers: ~
nodeSelector: ~
affinity: ~
topologySpreadConstraints: ~
tolerations: ~
extraVolumes: ~
controller:
  containerName: ~
  image:
    repository: ~
    tag: ~
    digest: ~
  env: ~
  envFrom: ~
  securityContext:
    appArmorProfile: ~
    seLinuxOptions: ~
    seccompProfile: ~
  resources: ~
  extraVolumeMounts: ~
  sidecarContainer: ~
  sidecarVolumeMounts: ~
  metrics:
    port: ~
  healthProbe:
    port: ~
logLevel: ~
logOutputPaths: ~
logErrorOutputPaths: ~
settings:
  batchMaxDuration: ~
  batchIdleDuration: ~
  preferencePolicy: ~
  clusterCABundle: ~
  clusterName: ~
  clusterEndpoint: ~
  isolatedVPC: ~
  eksControlPlane: ~
  vmMemoryOverheadPercent: ~
  interruptionQueue: ~
  reservedENIs: ~
  enableProfiling: ~
  featureGates:
    nodeRepair: ~
    reservedCapacity: ~
    spotToSpotConsolidation: ~
{{- end -}}

{{/* One line "- path" per key of .values not in .known (a dict from karpenter.knownValues). */}}
{{- define "karpenter.unknownValues" -}}
{{- range $key, $value := .values }}
{{- $path := printf "%s%s" $.prefix $key }}
{{- if not (hasKey $.known $key) }}
- {{ $path }}
{{- else if and (kindIs "map" $value) (kindIs "map" (get $.known $key)) }}
{{- include "karpenter.unknownValues" (dict "values" $value "known" (get $.known $key) "prefix" (printf "%s." $path)) }}
{{- end }}
{{- end }}
{{- end -}}
