//go:build tools

// Package tools records the Kubeflow Trainer manager this module builds (cmd/trainer-controller-manager).
package tools

import _ "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager"
