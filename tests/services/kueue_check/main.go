// kueue-check loads a Kueue Configuration file with Kueue's own loader (defaults and
// validation, as the Kueue controller does at start), then computes, with Kueue's own
// workload code, what each given pod template counts against a ClusterQueue's quota: limits
// stand in for missing requests, then the configuration's resource transformations apply,
// as when Kueue creates a Workload for a Job. It prints one JSON object: the validation error
// (if any) and, per pod template, the total requests by resource name (quantities as Kueue
// writes them); the exit status is 1 if the configuration is refused.
//
// Usage: kueue-check CONFIG_FILE < PODSPECS_JSON   (a JSON list of core/v1 PodSpec objects)
package main

import (
	"encoding/json"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	configapi "sigs.k8s.io/kueue/apis/config/v1beta2"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/kueue/pkg/config"
	// The batch/job integration registers itself, as in Kueue's manager: the configuration's
	// default framework list names it, and the loader refuses frameworks nobody registered.
	_ "sigs.k8s.io/kueue/pkg/controller/jobs/job"
	"sigs.k8s.io/kueue/pkg/workload"
)

type report struct {
	Error    string              `json:"error"`
	Requests []map[string]string `json:"requests"`
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: kueue-check CONFIG_FILE < PODSPECS_JSON")
		os.Exit(2)
	}
	scheme := runtime.NewScheme()
	if err := configapi.AddToScheme(scheme); err != nil {
		panic(err)
	}
	out := report{Requests: []map[string]string{}}
	_, cfg, err := config.Load(scheme, os.Args[1])
	if err != nil {
		out.Error = err.Error()
		emit(out, 1)
	}
	var pods []corev1.PodSpec
	if err := json.NewDecoder(os.Stdin).Decode(&pods); err != nil {
		fmt.Fprintln(os.Stderr, "reading the pod specs:", err)
		os.Exit(2)
	}
	var transforms []configapi.ResourceTransformation
	if cfg.Resources != nil {
		transforms = cfg.Resources.Transformations
	}
	for i := range pods {
		workload.UseLimitsAsMissingRequestsInPod(&pods[i])
		wl := &kueue.Workload{
			ObjectMeta: metav1.ObjectMeta{Name: "check", Namespace: "default"},
			Spec: kueue.WorkloadSpec{PodSets: []kueue.PodSet{{
				Name:     kueue.DefaultPodSetName,
				Count:    1,
				Template: corev1.PodTemplateSpec{Spec: pods[i]},
			}}},
		}
		info := workload.NewInfo(wl, workload.WithResourceTransformations(transforms))
		totals := map[string]string{}
		for name, quantity := range info.SumTotalRequests() {
			totals[string(name)] = quantity.String()
		}
		out.Requests = append(out.Requests, totals)
	}
	emit(out, 0)
}

func emit(out report, status int) {
	encoded, _ := json.MarshalIndent(out, "", "  ")
	fmt.Println(string(encoded))
	os.Exit(status)
}
