//go:build tools

// Package tools records the JobSet manager this module builds (package main at the module root).
package tools

import _ "sigs.k8s.io/jobset"
