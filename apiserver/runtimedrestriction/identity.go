package runtimedrestriction

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"

	"kruntimes.io/kruntimes/apis/runtimepod"
)

// Identity is a runtimed caller: the ServiceAccount of a Runtime, with the
// Pod its token is bound to.
type Identity struct {
	Namespace string
	Runtime   string
	Pod       runtimepod.Pod
}

// identityOf reports whether u is the ServiceAccount of a Runtime and, if
// so, which Pod its token is bound to. A Runtime's ServiceAccount without a
// Pod binding is still a runtimed identity, with an error: it is refused
// rather than given the namespace-wide Role.
func identityOf(u user.Info) (Identity, bool, error) {
	if u == nil {
		return Identity{}, false, nil
	}
	namespace, name, err := serviceaccount.SplitUsername(u.GetName())
	if err != nil {
		return Identity{}, false, nil
	}
	runtime, ok := runtimepod.RuntimeOfServiceAccount(name)
	if !ok {
		return Identity{}, false, nil
	}
	id := Identity{Namespace: namespace, Runtime: runtime}
	extra := u.GetExtra()
	podName, podUID := extra[serviceaccount.PodNameKey], extra[serviceaccount.PodUIDKey]
	if len(podName) != 1 || len(podUID) != 1 || podName[0] == "" || podUID[0] == "" {
		return id, true, fmt.Errorf("ServiceAccount %s/%s is a Runtime's and acts only for the Pod its token is bound to, "+
			"but the request names no Pod (user extras %s and %s): use the Pod's projected token, "+
			"and check that kube-apiserver forwards user extras to aggregated servers (--requestheader-extra-headers-prefix)",
			namespace, name, serviceaccount.PodNameKey, serviceaccount.PodUIDKey)
	}
	id.Pod = runtimepod.Pod{Name: podName[0], Namespace: namespace, UID: types.UID(podUID[0])}
	return id, true, nil
}
