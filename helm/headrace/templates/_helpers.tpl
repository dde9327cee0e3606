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
{{- if .Values.image.digest -}}
{{ printf "%s@%s" .Values.image.repository .Values.image.digest | quote }}
{{- else -}}
{{ printf "%s:%s" .Values.image.repository .Values.image.tag | quote }}
{{- end -}}
{{- end -}}

{{- define "headrace.kafkaSecret" -}}
{{- .Values.kafka.existingSecret | default (printf "%s-kafka" (include "headrace.fullname" .)) -}}
{{- end -}}

{{- define "headrace.dfsClaim" -}}
{{- .Values.dfs.existingClaim | default (printf "%s-dfs" (include "headrace.fullname" .)) -}}
{{- end -}}

{{- define "headrace.controlSA" -}}
{{- printf "%s-control" (include "headrace.fullname" .) -}}
{{- end -}}

{{- define "headrace.trainerSA" -}}
{{- printf "%s-trainer" (include "headrace.fullname" .) -}}
{{- end -}}

{{- define "headrace.scorerSA" -}}
{{- printf "%s-scorer" (include "headrace.fullname" .) -}}
{{- end -}}

{{- define "headrace.passwordFile" -}}
/etc/headrace/kafka-sasl/password
{{- end -}}

{{/* Pod Security "restricted": the same settings headrace.trainers.executors.kubernetes_security
     builds for training Jobs. */}}
{{- define "headrace.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.security.uid }}
runAsGroup: {{ .Values.security.gid }}
fsGroup: {{ .Values.security.gid }}
fsGroupChangePolicy: {{ .Values.security.fsGroupChangePolicy }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "headrace.containerSecurityContext" -}}
allowPrivilegeEscalation: false
privileged: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
{{- end -}}

{{/* Operators bump kafka.credentialsRevision to roll pods after a credentials change; nothing
     derived from the password is ever put in a pod annotation. */}}
{{- define "headrace.podAnnotations" -}}
headrace.io/credentials-revision: {{ .Values.kafka.credentialsRevision | quote }}
{{- end -}}

{{/* Env shared by every Headrace container: Kafka from the Secret (the SASL password as a
     file), the DFS root, and HOME/TMPDIR/caches on the /tmp emptyDir (read-only root). */}}
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
{{- if .Values.kafka.sasl.enabled }}
- name: HEADRACE_KAFKA_PASSWORD_FILE
  value: {{ include "headrace.passwordFile" . | quote }}
{{- end }}
- name: HEADRACE_DFS_ROOT
  value: {{ .Values.dfs.root | quote }}
- name: HEADRACE_REPLICATION_FACTOR
  value: {{ .Values.kafka.replicationFactor | quote }}
{{- with .Values.kafka.minInsyncReplicas }}
- name: HEADRACE_MIN_INSYNC_REPLICAS
  value: {{ . | quote }}
{{- end }}
- name: HOME
  value: /tmp
- name: TMPDIR
  value: /tmp
- name: XDG_CACHE_HOME
  value: /tmp/.cache
- name: MPLCONFIGDIR
  value: /tmp/.matplotlib
- name: KERAS_HOME
  value: /tmp/.keras
- name: MXNET_HOME
  value: /tmp/.mxnet
{{- end -}}

{{/* Mounts; pass (dict "root" $ "dfsReadOnly" true) for pods that only read the DFS. */}}
{{- define "headrace.mounts" -}}
{{- $v := .root.Values -}}
- name: dfs
  mountPath: {{ $v.dfs.root }}
  {{- if .dfsReadOnly }}
  readOnly: true
  {{- end }}
- name: tmp
  mountPath: /tmp
{{- if $v.kafka.sasl.enabled }}
- name: kafka-sasl
  mountPath: /etc/headrace/kafka-sasl
  readOnly: true
{{- end }}
{{- if $v.kafka.tls.caSecret }}
- name: kafka-tls
  mountPath: /etc/headrace/kafka-tls
  readOnly: true
{{- end }}
{{- end -}}

{{- define "headrace.volumes" -}}
- name: dfs
  persistentVolumeClaim:
    claimName: {{ include "headrace.dfsClaim" . }}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.security.tmpSizeLimit }}
{{- if .Values.kafka.sasl.enabled }}
- name: kafka-sasl
  secret:
    secretName: {{ include "headrace.kafkaSecret" . }}
    defaultMode: 0440
    items:
      - key: password
        path: password
{{- end }}
{{- if .Values.kafka.tls.caSecret }}
- name: kafka-tls
  secret:
    secretName: {{ .Values.kafka.tls.caSecret }}
    defaultMode: 0444
{{- end }}
{{- end -}}

{{/* librdkafka settings assembled from kafka.config + tls + sasl. The password is not in
     here: pods read it from the mounted file (HEADRACE_KAFKA_PASSWORD_FILE). */}}
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
{{- end -}}
{{- toJson $cfg -}}
{{- end -}}

{{/* KEDA's Kafka scaler names SASL modes in lower case with underscores. */}}
{{- define "headrace.kedaSaslMode" -}}
{{- $m := .Values.kafka.sasl.mechanism -}}
{{- if not .Values.kafka.sasl.enabled }}none
{{- else if eq $m "PLAIN" }}plaintext
{{- else if eq $m "SCRAM-SHA-256" }}scram_sha256
{{- else if eq $m "SCRAM-SHA-512" }}scram_sha512
{{- else }}{{ fail (printf "kafka.sasl.mechanism %s has no KEDA mode" $m) }}
{{- end -}}
{{- end -}}

{{/* Operator caps on training requests (read by the control plane and the trainer). */}}
{{- define "headrace.limitsMap" -}}
{{- $l := .Values.limits -}}
{{- $m := dict -}}
{{- range $key, $var := dict "maxLayers" "HEADRACE_MAX_LAYERS" "maxParameters" "HEADRACE_MAX_PARAMETERS" "maxEpochs" "HEADRACE_MAX_EPOCHS" "maxGpus" "HEADRACE_MAX_GPUS" "maxWorkers" "HEADRACE_MAX_WORKERS" "maxDatasetBytes" "HEADRACE_MAX_DATASET_BYTES" }}
{{- $v := index $l $key -}}
{{- if not (kindIs "invalid" $v) }}{{ $_ := set $m $var (printf "%v" (int64 $v)) }}{{ end -}}
{{- end -}}
{{- toJson $m -}}
{{- end -}}

{{- define "headrace.limitsJson" -}}
{{- include "headrace.limitsMap" . -}}
{{- end -}}

{{- define "headrace.limitsEnv" -}}
{{- range $var, $v := (include "headrace.limitsMap" . | fromJson) }}
- name: {{ $var }}
  value: {{ $v | quote }}
{{- end }}
{{- end -}}
