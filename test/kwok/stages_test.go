package kwok

import (
	"bytes"
	"strings"
	"testing"
	"text/template"

	"sigs.k8s.io/yaml"
)

// stage is the part of kwok's Stage that these checks read.
type stage struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		ResourceRef struct {
			APIGroup string `json:"apiGroup"`
			Kind     string `json:"kind"`
		} `json:"resourceRef"`
		Selector struct {
			MatchExpressions []struct {
				Key      string   `json:"key"`
				Operator string   `json:"operator"`
				Values   []string `json:"values"`
			} `json:"matchExpressions"`
		} `json:"selector"`
		Delay *struct {
			DurationMilliseconds       int64 `json:"durationMilliseconds"`
			JitterDurationMilliseconds int64 `json:"jitterDurationMilliseconds"`
		} `json:"delay"`
		Next struct {
			StatusTemplate string `json:"statusTemplate"`
			Delete         bool   `json:"delete"`
			Finalizers     *struct {
				Empty bool `json:"empty"`
			} `json:"finalizers"`
		} `json:"next"`
	} `json:"spec"`
}

// templateFuncs stands in for the functions kwok gives templates, so that a
// template's syntax is checked here rather than by a stage that silently
// never applies.
var templateFuncs = template.FuncMap{
	"Now":        func() string { return "2026-01-01T00:00:00Z" },
	"Quote":      func(v any) string { return `"x"` },
	"NodeIP":     func() string { return "127.0.0.1" },
	"NodeIPWith": func(string) string { return "127.0.0.1" },
	"PodIPWith":  func(string, bool, string, string, string) string { return "10.244.0.1" },
	"atoi":       func(string) int { return 0 },
}

// TestStages checks that every embedded file holds well-formed Stages with
// unique names, selectors kwok accepts, and templates that parse.
func TestStages(t *testing.T) {
	names, err := StageFiles()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	kinds := map[string]int{}
	for _, file := range names {
		data, err := stages.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(data, []byte("\n---\n")) {
			var s stage
			if err := yaml.UnmarshalStrict(doc, &s); err != nil {
				t.Errorf("%s document %d: %v", file, i, err)
				continue
			}
			if s.APIVersion != "kwok.x-k8s.io/v1alpha1" || s.Kind != "Stage" || s.Metadata.Name == "" {
				t.Errorf("%s document %d: %s %s %q is not a named kwok Stage", file, i, s.APIVersion, s.Kind, s.Metadata.Name)
			}
			if other, dup := seen[s.Metadata.Name]; dup {
				t.Errorf("stage %s is in both %s and %s", s.Metadata.Name, other, file)
			}
			seen[s.Metadata.Name] = file
			kinds[s.Spec.ResourceRef.Kind]++
			if s.Spec.ResourceRef.APIGroup != "v1" {
				t.Errorf("stage %s: apiGroup %q, want v1", s.Metadata.Name, s.Spec.ResourceRef.APIGroup)
			}
			for _, expr := range s.Spec.Selector.MatchExpressions {
				checkExpression(t, s.Metadata.Name, expr.Operator, expr.Values)
			}
			if d := s.Spec.Delay; d != nil && d.JitterDurationMilliseconds != 0 && d.JitterDurationMilliseconds < d.DurationMilliseconds {
				t.Errorf("stage %s: jitter %dms is below the delay %dms; kwok reads it as the upper bound", s.Metadata.Name, d.JitterDurationMilliseconds, d.DurationMilliseconds)
			}
			if s.Spec.Next.StatusTemplate == "" && !s.Spec.Next.Delete {
				t.Errorf("stage %s does nothing", s.Metadata.Name)
			}
			if _, err := template.New(s.Metadata.Name).Funcs(templateFuncs).Parse(s.Spec.Next.StatusTemplate); err != nil {
				t.Errorf("stage %s: template: %v", s.Metadata.Name, err)
			}
		}
	}
	if kinds["Node"] == 0 || kinds["Pod"] == 0 {
		t.Errorf("stages per kind = %v; kwok needs Node and Pod stages", kinds)
	}
}

func checkExpression(t *testing.T, stage, operator string, values []string) {
	t.Helper()
	switch operator {
	case "In", "NotIn":
		if len(values) == 0 {
			t.Errorf("stage %s: %s without values", stage, operator)
		}
	case "Exists", "DoesNotExist":
		if len(values) != 0 {
			t.Errorf("stage %s: %s with values", stage, operator)
		}
	default:
		t.Errorf("stage %s: operator %q is not one kwok knows (%s)", stage, operator, strings.Join([]string{"In", "NotIn", "Exists", "DoesNotExist"}, ", "))
	}
}

func TestWriteStages(t *testing.T) {
	dir := t.TempDir()
	paths, err := WriteStages(dir)
	if err != nil {
		t.Fatal(err)
	}
	names, _ := StageFiles()
	if len(paths) != len(names) || len(paths) < 4 {
		t.Errorf("wrote %v, want one file per stage file (%v)", paths, names)
	}
}
