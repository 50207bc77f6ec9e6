// Package runlog keeps the log of each attempt of a task Run: one record
// per attempt, tagged with the Run's UID, outside the Run object (lists and
// watches of Runs never carry it), in the storage backend the Runs are in,
// without a watch cache. registry/run serves it as runs/log.
package runlog
