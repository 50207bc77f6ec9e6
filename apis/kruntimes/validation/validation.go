package validation

import (
	"encoding/pem"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/toolschema"
)

// Bounds of a Run, shared with the components that produce the values.
const (
	MaxInlineSourceBytes = 256 << 10
	MaxInlinePathBytes   = 1024
	MaxEnvVars           = 256
	MaxEnvValueBytes     = 32 << 10
	MaxArgs              = 256
	MaxEntrypointBytes   = 4096 // PATH_MAX
	MaxArgBytes          = 32 << 10
	MaxArgsTotalBytes    = 256 << 10
	// MaxTimeout is the longest spec.timeout, a week: as Cloud Run jobs
	// allow, and far above what a task or a function's lease should need.
	// Unset means no timeout.
	MaxTimeout = 7 * 24 * time.Hour
	// MaxBackoff bounds retryPolicy.backoff.initial and .max: a retry an
	// hour away is already a scheduled job's business.
	MaxBackoff = time.Hour
	// MaxTTLSecondsAfterFinished is a year; unset keeps a Run forever.
	MaxTTLSecondsAfterFinished = 365 * 24 * 60 * 60
	// MaxIdleTimeoutSeconds is a week, as MaxTimeout; unset never idles out.
	MaxIdleTimeoutSeconds = 7 * 24 * 60 * 60
	MaxHandlerBytes       = 1024
	MinAttempts           = 1
	MaxAttempts           = 100
	MaxRetryableReasons   = 32
	MaxConditions         = 16
	MaxMessageBytes       = 4 << 10
	MaxOutputs            = 64
	MaxOutputKeyBytes     = 128
	MaxOutputValueBytes   = 8 << 10
	MaxOutputsTotalBytes  = 64 << 10
	MaxEndpointURLBytes   = 2048
	MaxEndpointCABytes    = 16 << 10
	MaxRunsPerPod         = 1024
	RuntimeContainerName  = "runtime"
	maxRuntimedImageBytes = 512
)

// ValidateRun validates a Run on create.
func ValidateRun(run *kruntimes.Run) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMeta(&run.ObjectMeta, true, apimachineryvalidation.NameIsDNSLabel, field.NewPath("metadata"))
	allErrs = append(allErrs, validateRunSpec(&run.Spec, nil, field.NewPath("spec"))...)
	return allErrs
}

// validateRunSpec validates spec; on an update old is the stored spec, and
// upper bounds added after a Run was stored apply only to fields the update
// changes (ratcheting, as Kubernetes does), so that such a Run can still be
// cancelled or have its TTL set.
func validateRunSpec(spec, old *kruntimes.RunSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if spec.Runtime == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("runtime"), "name the Runtime in this namespace that runs it"))
	} else {
		for _, msg := range validation.IsDNS1123Label(spec.Runtime) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("runtime"), spec.Runtime, msg))
		}
	}
	allErrs = append(allErrs, validateSource(&spec.Source, fldPath.Child("source"))...)
	allErrs = append(allErrs, validateMode(spec, fldPath.Child("mode"))...)
	allErrs = append(allErrs, validateEnv(spec.Env, fldPath.Child("env"))...)
	if spec.Timeout != nil && spec.Timeout.Duration <= 0 {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("timeout"), spec.Timeout.Duration.String(), "must be positive"))
	}
	if spec.RetryPolicy != nil {
		allErrs = append(allErrs, validateRetryPolicy(spec.RetryPolicy, fldPath.Child("retryPolicy"))...)
	}
	if spec.TTLSecondsAfterFinished != nil {
		allErrs = append(allErrs, apimachineryvalidation.ValidateNonnegativeField(int64(*spec.TTLSecondsAfterFinished), fldPath.Child("ttlSecondsAfterFinished"))...)
	}
	return append(allErrs, validateUpperBounds(spec, old, fldPath)...)
}

