// Package nodeagent is the per-node agent: a set of runnables (the local-disk rescue, the S3
// rescue) sharing one Kubernetes client, one node-scoped view of the cluster (ClusterView), event
// recorder, clock and metrics registry, with /healthz and /metrics servers (Agent).
//
// # What one agent reads, and why on demand
//
// The agent runs on every node, so whatever it lists and watches is paid once per node: an
// agent that watches every PV costs the apiserver O(nodes × PVs) in watch fan-out and a full
// relist of every PV on each DaemonSet rollout, and holds every PV in each node's memory. kubelet
// and CSI node plugins, the anchors for per-node components, cost in proportion to what is on
// their node. KubeView does the same:
//
//   - pods bound to this node (field selector spec.nodeName) and this Node (metadata.name) come
//     from one shared informer factory: two watches per agent, as kubelet has;
//   - PersistentVolumes, PersistentVolumeClaims, StorageClasses and CSIDrivers are read by name,
//     only those that this node's pods (or this node's rescue records) name, and kept for a TTL
//     in a bounded cache; concurrent misses of one name share one request;
//   - Secrets are read live and never kept;
//   - managedFields and kubectl's last-applied-configuration are stripped from everything kept.
//
// The alternative was a single cluster-level component labelling each PV with the node that
// uses it, so that agents could watch PVs by label. It was not chosen:
//
//   - it adds a Deployment with cluster-wide PV/PVC/pod watches and write access to every PV —
//     a new privileged component, and the one place whose failure stops every node's rescues;
//   - a label lags the binding it mirrors: a pod that starts right after its claim binds would
//     be invisible to its node's agent until the labeller caught up, which is exactly the moment
//     (a disk lost, a mount dead at start) the rescues exist for;
//   - the label selector would still be a client's choice: RBAC cannot limit a node's agent to
//     the PVs labelled for it, so it would buy no privilege reduction;
//   - what the rescues need is small and stable: a bound PVC's volumeName never changes and a
//     PV's source, secret refs and node affinity are immutable, so a read per object per TTL is
//     cheap, and a stale copy is never wrong about them.
//
// The price of reading on demand is one GET per object in use per TTL, and up to TTL of delay in
// seeing a change of a mutable field (annotations written by others); the agent's own writes
// Forget the entry.
//
// # Measured
//
// hack/bench's "scale" section (make bench; `bench -only scale`) runs the built agent against a
// real kube-apiserver holding its node's 500 pods on local block PVs and 200 pods on S3 PVs,
// first alone (the baseline), then with 50,000 PVs and 50,000 PVCs of other nodes added, and
// reports RSS, CPU and the apiserver's apiserver_request_total deltas (LIST/WATCH of PVs and PVCs
// must be zero) for each run; BENCHMARKS.md holds the figures of the last run. Before this view
// the agent listed and watched every PV twice and every PVC and StorageClass once, so its memory
// and its share of the apiserver grew with the cluster (issue 14).
//
// Measured 2026-12-01 on 2 shared cores, the agent's local-disk and S3 rescues reading through
// this view (their branches merged for the measurement), 500 local + 200 S3 pods on the node:
//
//	run                                     RSS        CPU (1 core)  PV/PVC LIST+WATCH  PV / PVC GETs
//	own node only (baseline)                53.8 MiB   3.10 %        0                  —
//	+ 50,000 PVs + 50,000 PVCs elsewhere    54.7 MiB   2.80 %        0                  700 / 700 in 31 s
//	                                        (1.02×)    (0.90×)
//
// The GETs are the first pass: each of the node's 1,400 objects read once, then served from the
// cache for the TTL (10 min: steady state ≈ 2.3 GET/s for this node). The agent's other requests
// were one LIST and two WATCHes each of pods and of its node (field-selected) and one nodes/status
// patch. An earlier run with a 30 s TTL and client-go's default 5 QPS showed 78 PV + 79 PVC GETs
// in 31 s — the first pass throttled to minutes — hence the 10-minute TTL and kubelet's 50/100
// QPS for the agent. Before the view (BENCHMARKS.md of 2026-11-30, 500 local PVs without pods +
// 200 S3 pods, the rescues with their own cluster-wide PV/PVC/StorageClass informers): 43.2 MiB,
// 0.45 %, and every PV and PVC of the cluster listed, watched and kept by every agent.
//
// # Health
//
// A failing rescue is restarted in process by the Agent's supervisor and reported per runnable
// in metrics; /healthz does not fail for it, because restarting the container would kill the
// s3fs bridges serving every other pod's S3 volumes on the node (see Agent).
//
// # When the API server is away
//
// /healthz and /metrics are served from the start; the informers start without blocking and
// the rescues wait for their first sync (AfterSync), since a rescue on an empty pod list would
// take every volume for unused. After that nothing in the agent stops or restarts for an
// unreachable API server: the informers keep their last state, KubeView answers a failed live
// read with its last copy (a NotFound is never served from memory, so nothing is retired on an
// outage), and what truly needs the API server — a secret for a replay, Events, status writes —
// is retried by the rescues' next passes. APIContact measures the outage (metrics
// pvrescue_agent_apiserver_*) and writes the Node condition PVRescueAPIServerUnreachable once
// the API server answers again.
//
// What is kept on disk (under stateDir) is only what identifies the agent's own work: names,
// paths, devices, process ids (localdisk records, s3 handed/bridge records). No secret and no
// copy of an API object is ever written: S3 credentials live only on a tmpfs while their bridge
// runs, and PVs and pods are read again from the API server.
//
// # Deletions
//
// A PV that only this node's records name (no pod here uses it) is read live on every pass
// (localdisk Forgets it first), so its deletion retires its fake within one resync period while
// PVs in use stay cached for the TTL (a bound PV in use cannot be deleted: pv-protection).
package nodeagent
