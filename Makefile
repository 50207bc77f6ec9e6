# kruntimes — the two commands users need are `make run` and `make test`.
SHELL := /usr/bin/env bash
GO ?= go
BIN := $(CURDIR)/bin
# Build tags of every kruntimes binary and test (test/repobin builds the e2e
# cluster's binaries with the same): fieldsv1string keeps managedFields as
# interned strings (k8s.io/apimachinery), so the watch cache holds one copy
# of the field sets identical Runs share instead of one per Run.
GO_TAGS := fieldsv1string
# Tests start real servers; CI machines have 2 cores. -count=1: a test result
# cached from another checkout proves nothing about this one. Race-built
# tests also race-build the binaries the e2e cluster runs (test/repobin).
# The e2e package alone takes 20–25 min on 2 cores beside the other suites.
GOTEST_FLAGS ?= -race -count=1 -timeout 45m
# go test -json is read by hack/testreport: readable output as tests run, a
# summary, and a failure for any skip not listed in hack/allowed-skips.txt.
TESTREPORT = $(BIN)/testreport --allowed-skips hack/allowed-skips.txt
# Every package with a benchmark, the etcdcompare ones included. Benchmarks
# run once to prove they still build and run, not to measure, and without
# -race: race-built, their storage fixtures take five times as long.
# PKG and RUN narrow `make unit` and `make e2e`: PKG the packages (go test's
# patterns, e.g. ./registry/run or ./cmd/krt/...), RUN the tests (go test
# -run's regexp, e.g. TestInvoke or 'TestKrtMCP|TestFunctionAsTool').
PKG ?=
RUN ?=
GOTEST_RUN = $(if $(RUN),-run '$(RUN)')
BENCH_PKGS = $(sort $(patsubst %/,./%,$(dir $(shell git grep --untracked -l '^func Benchmark' -- '*_test.go'))))
BENCH_FLAGS ?= -count=1 -timeout 15m
# The images (hack/images): VERSION tags and stamps a release (empty: a Go
# pseudo-version of HEAD); REGISTRY, when set, is where they are pushed;
# LATEST=false leaves the Go images' latest tag alone.
VERSION ?=
REGISTRY ?=
LATEST ?= true
IMAGES_FLAGS = $(if $(VERSION),--version=$(VERSION)) $(if $(REGISTRY),--push=$(REGISTRY)) --latest=$(LATEST)
# The Debian release the Python base of `make image-python` is made from;
# made once and kept under _output/ until `make clean`.
PYTHON_BASE_SUITE ?= bookworm
PYTHON_BASE := _output/images/bases/python-$(PYTHON_BASE_SUITE).tar

.PHONY: all help build test unit e2e python-deps ts-deps bench-once testreport images images-tool image-python verify generate verify-codegen proto verify-proto fmt vet kube-binaries node-binaries run run-standalone clean clean-kube helm chart-readme verify-chart-readme

all: build

## help: list the targets below and what each does.
help:
	@awk '/^## [a-z0-9-]+:/ { t = $$2; sub(/:$$/, "", t); sub(/^## [a-z0-9-]+: */, ""); printf "%-20s %s\n", t, $$0; next } \
		/^## / { sub(/^## /, ""); printf "%-20s %s\n", "", $$0 }' $(MAKEFILE_LIST)

## build: compile the kruntimes commands into bin/.
build:
	$(GO) build -tags $(GO_TAGS) -o $(BIN)/ ./cmd/...

## test: verify generated code and formatting, run every test suite
## (e2e included: it needs the Kubernetes binaries, built once and cached), then
## run every benchmark once. Fails on a test that skips without an entry in
## hack/allowed-skips.txt, and on a data race or crash in any cluster component.
## Builds the images first (make images), which hack/images' tests check.
## As root it also builds the real node (make node-binaries) and the Python
## Runtime image (make image-python), and runs the real-node suites
## (test/e2e/realnode, test/localcluster/realnode).
test: verify kube-binaries $(if $(filter 0,$(shell id -u)),node-binaries) helm python-deps ts-deps testreport images $(if $(filter 0,$(shell id -u)),image-python)
	set -o pipefail; KRUNTIMES_E2E_REQUIRE=1 $(GO) test -json $(GOTEST_FLAGS) -tags $(GO_TAGS) ./... 2>&1 | $(TESTREPORT)
	@$(MAKE) --no-print-directory bench-once

