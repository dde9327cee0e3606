{{/* The release's base name: <release>-headrace, or the release alone if it says headrace. */}}
{{- define "headrace.fullname" -}}
{{- ternary .Release.Name (printf "%s-%s" .Release.Name .Chart.Name) (contains .Chart.Name .Release.Name) -}}
{{- end -}}

{{/* An object name, (dict "root" $ "suffix" "control") -> <fullname>-control, at most 52
     characters (a StatefulSet's pods carry <name>-<10-char hash> as a 63-char label; CronJobs
     allow 52). A base too long for the suffix is cut and followed by 8 hex of its sha256, so
     two long release names in one namespace never share a name and the suffix stays readable. */}}
{{- define "headrace.name" -}}
{{- $base := include "headrace.fullname" .root -}}
{{- $budget := sub 51 (len .suffix) | int -}}
{{- if le (len $base) $budget -}}
{{- printf "%s-%s" $base .suffix -}}
{{- else -}}
{{- printf "%s-%s-%s" ($base | trunc (sub $budget 9 | int) | trimSuffix "-") (sha256sum $base | trunc 8) .suffix -}}
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

{{/* An image reference from an {repository, tag, digest} block; the digest wins. */}}
{{- define "headrace.imageRef" -}}
{{- if .digest -}}
{{ printf "%s@%s" .repository .digest | quote }}
{{- else -}}
{{ printf "%s:%s" .repository .tag | quote }}
{{- end -}}
{{- end -}}

{{/* The CPU image (control plane, CPU scorers, schedule runs, CPU training pods). */}}
{{- define "headrace.image" -}}
{{- include "headrace.imageRef" .Values.image -}}
{{- end -}}

{{/* The CUDA image (Containerfile.gpu) for pods that request GPUs. */}}
{{- define "headrace.gpuImage" -}}
{{- include "headrace.imageRef" .Values.gpuImage -}}
{{- end -}}

{{/* A scorer group's image: its own `image` block if set, else the GPU image for a group
     that requests GPUs and the CPU image otherwise. (dict "root" $ "group" $g) */}}
{{- define "headrace.groupImage" -}}
{{- $v := .root.Values -}}
{{- $base := ternary $v.gpuImage $v.image (gt (.group.gpu | default 0 | int) 0) -}}
{{- include "headrace.imageRef" (merge (deepCopy (.group.image | default dict)) $base) -}}
{{- end -}}

{{- define "headrace.pullPolicy" -}}
{{- .Values.image.pullPolicy -}}
{{- end -}}

{{/* imagePullSecrets of every pod (a list of names or {name: ...}). */}}
{{- define "headrace.imagePullSecrets" -}}
{{- range .Values.imagePullSecrets }}
- name: {{ if kindIs "string" . }}{{ . }}{{ else }}{{ .name }}{{ end }}
{{- end -}}
{{- end -}}

{{/* A role's ServiceAccount: serviceAccount.name (or the fullname) + "-" + role.
     (dict "root" $ "role" "control|trainer|scorer") */}}
{{- define "headrace.serviceAccountName" -}}
{{- with .root.Values.serviceAccount.name -}}
{{- printf "%s-%s" . $.role -}}
{{- else -}}
{{- include "headrace.name" (dict "root" .root "suffix" .role) -}}
{{- end -}}
{{- end -}}