// validateUpperBounds checks the size and duration limits of a Run's spec,
// skipping a field that old (the stored spec on an update) has unchanged.
func validateUpperBounds(spec, old *kruntimes.RunSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	unchanged := func(get func(*kruntimes.RunSpec) any) bool {
		return old != nil && apiequality.Semantic.DeepEqual(get(spec), get(old))
	}
	if t := spec.Mode.Task; t != nil && !unchanged(func(s *kruntimes.RunSpec) any { return s.Mode.Task }) {
		taskPath := fldPath.Child("mode", "task")
		switch {
		case len(t.Entrypoint) > MaxEntrypointBytes:
			allErrs = append(allErrs, field.TooLong(taskPath.Child("entrypoint"), "", MaxEntrypointBytes))
		case strings.ContainsRune(t.Entrypoint, 0):
			allErrs = append(allErrs, field.Invalid(taskPath.Child("entrypoint"), t.Entrypoint, "must not contain NUL"))
		}
		total := 0
		for i, a := range t.Args {
			total += len(a)
			switch {
			case len(a) > MaxArgBytes:
				allErrs = append(allErrs, field.TooLong(taskPath.Child("args").Index(i), "", MaxArgBytes))
			case strings.ContainsRune(a, 0):
				allErrs = append(allErrs, field.Invalid(taskPath.Child("args").Index(i), a, "must not contain NUL"))
			}
		}
		if total > MaxArgsTotalBytes {
			allErrs = append(allErrs, field.TooLong(taskPath.Child("args"), "", MaxArgsTotalBytes))
		}
	}
	if t := spec.Timeout; t != nil && t.Duration > MaxTimeout && !unchanged(func(s *kruntimes.RunSpec) any { return s.Timeout }) {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("timeout"), t.Duration.String(),
			fmt.Sprintf("must be at most %s (7 days); leave it unset for no timeout", MaxTimeout)))
	}
	if p := spec.RetryPolicy; p != nil && p.Backoff != nil && !unchanged(func(s *kruntimes.RunSpec) any { return s.RetryPolicy }) {
		bPath := fldPath.Child("retryPolicy", "backoff")
		for _, b := range []struct {
			name string
			d    *metav1.Duration
		}{{"initial", p.Backoff.Initial}, {"max", p.Backoff.Max}} {
			if b.d != nil && b.d.Duration > MaxBackoff {
				allErrs = append(allErrs, field.Invalid(bPath.Child(b.name), b.d.Duration.String(), fmt.Sprintf("must be at most %s", MaxBackoff)))
			}
		}
	}
	if ttl := spec.TTLSecondsAfterFinished; ttl != nil && *ttl > MaxTTLSecondsAfterFinished && !unchanged(func(s *kruntimes.RunSpec) any { return s.TTLSecondsAfterFinished }) {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("ttlSecondsAfterFinished"), *ttl,
			fmt.Sprintf("must be at most %d (365 days); leave it unset to keep the Run", MaxTTLSecondsAfterFinished)))
	}
	if f := spec.Mode.Function; f != nil && f.IdleTimeoutSeconds != nil && *f.IdleTimeoutSeconds > MaxIdleTimeoutSeconds &&
		!unchanged(func(s *kruntimes.RunSpec) any { return s.Mode.Function }) {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("mode", "function", "idleTimeoutSeconds"), *f.IdleTimeoutSeconds,
			fmt.Sprintf("must be at most %d (7 days); leave it unset to never idle out", MaxIdleTimeoutSeconds)))
	}
	if f := spec.Mode.Function; f != nil && !unchanged(func(s *kruntimes.RunSpec) any { return s.Mode.Function }) {
		allErrs = append(allErrs, validateToolFields(f, fldPath.Child("mode", "function"))...)
	}
	return allErrs
}

