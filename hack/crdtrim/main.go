// Command crdtrim shrinks the CRDs that controller-gen writes and lets a
// pod template in them leave out its containers. Below a pod template's
// spec it drops the descriptions, which are the Kubernetes API's own
// documentation and make up most of the bytes, and it lets the template
// leave out containers (the controller adds the main one). Everything else,
// the structure, types and validations generated from k8s.io/api, is kept, so
// the API server validates the template and `kubectl explain` walks it.
//
// Usage: go run ./hack/crdtrim FILE...
package main

import (
	"bytes"
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
)

// podTemplateSpecs are the schema paths of the pod template specs, as
// property names from the version's openAPIV3Schema.
var podTemplateSpecs = map[string][][]string{
	"GPUTask":    {{"spec", "template", "spec"}},
	"GPUTaskSet": {{"spec", "template", "spec", "template", "spec"}},
}

func main() {
	for _, file := range os.Args[1:] {
		if err := trimFile(file); err != nil {
			fmt.Fprintf(os.Stderr, "crdtrim: %s: %v\n", file, err)
			os.Exit(1)
		}
	}
}

func trimFile(file string) error {
	raw, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var crd map[string]any
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		return fmt.Errorf("decoding: %w", err)
	}
	kind, _ := lookup(crd, "spec", "names", "kind").(string)
	paths, ok := podTemplateSpecs[kind]
	if !ok {
		return nil
	}
	versions, _ := lookup(crd, "spec", "versions").([]any)
	for _, v := range versions {
		schema, _ := lookup(v, "schema", "openAPIV3Schema").(map[string]any)
		for _, path := range paths {
			node := schema
			for _, name := range path {
				node, _ = lookup(node, "properties", name).(map[string]any)
			}
			if node == nil {
				return fmt.Errorf("no pod template spec at %v", path)
			}
			stripDescriptions(node)
			dropRequired(node, "containers")
		}
	}
	out, err := yaml.Marshal(crd)
	if err != nil {
		return fmt.Errorf("encoding: %w", err)
	}
	return os.WriteFile(file, append([]byte("---\n"), bytes.TrimSpace(out)...), 0o644)
}

func lookup(node any, keys ...string) any {
	for _, k := range keys {
		m, ok := node.(map[string]any)
		if !ok {
			return nil
		}
		node = m[k]
	}
	return node
}

// stripDescriptions removes every description in a schema subtree, including
// the subtree's own.
func stripDescriptions(node any) {
	switch n := node.(type) {
	case map[string]any:
		delete(n, "description")
		for k, v := range n {
			// A property may itself be called "description"; only the schema
			// keyword is dropped, so recurse into properties by value.
			if k == "properties" {
				if props, ok := v.(map[string]any); ok {
					for _, p := range props {
						stripDescriptions(p)
					}
				}
				continue
			}
			stripDescriptions(v)
		}
	case []any:
		for _, v := range n {
			stripDescriptions(v)
		}
	}
}

func dropRequired(schema map[string]any, name string) {
	required, _ := schema["required"].([]any)
	kept := required[:0]
	for _, r := range required {
		if r != name {
			kept = append(kept, r)
		}
	}
	if len(kept) == 0 {
		delete(schema, "required")
		return
	}
	schema["required"] = kept
}
