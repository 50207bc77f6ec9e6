// Package embedded implements k8s.io/apiserver's storage.Interface over a
// single bbolt file per server: one global revision shared by every resource,
// etcd-like MVCC history (exact and not-older-than reads, watch replay,
// compaction with 410 Gone), fsynced group commits and in-process watch
// fan-out. It is the single-replica alternative to etcd3.
package embedded
