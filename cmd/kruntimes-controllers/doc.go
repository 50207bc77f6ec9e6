// Command kruntimes-controllers runs the kruntimes controllers (runtime,
// scheduler, recovery, gc) as a process of its own, for clusters that run
// kruntimes-apiserver with --controllers=false. Replicas elect a leader
// through a coordination Lease.
package main