// validateToolFields checks what a function declares for its callers: a
// bounded description and input and output schemas in the CRD subset of
// OpenAPI v3, with errors at their paths inside the schema.
func validateToolFields(f *kruntimes.FunctionMode, fnPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if len(f.Description) > toolschema.MaxDescriptionBytes {
		allErrs = append(allErrs, field.TooLong(fnPath.Child("description"), "", toolschema.MaxDescriptionBytes))
	}
	if f.Schema == nil {
		return allErrs
	}
	schemaPath := fnPath.Child("schema")
	if f.Schema.Input == nil && f.Schema.Output == nil {
		allErrs = append(allErrs, field.Required(schemaPath, "set input, output or both; leave schema unset to declare none"))
	}
	if f.Schema.Input != nil {
		allErrs = append(allErrs, toolschema.Validate(f.Schema.Input.Raw, schemaPath.Child("input"))...)
	}
	if f.Schema.Output != nil {
		allErrs = append(allErrs, toolschema.Validate(f.Schema.Output.Raw, schemaPath.Child("output"))...)
	}
	return allErrs
}

func validateSource(src *kruntimes.RunSource, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if len(src.Inline) > MaxInlineSourceBytes {
		allErrs = append(allErrs, field.TooLong(fldPath.Child("inline"), "", MaxInlineSourceBytes))
	}
	if p := src.InlinePath; p != "" {
		pathField := fldPath.Child("inlinePath")
		switch {
		case len(p) > MaxInlinePathBytes:
			allErrs = append(allErrs, field.TooLong(pathField, "", MaxInlinePathBytes))
		case path.IsAbs(p):
			allErrs = append(allErrs, field.Invalid(pathField, p, "must be relative to the Run's workspace"))
		case path.Clean(p) != p || p == "." || p == ".." || strings.HasPrefix(p, "../"):
			allErrs = append(allErrs, field.Invalid(pathField, p, "must be a clean relative path inside the workspace (no '..', '.', '//' or trailing '/')"))
		case strings.ContainsRune(p, 0):
			allErrs = append(allErrs, field.Invalid(pathField, p, "must not contain NUL"))
		}
		if src.Inline == "" {
			allErrs = append(allErrs, field.Required(fldPath.Child("inline"), "inlinePath names where inline source is written; set inline too"))
		}
	}
	return allErrs
}

func validateMode(spec *kruntimes.RunSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	mode := spec.Mode
	switch {
	case mode.Task != nil && mode.Function != nil:
		return append(allErrs, field.Forbidden(fldPath, "set exactly one of task and function, not both"))
	case mode.Task == nil && mode.Function == nil:
		return append(allErrs, field.Required(fldPath, "set exactly one of task and function"))
	case mode.Task != nil:
		taskPath := fldPath.Child("task")
		if mode.Task.Entrypoint == "" && spec.Source.Inline == "" {
			allErrs = append(allErrs, field.Required(taskPath.Child("entrypoint"), "a task needs an entrypoint or inline source to run"))
		}
		if len(mode.Task.Args) > MaxArgs {
			allErrs = append(allErrs, field.TooMany(taskPath.Child("args"), len(mode.Task.Args), MaxArgs))
		}
	case mode.Function != nil:
		fnPath := fldPath.Child("function")
		switch h := mode.Function.Handler; {
		case h == "":
			allErrs = append(allErrs, field.Required(fnPath.Child("handler"), `name the handler: "module.function" for Python, a script path for bash`))
		case len(h) > MaxHandlerBytes:
			allErrs = append(allErrs, field.TooLong(fnPath.Child("handler"), "", MaxHandlerBytes))
		}
		if s := mode.Function.IdleTimeoutSeconds; s != nil && *s <= 0 {
			allErrs = append(allErrs, field.Invalid(fnPath.Child("idleTimeoutSeconds"), *s, "must be positive; leave unset to never idle out"))
		}
		if spec.Source.Inline != "" && spec.Source.InlinePath == "" {
			allErrs = append(allErrs, field.Required(field.NewPath("spec", "source", "inlinePath"), "a function with inline source needs inlinePath so its handler can name the file"))
		}
	}
	return allErrs
}

