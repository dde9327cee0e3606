{{/* Release-scoped name, short enough to prefix scorer group names (<= 52 chars in all). */}}
{{- define "headrace.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 21 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 21 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "headrace.labels" -}}
app.kubernetes.io/name: headrace
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "headrace.selector" -}}
app.kubernetes.io/name: headrace
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "headrace.image" -}}
{{ printf "%s:%s" .Values.image.repository .Values.image.tag | quote }}
{{- end -}}

{{- define "headrace.kafkaSecret" -}}
{{- .Values.kafka.existingSecret | default (printf "%s-kafka" (include "headrace.fullname" .)) -}}
{{- end -}}

{{- define "headrace.dfsClaim" -}}
{{- .Values.dfs.existingClaim | default (printf "%s-dfs" (include "headrace.fullname" .)) -}}
{{- end -}}

{{- define "headrace.trainerSA" -}}
{{- printf "%s-trainer" (include "headrace.fullname" .) -}}
{{- end -}}

{{- define "headrace.scorerSA" -}}
{{- printf "%s-scorer" (include "headrace.fullname" .) -}}
{{- end -}}

{{/* Env shared by every Headrace container: Kafka from the Secret, the DFS root. */}}
{{- define "headrace.commonEnv" -}}
- name: HEADRACE_BOOTSTRAP
  valueFrom:
    secretKeyRef:
      name: {{ include "headrace.kafkaSecret" . }}
      key: bootstrap
- name: HEADRACE_KAFKA_CONFIG
  valueFrom:
    secretKeyRef:
      name: {{ include "headrace.kafkaSecret" . }}
      key: config
- name: HEADRACE_DFS_ROOT
  value: {{ .Values.dfs.root | quote }}
{{- end -}}

{{- define "headrace.mounts" -}}
- name: dfs
  mountPath: {{ .Values.dfs.root }}
{{- if .Values.kafka.tls.caSecret }}
- name: kafka-tls
  mountPath: /etc/headrace/kafka-tls
  readOnly: true
{{- end }}
{{- end -}}

{{- define "headrace.volumes" -}}
- name: dfs
  persistentVolumeClaim:
    claimName: {{ include "headrace.dfsClaim" . }}
{{- if .Values.kafka.tls.caSecret }}
- name: kafka-tls
  secret:
    secretName: {{ .Values.kafka.tls.caSecret }}
{{- end }}
{{- end -}}

{{/* librdkafka settings assembled from kafka.config + tls + sasl. */}}
{{- define "headrace.kafkaConfig" -}}
{{- $cfg := deepCopy .Values.kafka.config -}}
{{- $tls := .Values.kafka.tls.enabled -}}
{{- $sasl := .Values.kafka.sasl.enabled -}}
{{- if and $tls $sasl }}{{ $_ := set $cfg "security.protocol" "SASL_SSL" }}
{{- else if $tls }}{{ $_ := set $cfg "security.protocol" "SSL" }}
{{- else if $sasl }}{{ $_ := set $cfg "security.protocol" "SASL_PLAINTEXT" }}{{ end -}}
{{- if and $tls .Values.kafka.tls.caSecret }}{{ $_ := set $cfg "ssl.ca.location" "/etc/headrace/kafka-tls/ca.crt" }}{{ end -}}
{{- if $sasl }}
{{- $_ := set $cfg "sasl.mechanism" .Values.kafka.sasl.mechanism -}}
{{- $_ := set $cfg "sasl.username" .Values.kafka.sasl.username -}}
{{- $_ := set $cfg "sasl.password" .Values.kafka.sasl.password -}}
{{- end -}}
{{- toJson $cfg -}}
{{- end -}}
