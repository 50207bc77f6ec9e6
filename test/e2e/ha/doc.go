// Package ha holds end-to-end tests of kruntimes-apiserver run as two
// replicas on etcd3 storage behind the local cluster's Service front: what
// losing one replica costs clients and the controllers. It starts a
// cluster of its own; run with go test ./test/e2e/ha.
package ha
