package priority

// niceWeights is the kernel's CPU weight of each nice value, -20 first (sched_prio_to_weight in
// kernel/sched/core.c): each step is ~10% more CPU than the next, nice 0 weighs 1024.
var niceWeights = [40]uint64{
	88761, 71755, 56483, 46273, 36291,
	29154, 23254, 18705, 14949, 11916,
	9548, 7620, 6100, 4904, 3906,
	3121, 2501, 1991, 1586, 1277,
	1024, 820, 655, 526, 423,
	335, 272, 215, 172, 137,
	110, 87, 70, 56, 45,
	36, 29, 23, 18, 15,
}

// Weight is the CPU weight the kernel gives a thread of nice value n (clamped to -20..19), on
// the scale of cgroup v1's cpu.shares (1024 is nice 0 and a group's default).
//
// A nice value ranks a thread only against the threads of its own cgroup: a process moved into
// a group of its own competes with the node's other groups by the group's weight, so the group
// is given the weight the nice value stands for.
func Weight(n int) uint64 {
	return niceWeights[min(max(n, -20), 19)+20]
}

// CgroupV2Weight converts a cpu.shares value (2..262144) to cgroup v2's cpu.weight (1..10000)
// as runc and kubelet do, so that a group we weigh compares with the pods' groups as on v1.
func CgroupV2Weight(shares uint64) uint64 {
	shares = min(max(shares, 2), 262144)
	return 1 + (shares-2)*9999/262142
}
