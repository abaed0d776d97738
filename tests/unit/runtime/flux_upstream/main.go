// Prints the ConfigMap data upstream Kubeflow Trainer v2.3.0's Flux plugin builds for the cases of
// tests/unit/runtime/test_flux_upstream.py, as JSON: that test's fixture (scripts.json). Run it in a copy of
// hack/tools/trainer's module (go.mod and go.sum, module renamed) with `go run . > scripts.json`.

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/kubeflow/trainer/v2/pkg/runtime"
	"github.com/kubeflow/trainer/v2/pkg/runtime/framework/plugins/flux"
)

type kase struct {
	Name     string
	Nodes    int32
	Procs    int32
	Gpus     int64
	Env      map[string]string
	RtEnv    map[string]string
}

func main() {
	cases := []kase{
		{Name: "lammps-flux", Nodes: 2, Procs: 4, Env: map[string]string{"FLUX_VIEW_IMAGE": "ghcr.io/converged-computing/flux-view-ubuntu:tag-jammy"}},
		{Name: "lammps-gpu", Nodes: 2, Procs: 1, Gpus: 1, Env: map[string]string{"OMPI_MCA_btl": "tcp,self"}},
		{Name: "one", Nodes: 1, Procs: 1, Env: map[string]string{"FLUX_NETWORK_DEVICE": "ib0"}, RtEnv: map[string]string{"FLUX_QUEUE_POLICY": "easy", "FLUX_NETWORK_DEVICE": "eth1"}},
		{Name: "big", Nodes: 12, Procs: 3, Gpus: 8},
	}
	out := map[string]map[string]string{}
	for _, c := range cases {
		var env []corev1.EnvVar
		for k, v := range c.Env {
			env = append(env, corev1.EnvVar{Name: k, Value: v})
		}
		tj := &trainer.TrainJob{
			ObjectMeta: metav1.ObjectMeta{Name: c.Name, Namespace: "ns1", UID: "uid"},
			Spec: trainer.TrainJobSpec{Trainer: &trainer.Trainer{
				NumNodes: ptr.To(c.Nodes), NumProcPerNode: ptr.To(c.Procs), Env: env,
				Command: []string{"lmp", "-in", "in.reaxc.hns"},
			}},
		}
		if c.Gpus > 0 {
			q := *resource.NewQuantity(c.Gpus, resource.DecimalSI)
			tj.Spec.Trainer.ResourcesPerNode = &corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": q}, Requests: corev1.ResourceList{"nvidia.com/gpu": q}}
		}
		var rtEnv []corev1ac.EnvVarApplyConfiguration
		for k, v := range c.RtEnv {
			rtEnv = append(rtEnv, *corev1ac.EnvVar().WithName(k).WithValue(v))
		}
		info := &runtime.Info{
			RuntimePolicy: runtime.RuntimePolicy{MLPolicySource: &trainer.MLPolicySource{Flux: &trainer.FluxMLPolicySource{NumProcPerNode: ptr.To[int32](1)}}},
			TemplateSpec: runtime.TemplateSpec{PodSets: []runtime.PodSet{{Name: "node", Ancestor: ptr.To("trainer"), Containers: []runtime.Container{{Name: "node", Env: rtEnv}}}}},
		}
		f := &flux.Flux{}
		objs, err := f.Build(context.Background(), info, tj)
		if err != nil {
			panic(err)
		}
		cm := objs[0].(*corev1ac.ConfigMapApplyConfiguration)
		out[c.Name] = cm.Data
	}
	b, _ := json.MarshalIndent(out, "", "  ")
	fmt.Fprintln(os.Stdout, string(b))
}
