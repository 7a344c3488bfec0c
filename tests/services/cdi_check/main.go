// cdi-check loads the CDI specs of one directory with the CDI library containerd uses, then
// injects the named devices into an empty OCI spec, as containerd does for a container given
// CDI devices. It prints one JSON object: the library's errors per file, the devices it knows
// and the resulting OCI spec; the exit status is 1 if anything failed.
//
// Usage: cdi-check SPEC_DIR DEVICE...
package main

import (
	"encoding/json"
	"fmt"
	"os"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

type report struct {
	Errors  []string  `json:"errors"`
	Devices []string  `json:"devices"`
	OCI     *oci.Spec `json:"oci"`
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: cdi-check SPEC_DIR DEVICE...")
		os.Exit(2)
	}
	// Manual refresh: one scan of the directory, as a runtime starting up does.
	cache, _ := cdi.NewCache(cdi.WithSpecDirs(os.Args[1]), cdi.WithAutoRefresh(false))
	out := report{Errors: []string{}}
	_ = cache.Refresh()
	for path, errs := range cache.GetErrors() {
		for _, err := range errs {
			out.Errors = append(out.Errors, fmt.Sprintf("%s: %v", path, err))
		}
	}
	out.Devices = cache.ListDevices()
	out.OCI = &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	if _, err := cache.InjectDevices(out.OCI, os.Args[2:]...); err != nil {
		out.Errors = append(out.Errors, fmt.Sprintf("inject: %v", err))
	}
	encoded, _ := json.MarshalIndent(out, "", "  ")
	fmt.Println(string(encoded))
	if len(out.Errors) > 0 {
		os.Exit(1)
	}
}
