{{/*
File: charts/qsync/templates/_rbac_rules.tpl
The RBAC rules of the operator, exactly the calls it makes (charts/qsync/rbac-contract.yaml lists
them; tests/charts checks the rendered rules against it). Three groups, by where they must be
granted: the job and workload rules (cluster-wide, or per watched namespace), the nodes rule
(cluster-scoped objects: always a ClusterRole) and the leader-election rule (the Lease namespace).
*/}}

{{/* HybridTrainingJobs, the children the reconciler creates (gang-scheduled jobs' PodGroups
among them), and the inference workloads it borrows GPUs from (scaled in and out by patching
spec.replicas and its annotations). */}}
{{- define "qsync.rules.workloads" -}}
- apiGroups: ["qsync.dev"]
  resources: ["hybridtrainingjobs"]
  verbs: ["get", "list", "watch", "update", "delete"]
- apiGroups: ["qsync.dev"]
  resources: ["hybridtrainingjobs/status"]
  verbs: ["update"]
- apiGroups: ["qsync.dev"]
  resources: ["hybridtrainingjobs/finalizers"]
  verbs: ["update"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "delete"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["list", "watch", "create"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["list", "watch", "create", "update"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: ["apps"]
  resources: ["deployments", "statefulsets"]
  verbs: ["list", "watch", "patch"]
- apiGroups: ["scheduling.x-k8s.io"]
  resources: ["podgroups"]
  verbs: ["get", "create", "update", "delete"]
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["get", "create", "update", "delete"]
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads/status"]
  verbs: ["update"]
{{- end -}}

{{/* Cluster-scoped reads: the pool's node labels (nvidia.com/gpu.product, device classes), and
     the Kueue ResourceFlavors a queued job is admitted on (their node labels and tolerations). */}}
{{- define "qsync.rules.nodes" -}}
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["list", "watch"]
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["resourceflavors"]
  verbs: ["get"]
{{- end -}}

{{/* The leader-election Lease. */}}
{{- define "qsync.rules.leaderElection" -}}
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "create", "update"]
{{- end -}}