func validateEnv(env []kruntimes.EnvVar, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if len(env) > MaxEnvVars {
		allErrs = append(allErrs, field.TooMany(fldPath, len(env), MaxEnvVars))
	}
	seen := make(map[string]bool, len(env))
	for i, e := range env {
		idx := fldPath.Index(i)
		if e.Name == "" {
			allErrs = append(allErrs, field.Required(idx.Child("name"), ""))
		} else {
			for _, msg := range validation.IsEnvVarName(e.Name) {
				allErrs = append(allErrs, field.Invalid(idx.Child("name"), e.Name, msg))
			}
		}
		if seen[e.Name] {
			allErrs = append(allErrs, field.Duplicate(idx.Child("name"), e.Name))
		}
		seen[e.Name] = true
		if len(e.Value) > MaxEnvValueBytes {
			allErrs = append(allErrs, field.TooLong(idx.Child("value"), "", MaxEnvValueBytes))
		}
		if e.ValueFrom != nil {
			if e.Value != "" {
				allErrs = append(allErrs, field.Invalid(idx.Child("valueFrom"), "", "may not be set together with value: set exactly one of value and valueFrom"))
			}
			allErrs = append(allErrs, validateEnvVarSource(e.ValueFrom, idx.Child("valueFrom"))...)
		}
	}
	return allErrs
}

// validateEnvVarSource accepts only secretKeyRef: a value read from the
// Pod (fieldRef, resourceFieldRef) would name a Pod the Run does not own,
// and configMapKeyRef has no reader in runtimed yet.
func validateEnvVarSource(src *kruntimes.EnvVarSource, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	ref := src.SecretKeyRef
	if ref == nil {
		return append(allErrs, field.Required(fldPath.Child("secretKeyRef"), "secretKeyRef is the only supported source"))
	}
	refPath := fldPath.Child("secretKeyRef")
	if ref.Name == "" {
		allErrs = append(allErrs, field.Required(refPath.Child("name"), "the name of a Secret in the Run's namespace"))
	} else {
		for _, msg := range validation.IsDNS1123Subdomain(ref.Name) {
			allErrs = append(allErrs, field.Invalid(refPath.Child("name"), ref.Name, msg))
		}
	}
	if ref.Key == "" {
		allErrs = append(allErrs, field.Required(refPath.Child("key"), "a key of the Secret's data"))
	} else {
		for _, msg := range validation.IsConfigMapKey(ref.Key) {
			allErrs = append(allErrs, field.Invalid(refPath.Child("key"), ref.Key, msg))
		}
	}
	return allErrs
}

func validateRetryPolicy(p *kruntimes.RetryPolicy, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if p.MaxAttempts < MinAttempts || p.MaxAttempts > MaxAttempts {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("maxAttempts"), p.MaxAttempts, fmt.Sprintf("must be between %d and %d", MinAttempts, MaxAttempts)))
	}
	if b := p.Backoff; b != nil {
		bPath := fldPath.Child("backoff")
		if b.Initial != nil && b.Initial.Duration < 0 {
			allErrs = append(allErrs, field.Invalid(bPath.Child("initial"), b.Initial.Duration.String(), "must not be negative"))
		}
		if b.Max != nil && b.Max.Duration < 0 {
			allErrs = append(allErrs, field.Invalid(bPath.Child("max"), b.Max.Duration.String(), "must not be negative"))
		}
		if b.Initial != nil && b.Max != nil && b.Max.Duration < b.Initial.Duration {
			allErrs = append(allErrs, field.Invalid(bPath.Child("max"), b.Max.Duration.String(), "must not be below initial"))
		}
		if b.Factor != "" {
			// Test that f is inside the range, not outside it: NaN compares
			// false with every number and would pass "f < 1 || f > 10".
			if f, err := strconv.ParseFloat(b.Factor, 64); err != nil || !(f >= 1 && f <= 10) {
				allErrs = append(allErrs, field.Invalid(bPath.Child("factor"), b.Factor, `must be a decimal number from 1 to 10, such as "2" or "1.5"`))
			}
		}
	}
	if len(p.RetryableReasons) > MaxRetryableReasons {
		allErrs = append(allErrs, field.TooMany(fldPath.Child("retryableReasons"), len(p.RetryableReasons), MaxRetryableReasons))
	}
	for i, r := range p.RetryableReasons {
		for _, msg := range metav1validation.IsValidConditionReason(r) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("retryableReasons").Index(i), r, msg))
		}
	}
	return allErrs
}

