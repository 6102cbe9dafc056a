{{- define "sie.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sie.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "sie.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "sie.image" -}}
{{- $tag := .root.Values.image.tag | default .root.Chart.AppVersion -}}
{{- printf "%s/%s:%s" .root.Values.image.registry .repository $tag -}}
{{- end -}}

{{- define "sie.natsUrl" -}}
{{- if .Values.nats.install -}}
{{- printf "nats://%s-nats:4222" (include "sie.fullname" .) -}}
{{- else -}}
{{- required "nats.url is required when nats.install is false" .Values.nats.url -}}
{{- end -}}
{{- end -}}

{{- define "sie.configUrl" -}}
{{- printf "http://%s-config.%s.svc:%v" (include "sie.fullname" .) .Release.Namespace .Values.config.port -}}
{{- end -}}

{{- define "sie.gatewayUrl" -}}
{{- printf "http://%s-gateway.%s.svc:%v" (include "sie.fullname" .) .Release.Namespace .Values.gateway.port -}}
{{- end -}}

{{- define "sie.secretName" -}}
{{- .Values.auth.existingSecret | default (printf "%s-auth" (include "sie.fullname" .)) -}}
{{- end -}}

{{/* sie-config's pods are named <fullname>-config-<hash>-<id>: trusting that prefix trusts their deltas. */}}
{{- define "sie.trustedProducers" -}}
{{- printf "%s-config" (include "sie.fullname" .) -}}
{{- end -}}

{{- define "sie.configuredGpus" -}}
{{- $profiles := list -}}
{{- range $name, $pool := .Values.workers.pools -}}
{{- if $pool.enabled -}}{{- $profiles = append $profiles $pool.machineProfile -}}{{- end -}}
{{- end -}}
{{- $profiles | uniq | sortAlpha | join "," -}}
{{- end -}}

{{/* The follower settings gateways and workers share (docs/cluster.md, the control plane). */}}
{{- define "sie.followerEnv" -}}
{{- if .Values.config.enabled }}
- name: SIE_CONFIG_SERVICE_URL
  value: {{ include "sie.configUrl" . | quote }}
- name: SIE_NATS_CONFIG_TRUSTED_PRODUCERS
  value: {{ include "sie.trustedProducers" . | quote }}
- name: SIE_ADMIN_TOKEN
  valueFrom:
    secretKeyRef: {name: {{ include "sie.secretName" . }}, key: admin-token, optional: true}
{{- end }}
{{- end -}}

{{/* NATS users: the chart's own NATS, or an existing one whose passwords are in nats.auth.existingSecret. */}}
{{- define "sie.natsAuth" -}}
{{- if and .Values.nats.auth.enabled (or .Values.nats.install .Values.nats.auth.existingSecret) }}true{{ end -}}
{{- end -}}

{{/* Copies JetStream keeps of what the cluster creates: the value, or 3 on the chart's own NATS cluster. */}}
{{- define "sie.streamReplicas" -}}
{{- $set := int .Values.queueRouting.streamReplicas -}}
{{- if gt $set 0 -}}{{ $set }}
{{- else if and .Values.nats.install (ge (int .Values.nats.replicas) 3) -}}3
{{- else -}}1
{{- end -}}
{{- end -}}

{{- define "sie.natsSecretName" -}}
{{- .Values.nats.auth.existingSecret | default (printf "%s-nats-auth" (include "sie.fullname" .)) -}}
{{- end -}}

{{/* The NATS user of a role (sie.queue.roles) and its password, for gateways, workers and sie-config. */}}
{{- define "sie.natsEnv" -}}
- name: SIE_NATS_URL
  value: {{ include "sie.natsUrl" .root | quote }}
{{- if include "sie.natsAuth" .root }}
- name: SIE_NATS_USER
  value: sie-{{ .role }}
- name: SIE_NATS_PASSWORD
  valueFrom:
    secretKeyRef: {name: {{ include "sie.natsSecretName" .root }}, key: {{ .role }}}
{{- end }}
{{- end -}}