{{/* A ServiceAccount the chart creates: annotations (IRSA, Workload Identity) from
     serviceAccount.annotations merged with the role's own; the pull secrets too, so the
     training pods the executor creates under it inherit them. */}}
{{- define "headrace.serviceAccount" -}}
{{- $v := .root.Values -}}
{{- if $v.serviceAccount.create }}
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ include "headrace.serviceAccountName" . }}
  labels:
    {{- include "headrace.labels" .root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
  {{- $ann := merge (deepCopy (index $v.serviceAccount.roleAnnotations .role | default dict)) $v.serviceAccount.annotations }}
  {{- with $ann }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
automountServiceAccountToken: false
{{- with $v.imagePullSecrets }}
imagePullSecrets:
  {{- include "headrace.imagePullSecrets" $.root | nindent 2 }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "headrace.kafkaSecret" -}}
{{- .Values.kafka.existingSecret | default (include "headrace.name" (dict "root" . "suffix" "kafka")) -}}
{{- end -}}

{{- define "headrace.dfsClaim" -}}
{{- .Values.dfs.existingClaim | default (include "headrace.name" (dict "root" . "suffix" "dfs")) -}}
{{- end -}}

{{- define "headrace.controlSA" -}}
{{- include "headrace.serviceAccountName" (dict "root" . "role" "control") -}}
{{- end -}}

{{- define "headrace.trainerSA" -}}
{{- include "headrace.serviceAccountName" (dict "root" . "role" "trainer") -}}
{{- end -}}

{{- define "headrace.scorerSA" -}}
{{- include "headrace.serviceAccountName" (dict "root" . "role" "scorer") -}}
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
{{- if $v.kafka.tls.clientCertSecret }}
- name: kafka-client-cert
  mountPath: /etc/headrace/kafka-client
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
{{- with .Values.kafka.tls.clientCertSecret }}
{{- /* mTLS (e.g. a Strimzi KafkaUser's Secret): only the certificate and its key. */}}
- name: kafka-client-cert
  secret:
    secretName: {{ . }}
    defaultMode: 0440
    items:
      - key: {{ $.Values.kafka.tls.certKey }}
        path: user.crt
      - key: {{ $.Values.kafka.tls.keyKey }}
        path: user.key
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
{{- if and $tls .Values.kafka.tls.clientCertSecret }}
{{- $_ := set $cfg "ssl.certificate.location" "/etc/headrace/kafka-client/user.crt" -}}
{{- $_ := set $cfg "ssl.key.location" "/etc/headrace/kafka-client/user.key" -}}
{{- end -}}
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

{{/* The brokers' TCP ports (JSON list): networkPolicy.kafka.ports if set, else the port of
     each kafka.bootstrap entry (9092 when none is written) plus networkPolicy.kafka.extraPorts
     (brokers that advertise other ports than the bootstrap's). */}}
{{- define "headrace.kafkaPorts" -}}
{{- $np := .Values.networkPolicy.kafka -}}
{{- $ports := list -}}
{{- if $np.ports -}}
{{- range $np.ports }}{{ $ports = append $ports (int .) }}{{ end -}}
{{- else -}}
{{- range $entry := splitList "," .Values.kafka.bootstrap -}}
{{- $hp := regexReplaceAll "^[A-Za-z_]+://" (trim $entry) "" -}}
{{- if $hp -}}
{{- $ports = append $ports (ternary (regexFind "[0-9]+$" $hp) "9092" (regexMatch ":[0-9]+$" $hp) | int) -}}
{{- end -}}
{{- end -}}
{{- range $np.extraPorts }}{{ $ports = append $ports (int .) }}{{ end -}}
{{- end -}}
{{- if not $ports -}}
{{- fail "networkPolicy.kafka.ports: no Kafka port can be read from kafka.bootstrap (empty: kafka.existingSecret holds it); list the brokers' ports" -}}
{{- end -}}
{{- toJson (uniq $ports) -}}
{{- end -}}

{{/* The DNS egress rule: the preset's peers and ports, plus networkPolicy.dns.to and .cidrs.
     kube-dns: CoreDNS/kube-dns pods in kube-system, port 53. nodelocal: those + NodeLocal
     DNSCache's link-local address. openshift: the openshift-dns pods, which listen on 5353
     (the policy sees the port after the Service's translation). none: only to/cidrs. */}}
{{- define "headrace.dnsRule" -}}
{{- $d := .Values.networkPolicy.dns -}}
{{- $kubeDns := dict "namespaceSelector" (dict "matchLabels" (dict "kubernetes.io/metadata.name" "kube-system")) "podSelector" (dict "matchLabels" (dict "k8s-app" "kube-dns")) -}}
{{- $to := list -}}
{{- $ports := list 53 -}}
{{- if eq $d.preset "kube-dns" -}}
{{- $to = list $kubeDns -}}
{{- else if eq $d.preset "nodelocal" -}}
{{- $to = list $kubeDns (dict "ipBlock" (dict "cidr" (printf "%s/32" $d.nodeLocalAddress))) -}}
{{- else if eq $d.preset "openshift" -}}
{{- $to = list (dict "namespaceSelector" (dict "matchLabels" (dict "kubernetes.io/metadata.name" "openshift-dns")) "podSelector" (dict "matchLabels" (dict "dns.operator.openshift.io/daemonset-dns" "default"))) -}}
{{- $ports = list 5353 -}}
{{- end -}}
{{- $to = concat $to ($d.to | default list) -}}
{{- range $d.cidrs }}{{ $to = append $to (dict "ipBlock" (dict "cidr" .)) }}{{ end -}}
{{- with $d.ports }}{{ $ports = . }}{{ end -}}
{{- $rulePorts := list -}}
{{- range $ports }}{{ $rulePorts = concat $rulePorts (list (dict "port" (int .) "protocol" "UDP") (dict "port" (int .) "protocol" "TCP")) }}{{ end -}}
{{- $rule := dict "ports" $rulePorts -}}
{{- if $to }}{{ $_ := set $rule "to" $to }}{{ end -}}
{{- toJson $rule -}}
{{- end -}}
