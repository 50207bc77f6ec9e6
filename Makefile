# kruntimes — the two commands users need are `make run` and `make test`.
SHELL := /usr/bin/env bash
GO ?= go
BIN := $(CURDIR)/bin
# Tests start real servers; CI machines have 2 cores.
GOTEST_FLAGS ?= -race -timeout 30m

.PHONY: all build test unit verify generate verify-codegen proto verify-proto fmt vet run clean

all: build

## build: compile kruntimes-apiserver and kruntimes-runtime into bin/.
build:
	$(GO) build -o $(BIN)/ ./cmd/...

## test: verify generated code and formatting, then run every test suite.
test: verify unit

## unit: unit, integration and storage conformance tests (real servers on loopback).
unit:
	$(GO) test $(GOTEST_FLAGS) ./...

## verify: gofmt, go vet, and generated code (API codegen, protobuf) up to date.
verify: fmt vet verify-codegen verify-proto

fmt:
	@out="$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go'))"; \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

## generate: regenerate API and protobuf code.
generate:
	hack/update-codegen.sh
	hack/update-proto.sh

verify-codegen:
	hack/verify-codegen.sh

proto:
	hack/update-proto.sh

verify-proto:
	hack/verify-proto.sh

## run: start kruntimes-apiserver standalone on 127.0.0.1:8443 and write .local/kubeconfig.
run: build
	@mkdir -p .local
	@echo "kruntimes-apiserver: https://127.0.0.1:8443 — in another shell: export KUBECONFIG=$(CURDIR)/.local/kubeconfig"
	$(BIN)/kruntimes-apiserver --standalone --standalone-kubeconfig=.local/kubeconfig \
		--storage-path=.local/data --cert-dir=.local/certs --bind-address=127.0.0.1 --secure-port=8443

clean:
	rm -rf $(BIN) .local
