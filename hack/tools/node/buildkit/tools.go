//go:build tools

// Package tools records the commands this module builds (the image builder behind hack/images.sh), so
// `go mod tidy` keeps their dependencies.
package tools

import (
	_ "github.com/moby/buildkit/cmd/buildctl"
	_ "github.com/moby/buildkit/cmd/buildkitd"
)
