//go:build tools

// Package tools records the command this module builds (runc), so `go mod tidy` keeps its dependencies.
package tools

import _ "github.com/opencontainers/runc"