// ValidateRunUpdate validates a spec or metadata update: execution inputs are
// immutable, cancelRequested only goes false → true.
func ValidateRunUpdate(run, old *kruntimes.Run) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&run.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, validateRunSpec(&run.Spec, &old.Spec, field.NewPath("spec"))...)
	specPath := field.NewPath("spec")
	immutable := []struct {
		name     string
		new, old any
	}{
		{"runtime", run.Spec.Runtime, old.Spec.Runtime},
		{"source", run.Spec.Source, old.Spec.Source},
		{"mode", run.Spec.Mode, old.Spec.Mode},
		{"env", run.Spec.Env, old.Spec.Env},
		{"timeout", run.Spec.Timeout, old.Spec.Timeout},
		{"retryPolicy", run.Spec.RetryPolicy, old.Spec.RetryPolicy},
	}
	for _, f := range immutable {
		if !apiequality.Semantic.DeepEqual(f.new, f.old) {
			allErrs = append(allErrs, field.Forbidden(specPath.Child(f.name), "is immutable after create; delete and recreate the Run to change it"))
		}
	}
	if old.Spec.CancelRequested && !run.Spec.CancelRequested {
		allErrs = append(allErrs, field.Forbidden(specPath.Child("cancelRequested"), "may only change from false to true; a cancelled Run cannot be resumed"))
	}
	return allErrs
}

// ValidateRunStatusUpdate validates a status update against the phase table
// of lifecycle and the bounds of every status field.
func ValidateRunStatusUpdate(run, old *kruntimes.Run) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&run.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	statusPath := field.NewPath("status")
	status, oldStatus := &run.Status, &old.Status
	mode := ModeOf(&run.Spec)

	if err := lifecycle.CheckTransition(mode, oldStatus.Phase, status.Phase); err != nil {
		allErrs = append(allErrs, field.Invalid(statusPath.Child("phase"), status.Phase, err.Error()))
	}
	if lifecycle.IsTerminal(oldStatus.Phase) {
		// The record of how a Run ended is what its user, a workflow and
		// an audit read; nothing may rewrite it, whoever may write status.
		return append(allErrs, validateFrozenStatus(status, oldStatus, statusPath)...)
	}
	attemptPath := statusPath.Child("attempt")
	// A relocation (Ready=False reason Relocating) gives a function back
	// for a planned disruption of its Pod: the same attempt goes on.
	retry := lifecycle.IsRetry(oldStatus.Phase, status.Phase) &&
		!lifecycle.IsRelocation(mode, oldStatus.Phase, status.Phase, readyReason(status))
	switch {
	case status.Attempt < oldStatus.Attempt:
		allErrs = append(allErrs, field.Invalid(attemptPath, status.Attempt, fmt.Sprintf("must not decrease (was %d)", oldStatus.Attempt)))
	case retry && status.Attempt != oldStatus.Attempt+1:
		allErrs = append(allErrs, field.Invalid(attemptPath, status.Attempt,
			fmt.Sprintf("%s → %s is a retry and must set attempt to %d (or, to relocate a function, keep it and set condition Ready reason %s)",
				oldStatus.Phase, status.Phase, oldStatus.Attempt+1, lifecycle.ReasonRelocating)))
	case !retry && status.Attempt != oldStatus.Attempt:
		allErrs = append(allErrs, field.Invalid(attemptPath, status.Attempt,
			fmt.Sprintf("changes only by one, on a retry from Running or Ready back to Pending (was %d)", oldStatus.Attempt)))
	}
	allErrs = append(allErrs, validateAssignment(status, oldStatus, statusPath)...)
	allErrs = append(allErrs, validateStatusBounds(status, mode, statusPath)...)
	return allErrs
}