## unit: the tests that need no Kubernetes binaries: every package but
## the e2e suites (test/e2e, test/e2e/ha, test/e2e/chartmode). Skips are listed, not failed (TestDiskFull
## needs root). PKG=./registry/run runs one package's, RUN=TestInvoke one test.
unit: testreport
	set -o pipefail; $(GO) test -json $(GOTEST_FLAGS) -tags $(GO_TAGS) $(GOTEST_RUN) $(or $(PKG),$$($(GO) list ./... | grep -vxE 'kruntimes.io/kruntimes/test/e2e(/ha|/chartmode)?')) 2>&1 | $(TESTREPORT) --fail-on-skip=false

## e2e: only the e2e suites, each against a local cluster of its own.
## RUN=TestKrtMCP runs one test of test/e2e, PKG=./test/e2e/ha one suite.
e2e: kube-binaries python-deps ts-deps testreport
	set -o pipefail; KRUNTIMES_E2E_REQUIRE=1 $(GO) test -json $(GOTEST_FLAGS) -tags $(GO_TAGS) $(GOTEST_RUN) $(or $(PKG),$(if $(RUN),./test/e2e,./test/e2e/...)) 2>&1 | $(TESTREPORT)

## bench-once: compile every benchmark, the etcdcompare ones included, and run
## each once, so that none stops building or running unnoticed.
bench-once: testreport
	set -o pipefail; $(GO) test -json $(BENCH_FLAGS) -tags etcdcompare,$(GO_TAGS) -run '^$$' -bench . -benchtime 1x $(BENCH_PKGS) 2>&1 | $(TESTREPORT)

testreport:
	@$(GO) build -o $(BIN)/testreport ./hack/testreport

## images: build the container images kruntimes-apiserver, kruntimes-controllers,
## runtimed, kruntimes-runtime (with kruntimes-reaper) and krt without a
## container engine into _output/images/: an OCI layout (<image>/) and a
## `docker load` tarball (<image>.tar) each, listed in images.txt. The same
## commit gives the same digests. VERSION=v0.1.0 tags a release;
## REGISTRY=ghcr.io/you also pushes every image there.
images: images-tool
	$(BIN)/images $(IMAGES_FLAGS)

images-tool:
	@$(GO) build -o $(BIN)/images ./hack/images

## image-python: kruntimes-runtime on a Python base made from Debian packages
## (mmdebstrap: python3, bash, CA certificates), tagged <version>-python, then
## TestPythonImage runs a Python task, a Python function and a bash task in it
## as nonroot. Opt-in: making the base takes ~2.5 min and downloads Debian
## packages the first time.
image-python: images-tool testreport $(PYTHON_BASE)
	$(BIN)/images --images= --base=python=$(PYTHON_BASE) $(IMAGES_FLAGS)
	set -o pipefail; KRUNTIMES_IMAGE_PYTHON=$(CURDIR)/_output/images/kruntimes-runtime-python $(GO) test -json -count=1 -tags $(GO_TAGS) -run '^TestPythonImage$$' ./hack/images 2>&1 | $(TESTREPORT)

# The Debian base of image-python, from the machine's Debian mirror: Essential
# packages (bash, coreutils), python3 and ca-certificates, without
# documentation but its copyright files.
$(PYTHON_BASE):
	@command -v mmdebstrap >/dev/null || [ "$$(id -u)" != 0 ] || apt-get install -y --no-install-recommends mmdebstrap
	@command -v mmdebstrap >/dev/null || { echo "image-python needs mmdebstrap: apt-get install mmdebstrap"; exit 1; }
	mkdir -p $(dir $@)
	SOURCE_DATE_EPOCH=$$(git show -s --format=%ct HEAD) mmdebstrap --format=tar --variant=essential \
		--include=python3,ca-certificates --aptopt='Acquire::Languages "none"' \
		--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
		--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
		$(PYTHON_BASE_SUITE) $@.tmp </dev/null
	mv $@.tmp $@

