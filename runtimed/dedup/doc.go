// Package dedup records the outcomes of invocations by the ID their caller
// sent, so that a repeat within a window is answered with the first
// outcome instead of running the handler again, and a repeat while the
// first is still in flight waits for it.
//
// A Table belongs to one registration of one function: runtimed starts an
// empty one for a new registration ID, a new attempt and after a restart.
// It is bounded by the window, by a number of entries and by the bytes of
// the recorded outcomes; the oldest outcome goes first, and one outcome
// larger than the byte bound is kept alone. A Budget shared by the Tables
// of one Pod bounds their bytes together, evicting the oldest outcome of
// any of them first. Tombstones, which may be shared the same way, keep
// the IDs of outcomes evicted within their window, so that a repeat is
// told the outcome is no longer known rather than run twice; MaxWaiters
// bounds the callers waiting for one invocation in flight.
package dedup