// readyReason is the reason of the Ready condition in status, or "".
func readyReason(status *kruntimes.RunStatus) string {
	for _, c := range status.Conditions {
		if c.Type == lifecycle.ConditionReady {
			return c.Reason
		}
	}
	return ""
}

// validateFrozenStatus forbids any change to the status of a Run that
// reached a terminal phase, naming each changed field.
func validateFrozenStatus(status, oldStatus *kruntimes.RunStatus, statusPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	fields := []struct {
		name     string
		new, old any
	}{
		{"conditions", status.Conditions, oldStatus.Conditions},
		{"message", status.Message, oldStatus.Message},
		{"attempt", status.Attempt, oldStatus.Attempt},
		{"assignedPod", status.AssignedPod, oldStatus.AssignedPod},
		{"assignedPodUID", status.AssignedPodUID, oldStatus.AssignedPodUID},
		{"scheduledTime", status.ScheduledTime, oldStatus.ScheduledTime},
		{"startTime", status.StartTime, oldStatus.StartTime},
		{"readyTime", status.ReadyTime, oldStatus.ReadyTime},
		{"completionTime", status.CompletionTime, oldStatus.CompletionTime},
		{"outputs", status.Outputs, oldStatus.Outputs},
		{"endpoint", status.Endpoint, oldStatus.Endpoint},
		{"exitCode", status.ExitCode, oldStatus.ExitCode},
	}
	for _, f := range fields {
		if !apiequality.Semantic.DeepEqual(f.new, f.old) {
			allErrs = append(allErrs, field.Forbidden(statusPath.Child(f.name),
				fmt.Sprintf("the Run is %s and its status is final; create a new Run to run again", oldStatus.Phase)))
		}
	}
	if len(allErrs) == 0 && status.Phase == oldStatus.Phase && !apiequality.Semantic.DeepEqual(status, oldStatus) {
		// A status field added without a line above is frozen as well.
		allErrs = append(allErrs, field.Forbidden(statusPath, fmt.Sprintf("the Run is %s and its status is final", oldStatus.Phase)))
	}
	return allErrs
}

func validateAssignment(status, oldStatus *kruntimes.RunStatus, statusPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	podPath, uidPath := statusPath.Child("assignedPod"), statusPath.Child("assignedPodUID")
	if (status.AssignedPod == "") != (status.AssignedPodUID == "") {
		return append(allErrs, field.Invalid(uidPath, status.AssignedPodUID, "assignedPod and assignedPodUID are set and cleared together"))
	}
	if status.AssignedPod != "" {
		for _, msg := range validation.IsDNS1123Subdomain(status.AssignedPod) {
			allErrs = append(allErrs, field.Invalid(podPath, status.AssignedPod, msg))
		}
	}
	switch {
	case lifecycle.IsAssigned(status.Phase) && status.AssignedPod == "":
		allErrs = append(allErrs, field.Required(podPath, fmt.Sprintf("a %s Run is assigned to a Pod", status.Phase)))
	case status.Phase == lifecycle.Pending && status.AssignedPod != "":
		allErrs = append(allErrs, field.Forbidden(podPath, "a Pending Run has no assignment; clear assignedPod and assignedPodUID"))
	case lifecycle.IsAssigned(status.Phase) && lifecycle.IsAssigned(oldStatus.Phase) &&
		(status.AssignedPod != oldStatus.AssignedPod || status.AssignedPodUID != oldStatus.AssignedPodUID):
		allErrs = append(allErrs, field.Forbidden(podPath, "an active Run keeps its Pod; move it back to Pending to reassign"))
	}
	return allErrs
}

