package runlog

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/storage"

	"kruntimes.io/kruntimes/apis/kruntimes"
)

// sweepPage is how many records a sweep holds at a time.
const sweepPage = 64

// RunState is what a sweep needs of the Run a record names.
type RunState struct {
	// Found is false when no Run has the name.
	Found   bool
	UID     types.UID
	Attempt int32
}

// RunLookup answers the Run namespace/name. fresh asks for a read past
// any cache: a record is deleted only on what such a read showed.
type RunLookup func(ctx context.Context, namespace, name string, fresh bool) (RunState, error)

// SweepResult says what a sweep did.
type SweepResult struct {
	// Deleted records belonged to no Run, or to an attempt older than the
	// last ones kept.
	Deleted int
	// FreedBytes are their bytes, as Size counts them.
	FreedBytes int64
}

// Sweep deletes the records whose Run is gone (a hand-over that raced the
// Run's delete, a crash between a delete and its hook), was replaced by
// another Run of its name, or moved more than keptAttempts past them, and
// counts every namespace's bytes again. A count that changed while the
// records were read (a hand-over, a delete) is not overwritten: only the
// sweep's deletions are taken from it, and the next sweep counts it again.
func (s *Store) Sweep(ctx context.Context, keptAttempts int32, lookup RunLookup) (SweepResult, error) {
	var result SweepResult
	// Read before the records: a count written after this is newer than
	// the sum of the records read.
	seen := map[string]string{}
	if err := s.page(ctx, s.usage, s.usagePrefix, &kruntimes.RunLogUsageList{}, func(obj runtime.Object) error {
		for _, u := range obj.(*kruntimes.RunLogUsageList).Items {
			seen[u.Name] = u.ResourceVersion
		}
		return nil
	}); err != nil {
		return result, err
	}
	sums, freed := map[string]int64{}, map[string]int64{}
	var errs []error
	var last struct {
		namespace, name string
		state           RunState
		fresh           bool
	}
	stateOf := func(namespace, name string, fresh bool) (RunState, error) {
		if last.namespace == namespace && last.name == name && (last.fresh || !fresh) {
			return last.state, nil
		}
		state, err := lookup(ctx, namespace, name, fresh)
		if err != nil {
			return state, err
		}
		last.namespace, last.name, last.state, last.fresh = namespace, name, state, fresh
		return state, nil
	}
	if err := s.page(ctx, s.storage, s.prefix, &kruntimes.RunLogList{}, func(obj runtime.Object) error {
		for i := range obj.(*kruntimes.RunLogList).Items {
			record := &obj.(*kruntimes.RunLogList).Items[i]
			name := strings.TrimSuffix(record.Name, "."+strconv.Itoa(int(record.Attempt)))
			orphan := func(fresh bool) (bool, error) {
				state, err := stateOf(record.Namespace, name, fresh)
				if err != nil {
					return false, err
				}
				return !state.Found || state.UID != record.RunUID || record.Attempt <= state.Attempt-keptAttempts, nil
			}
			gone, err := orphan(false)
			if err == nil && gone {
				gone, err = orphan(true)
			}
			if err != nil {
				errs = append(errs, err)
				sums[record.Namespace] += Size(record)
				continue
			}
			if !gone {
				sums[record.Namespace] += Size(record)
				continue
			}
			n, err := s.remove(ctx, record.Namespace, name, record.RunUID, record.Attempt)
			if err != nil {
				errs = append(errs, err)
				sums[record.Namespace] += Size(record)
				continue
			}
			if n > 0 {
				result.Deleted++
				result.FreedBytes += n
				freed[record.Namespace] += n
			}
		}
		return nil
	}); err != nil {
		return result, errors.Join(append(errs, err)...)
	}
	namespaces := map[string]bool{}
	for _, m := range []map[string]int64{sums, freed} {
		for ns := range m {
			namespaces[ns] = true
		}
	}
	for ns := range seen {
		namespaces[ns] = true
	}
	for ns := range namespaces {
		if _, holds := sums[ns]; !holds && seen[ns] != "" {
			// No record left: the count is zero, which a missing count
			// says as well, so a namespace that is gone (or keeps no log)
			// leaves nothing behind. Only the count read before the
			// records is deleted: a hand-over counts before it writes, so
			// one that counted since made the count newer and keeps it.
			dropped, err := s.dropUsage(ctx, ns, seen[ns])
			if err != nil {
				errs = append(errs, err)
			}
			if dropped || err != nil {
				continue
			}
		}
		err := s.usage.GuaranteedUpdate(ctx, s.usageKey(ns), &kruntimes.RunLogUsage{}, true, nil,
			func(obj runtime.Object, _ storage.ResponseMeta) (runtime.Object, *uint64, error) {
				usage := obj.(*kruntimes.RunLogUsage).DeepCopy()
				if usage.ResourceVersion == seen[ns] {
					usage.Bytes = sums[ns]
				} else {
					usage.Bytes = max(usage.Bytes-freed[ns], 0)
				}
				usage.Name, usage.Namespace = ns, ns
				return usage, nil, nil
			}, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("count the kept-log bytes of namespace %s again: %w", ns, err))
		}
	}
	return result, errors.Join(errs...)
}

// dropUsage deletes namespace's count if its resourceVersion is still
// resourceVersion, and reports whether it did (or no count was left).
func (s *Store) dropUsage(ctx context.Context, namespace, resourceVersion string) (bool, error) {
	err := s.usage.Delete(ctx, s.usageKey(namespace), &kruntimes.RunLogUsage{}, &storage.Preconditions{ResourceVersion: &resourceVersion},
		storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{})
	switch {
	case err == nil, storage.IsNotFound(err):
		return true, nil
	case storage.IsInvalidObj(err), storage.IsConflict(err):
		// Counted since it was read.
		return false, nil
	default:
		return false, fmt.Errorf("delete the kept-log count of namespace %s, which keeps no log: %w", namespace, err)
	}
}

// page lists everything under prefix, a page at a time, handing each page
// to visit.
func (s *Store) page(ctx context.Context, from storage.Interface, prefix string, list runtime.Object, visit func(runtime.Object) error) error {
	continueToken := ""
	for {
		pred := storage.SelectionPredicate{Label: labels.Everything(), Field: fields.Everything(), Limit: sweepPage, Continue: continueToken}
		if err := from.GetList(ctx, prefix+"/", storage.ListOptions{Recursive: true, Predicate: pred}, list); err != nil {
			return fmt.Errorf("list %s: %w", prefix, err)
		}
		if err := visit(list); err != nil {
			return err
		}
		listMeta, err := meta.ListAccessor(list)
		if err != nil {
			return err
		}
		if continueToken = listMeta.GetContinue(); continueToken == "" {
			return nil
		}
	}
}
