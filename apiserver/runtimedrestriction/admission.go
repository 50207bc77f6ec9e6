package runtimedrestriction

import (
	"context"
	"fmt"
	"slices"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apiserver/pkg/admission"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/lifecycle"
)

// PluginName names the admission plugin in logs and metrics.
const PluginName = "RuntimedRestriction"

// Admission checks every write of a runtimed identity to a Run against the
// stored object, which is authoritative here: the Run must be of runtimed's
// Runtime and assigned to its Pod, and the write may make only the changes
// runtimed makes. Writes of anyone else pass untouched.
type Admission struct {
	*admission.Handler
}

var _ admission.ValidationInterface = &Admission{}

// NewAdmission returns the plugin.
func NewAdmission() *Admission {
	return &Admission{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete, admission.Connect)}
}

// Validate implements admission.ValidationInterface.
func (p *Admission) Validate(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != kruntimes.Resource("runs") {
		return nil
	}
	id, isRuntimed, err := identityOf(a.GetUserInfo())
	switch {
	case !isRuntimed:
		return nil
	case err != nil:
		return admission.NewForbidden(a, err)
	}
	if a.GetOperation() == admission.Connect && a.GetSubresource() == "log" {
		// Handing over a log: the authorizer allowed it only for a Run
		// assigned to this Pod (and never a read).
		return nil
	}
	if a.GetOperation() != admission.Update {
		return forbidden(a, "runtimed of Pod %s/%s may not %s Runs", id.Pod.Namespace, id.Pod.Name, a.GetOperation())
	}
	run, ok1 := a.GetObject().(*kruntimes.Run)
	old, ok2 := a.GetOldObject().(*kruntimes.Run)
	if !ok1 || !ok2 {
		return forbidden(a, "unexpected object %T replacing %T", a.GetObject(), a.GetOldObject())
	}
	if !ownedBy(old, id) {
		return forbidden(a, "runtimed of Pod %s/%s may write only Runs of Runtime %s assigned to its Pod; Run %s is of Runtime %q on Pod %q",
			id.Pod.Namespace, id.Pod.Name, id.Runtime, old.Name, old.Spec.Runtime, old.Status.AssignedPod)
	}
	switch a.GetSubresource() {
	case "":
		return checkMetadataWrite(a, id, old, run)
	case "status":
		return checkStatusWrite(a, id, old, run)
	}
	return forbidden(a, "runtimed of Pod %s/%s may not write runs/%s", id.Pod.Namespace, id.Pod.Name, a.GetSubresource())
}

// checkMetadataWrite allows runtimed's only write to a Run itself: adding
// or removing the registration-cleanup finalizer.
func checkMetadataWrite(a admission.Attributes, id Identity, old, run *kruntimes.Run) error {
	if !apiequality.Semantic.DeepEqual(old.Spec, run.Spec) {
		return forbidden(a, "runtimed of Pod %s/%s may not change spec of Run %s", id.Pod.Namespace, id.Pod.Name, run.Name)
	}
	if err := checkUnchangedLabels(a, id, old, run); err != nil {
		return err
	}
	if !apiequality.Semantic.DeepEqual(old.OwnerReferences, run.OwnerReferences) {
		return forbidden(a, "runtimed of Pod %s/%s may not change metadata.ownerReferences of Run %s", id.Pod.Namespace, id.Pod.Name, run.Name)
	}
	for _, f := range symmetricDifference(old.Finalizers, run.Finalizers) {
		if f != lifecycle.FinalizerRegistrationCleanup {
			return forbidden(a, "runtimed of Pod %s/%s may add or remove only the finalizer %s, not %s",
				id.Pod.Namespace, id.Pod.Name, lifecycle.FinalizerRegistrationCleanup, f)
		}
	}
	return nil
}

// checkStatusWrite allows the transitions runtimed makes on its Pod's Runs
// (claim, ready, re-register, finish, give back to Pending) and none that
// assign: binding is the scheduler's and recovery's.
func checkStatusWrite(a admission.Attributes, id Identity, old, run *kruntimes.Run) error {
	if err := checkUnchangedLabels(a, id, old, run); err != nil {
		return err
	}
	st, was := &run.Status, &old.Status
	sameAssignment := st.AssignedPod == was.AssignedPod && st.AssignedPodUID == was.AssignedPodUID
	released := st.AssignedPod == "" && st.AssignedPodUID == "" && st.Phase == lifecycle.Pending
	if !sameAssignment && !released {
		return forbidden(a, "runtimed of Pod %s/%s may not change status.assignedPod of Run %s except to release it to Pending",
			id.Pod.Namespace, id.Pod.Name, run.Name)
	}
	if st.Phase == lifecycle.Scheduled && was.Phase != lifecycle.Scheduled {
		return forbidden(a, "runtimed of Pod %s/%s may not move Run %s to Scheduled: only the scheduler binds",
			id.Pod.Namespace, id.Pod.Name, run.Name)
	}
	return nil
}

func checkUnchangedLabels(a admission.Attributes, id Identity, old, run *kruntimes.Run) error {
	if !apiequality.Semantic.DeepEqual(old.Labels, run.Labels) || !apiequality.Semantic.DeepEqual(old.Annotations, run.Annotations) {
		return forbidden(a, "runtimed of Pod %s/%s may not change labels or annotations of Run %s", id.Pod.Namespace, id.Pod.Name, run.Name)
	}
	return nil
}

// symmetricDifference is what is in exactly one of a and b.
func symmetricDifference(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	for _, s := range b {
		if !slices.Contains(a, s) {
			out = append(out, s)
		}
	}
	return out
}

func forbidden(a admission.Attributes, format string, args ...any) error {
	return admission.NewForbidden(a, fmt.Errorf(format, args...))
}