func validateStatusBounds(status *kruntimes.RunStatus, mode lifecycle.Mode, statusPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if len(status.Conditions) > MaxConditions {
		allErrs = append(allErrs, field.TooMany(statusPath.Child("conditions"), len(status.Conditions), MaxConditions))
	} else {
		allErrs = append(allErrs, metav1validation.ValidateConditions(status.Conditions, statusPath.Child("conditions"))...)
	}
	if len(status.Message) > MaxMessageBytes {
		allErrs = append(allErrs, field.TooLong(statusPath.Child("message"), "", MaxMessageBytes))
	}
	allErrs = append(allErrs, ValidateOutputs(status.Outputs, statusPath.Child("outputs"))...)
	if ep := status.Endpoint; ep != nil {
		epPath := statusPath.Child("endpoint")
		if mode != lifecycle.ModeFunction {
			allErrs = append(allErrs, field.Forbidden(epPath, "only function Runs have an endpoint"))
		}
		if ep.Protocol != kruntimes.RunEndpointProtocolHTTPS {
			allErrs = append(allErrs, field.NotSupported(epPath.Child("protocol"), ep.Protocol, []kruntimes.RunEndpointProtocol{kruntimes.RunEndpointProtocolHTTPS}))
		}
		switch {
		case ep.URL == "":
			allErrs = append(allErrs, field.Required(epPath.Child("url"), ""))
		case len(ep.URL) > MaxEndpointURLBytes:
			allErrs = append(allErrs, field.TooLong(epPath.Child("url"), "", MaxEndpointURLBytes))
		case !strings.HasPrefix(ep.URL, "https://"):
			allErrs = append(allErrs, field.Invalid(epPath.Child("url"), ep.URL, "must be an https:// URL"))
		}
		if len(ep.CABundle) > MaxEndpointCABytes {
			allErrs = append(allErrs, field.TooLong(epPath.Child("caBundle"), "", MaxEndpointCABytes))
		} else if len(ep.CABundle) > 0 && !isPEMCertificates(ep.CABundle) {
			allErrs = append(allErrs, field.Invalid(epPath.Child("caBundle"), "<bytes>", "must be one or more PEM CERTIFICATE blocks"))
		}
	}
	if status.ExitCode != nil && mode != lifecycle.ModeTask {
		allErrs = append(allErrs, field.Forbidden(statusPath.Child("exitCode"), "only task Runs have an exit code"))
	}
	if status.Attempt < 0 {
		allErrs = append(allErrs, field.Invalid(statusPath.Child("attempt"), status.Attempt, "must not be negative"))
	}
	return allErrs
}

// ValidateOutputs checks the bounds of Run outputs: at most 64 keys of at
// most 128 bytes, values of at most 8 KiB, 64 KiB in all.
func ValidateOutputs(outputs map[string]string, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if len(outputs) > MaxOutputs {
		return append(allErrs, field.TooMany(fldPath, len(outputs), MaxOutputs))
	}
	total := 0
	for k, v := range outputs {
		total += len(k) + len(v)
		switch {
		case k == "":
			allErrs = append(allErrs, field.Invalid(fldPath, k, "output keys must not be empty"))
		case len(k) > MaxOutputKeyBytes:
			allErrs = append(allErrs, field.TooLong(fldPath.Key(k[:32]+"…"), "", MaxOutputKeyBytes))
		}
		if len(v) > MaxOutputValueBytes {
			allErrs = append(allErrs, field.TooLong(fldPath.Key(k), "", MaxOutputValueBytes))
		}
	}
	if total > MaxOutputsTotalBytes {
		allErrs = append(allErrs, field.TooLong(fldPath, "", MaxOutputsTotalBytes))
	}
	return allErrs
}

func isPEMCertificates(data []byte) bool {
	found := false
	for rest := data; len(strings.TrimSpace(string(rest))) > 0; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil || block.Type != "CERTIFICATE" {
			return false
		}
		found = true
	}
	return found
}

// ModeOf classifies a Run's spec as a task or a function.
func ModeOf(spec *kruntimes.RunSpec) lifecycle.Mode {
	if spec.Mode.Function != nil {
		return lifecycle.ModeFunction
	}
	return lifecycle.ModeTask
}

