// Command cel-check evaluates DRA device selectors the way kube-scheduler does, with
// Kubernetes' own CEL compiler (k8s.io/dynamic-resource-allocation/cel), so the tests of
// vslice's GPU type selectors check the selectors the cluster runs, not a re-implementation.
//
// Input: one JSON object per line, {"driver", "expression", "model"}; output: one JSON object
// per line, {"matches": bool} or {"error": "..."} when the expression does not compile or run.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
)

type query struct {
	Driver     string `json:"driver"`
	Expression string `json:"expression"`
	Model      string `json:"model"`
}

func answer(compiler interface {
	CompileCELExpression(string, cel.Options) cel.CompilationResult
}, q query) map[string]any {
	compiled := compiler.CompileCELExpression(q.Expression, cel.Options{})
	if compiled.Error != nil {
		return map[string]any{"error": compiled.Error.Error()}
	}
	model := q.Model
	device := cel.Device{
		Driver: q.Driver,
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"model": {StringValue: &model},
		},
	}
	matches, _, err := compiled.DeviceMatches(context.Background(), device)
	if err != nil {
		return map[string]any{"error": err.Error()}
	}
	return map[string]any{"matches": matches}
}

func main() {
	scanner := bufio.NewScanner(os.Stdin)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	out := json.NewEncoder(os.Stdout)
	compiler := cel.GetCompiler(cel.Features{})
	for scanner.Scan() {
		var q query
		if err := json.Unmarshal(scanner.Bytes(), &q); err != nil {
			fmt.Fprintln(os.Stderr, "cel-check:", err)
			os.Exit(2)
		}
		if err := out.Encode(answer(compiler, q)); err != nil {
			fmt.Fprintln(os.Stderr, "cel-check:", err)
			os.Exit(1)
		}
	}
}