## helm: helm (Helm 3) from the hack/tools/helm module into bin/, for the
## chart tests (test/chart; ~3 min of CPU the first time; cached).
helm:
	hack/build-helm.sh

## python-deps: Debian's python3-kubernetes, python3-pytest and python3-venv
## for the Python SDK's tests (TestPythonSDK runs them with /usr/bin/python3).
python-deps:
	hack/install-python-deps.sh

## ts-deps: the TypeScript SDK's packages from its lockfile (npm ci) and its
## build (tsc) for its tests (TestTypeScriptSDK runs them with node --test).
ts-deps:
	hack/install-ts-deps.sh

## kube-binaries: kube-apiserver, kube-controller-manager, kubectl and etcd
## from the Kubernetes v1.37.2 modules into bin/ (~15 min the first time; cached).
kube-binaries:
	hack/build-kube.sh

## verify: gofmt, go vet, and generated code (API codegen, protobuf, the
## chart README's values table) up to date.
verify: fmt vet verify-codegen verify-proto verify-chart-readme

fmt:
	@out="$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go'))"; \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet -tags $(GO_TAGS) ./...
	$(GO) vet -tags etcdcompare,$(GO_TAGS) ./registry/storage/embedded

## generate: regenerate API and protobuf code, and the chart README's values table.
generate: chart-readme
	hack/update-codegen.sh
	hack/update-proto.sh

## chart-readme: the values table of charts/kruntimes/README.md, from the
## comments of its values.yaml.
chart-readme:
	$(GO) run ./hack/chartreadme charts/kruntimes

verify-chart-readme:
	$(GO) run ./hack/chartreadme --verify charts/kruntimes

verify-codegen:
	hack/verify-codegen.sh

proto:
	hack/update-proto.sh

verify-proto:
	hack/verify-proto.sh

## run: start the local cluster (etcd, kube-apiserver, kube-controller-manager,
## a node agent, kruntimes-apiserver behind an APIService) in the foreground;
## writes .local/kubeconfig. CHART=1 installs kruntimes-apiserver with
## bin/helm from charts/kruntimes instead of running it as a host process.
## NODE=containerd (root) runs a real node instead of the node agent:
## kubelet, containerd + runc, kube-scheduler, kube-proxy, a CNI bridge; its
## Runtime Pods pull the images of make images and make image-python.
run: kube-binaries $(if $(CHART),helm) $(if $(filter containerd,$(NODE)),node-binaries images image-python)
	$(GO) build -o $(BIN)/localcluster ./test/localcluster/cmd/localcluster
	$(BIN)/localcluster $(if $(CHART),--kruntimes-apiserver=chart) $(if $(NODE),--node=$(NODE))

## node-binaries: what the real node runs (make run NODE=containerd):
## kubelet, kube-scheduler, kube-proxy (v1.37.2) and containerd 2.x into bin/,
## runc, iptables and the CNI plugins from Debian (cached).
node-binaries:
	hack/build-node.sh

## run-standalone: kruntimes-apiserver alone on 127.0.0.1:8443, no cluster;
## writes .local/standalone/kubeconfig.
run-standalone: build
	@mkdir -p .local/standalone
	@echo "kruntimes-apiserver: https://127.0.0.1:8443 — in another shell: export KUBECONFIG=$(CURDIR)/.local/standalone/kubeconfig"
	$(BIN)/kruntimes-apiserver --standalone --standalone-kubeconfig=.local/standalone/kubeconfig \
		--storage-path=.local/standalone/data --cert-dir=.local/standalone/certs --bind-address=127.0.0.1 --secure-port=8443

## clean: remove local state, the images and kruntimes binaries (keeps the
## Kubernetes binaries).
clean:
	rm -rf .local _output
	cd $(BIN) 2>/dev/null && rm -f kruntimes-apiserver kruntimes-controllers kruntimes-runtime kruntimes-reaper runtimed localcluster e2e-testserver testreport images || true

## clean-kube: also remove the cached Kubernetes binaries.
clean-kube: clean
	rm -rf $(BIN)