// ValidateRuntime validates a Runtime on create.
func ValidateRuntime(rt *kruntimes.Runtime) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMeta(&rt.ObjectMeta, true, apimachineryvalidation.NameIsDNSLabel, field.NewPath("metadata"))
	return append(allErrs, validateRuntimeSpec(&rt.Spec, field.NewPath("spec"))...)
}

// ValidateRuntimeUpdate validates a spec or metadata update of a Runtime;
// every spec field may change, as for a Deployment.
func ValidateRuntimeUpdate(rt, old *kruntimes.Runtime) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&rt.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	return append(allErrs, validateRuntimeSpec(&rt.Spec, field.NewPath("spec"))...)
}

// ValidateRuntimeStatusUpdate validates a Runtime status update.
func ValidateRuntimeStatusUpdate(rt, old *kruntimes.Runtime) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&rt.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	statusPath := field.NewPath("status")
	s := rt.Status
	allErrs = append(allErrs, apimachineryvalidation.ValidateNonnegativeField(s.ObservedGeneration, statusPath.Child("observedGeneration"))...)
	allErrs = append(allErrs, apimachineryvalidation.ValidateNonnegativeField(int64(s.Replicas), statusPath.Child("replicas"))...)
	allErrs = append(allErrs, apimachineryvalidation.ValidateNonnegativeField(int64(s.ReadyReplicas), statusPath.Child("readyReplicas"))...)
	if s.ReadyReplicas > s.Replicas {
		allErrs = append(allErrs, field.Invalid(statusPath.Child("readyReplicas"), s.ReadyReplicas, "must not exceed replicas"))
	}
	if len(s.Conditions) > MaxConditions {
		allErrs = append(allErrs, field.TooMany(statusPath.Child("conditions"), len(s.Conditions), MaxConditions))
	} else {
		allErrs = append(allErrs, metav1validation.ValidateConditions(s.Conditions, statusPath.Child("conditions"))...)
	}
	return allErrs
}

func validateRuntimeSpec(spec *kruntimes.RuntimeSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if spec.Replicas != nil {
		allErrs = append(allErrs, apimachineryvalidation.ValidateNonnegativeField(int64(*spec.Replicas), fldPath.Child("replicas"))...)
	}
	if r := spec.Capacity.Runs; r < 1 || r > MaxRunsPerPod {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("capacity", "runs"), r, fmt.Sprintf("must be between 1 and %d", MaxRunsPerPod)))
	}
	if spec.RuntimedImage == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("runtimedImage"), ""))
	} else if len(spec.RuntimedImage) > maxRuntimedImageBytes {
		allErrs = append(allErrs, field.TooLong(fldPath.Child("runtimedImage"), "", maxRuntimedImageBytes))
	}
	containersPath := fldPath.Child("template", "spec", "containers")
	found := false
	for i, c := range spec.Template.Spec.Containers {
		if c.Name == RuntimeContainerName {
			found = true
			if c.Image == "" {
				allErrs = append(allErrs, field.Required(containersPath.Index(i).Child("image"), "the runtime container runs the Runtime Server image"))
			}
		}
	}
	if !found {
		allErrs = append(allErrs, field.Required(containersPath, fmt.Sprintf("a container named %q runs the Runtime Server", RuntimeContainerName)))
	}
	for k, v := range spec.Template.Labels {
		if k == lifecycle.LabelRuntime {
			allErrs = append(allErrs, field.Forbidden(fldPath.Child("template", "metadata", "labels").Key(k), fmt.Sprintf("%s is set by kruntimes (was %q)", lifecycle.LabelRuntime, v)))
		}
	}
	return allErrs
}

// BoundMessage cuts s to MaxMessageBytes at a rune boundary, keeping its
// start, so a message written to status.message or a condition always
// passes validation.
func BoundMessage(s string) string {
	if len(s) <= MaxMessageBytes {
		return s
	}
	const ellipsis = "…"
	cut := MaxMessageBytes - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}
