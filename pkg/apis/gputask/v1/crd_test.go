package v1_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apivalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/randfill"
	"sigs.k8s.io/yaml"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
)

// crdSchema loads one CRD from artifacts/crds and returns its structural schema
// and a validator for the v1 version.
func crdSchema(t *testing.T, file string) (*apiextensionsv1.CustomResourceDefinition, *structuralschema.Structural, apivalidation.SchemaValidator) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "artifacts", "crds", file))
	if err != nil {
		t.Fatalf("reading CRD: %v", err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(raw, crd); err != nil {
		t.Fatalf("decoding CRD %s: %v", file, err)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != "v1" {
		t.Fatalf("CRD %s: want exactly one version v1, got %d", file, len(crd.Spec.Versions))
	}
	internal := &apiextensions.JSONSchemaProps{}
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(crd.Spec.Versions[0].Schema.OpenAPIV3Schema, internal, nil); err != nil {
		t.Fatalf("converting schema: %v", err)
	}
	structural, err := structuralschema.NewStructural(internal)
	if err != nil {
		t.Fatalf("schema of %s is not structural: %v", file, err)
	}
	if errs := structuralschema.ValidateStructural(field.NewPath("spec", "validation", "openAPIV3Schema"), structural); len(errs) > 0 {
		t.Fatalf("schema of %s is not structural: %v", file, errs.ToAggregate())
	}
	validator, _, err := apivalidation.NewSchemaValidator(internal)
	if err != nil {
		t.Fatalf("building validator: %v", err)
	}
	return crd, structural, validator
}

// filler sets every field of an API object, with values that the schema
// accepts where a type's JSON form is constrained.
func filler(seed int64) *randfill.Filler {
	return randfill.NewWithSeed(seed).NilChance(0).NumElements(1, 2).Funcs(
		func(q *intstr.IntOrString, c randfill.Continue) {
			if c.Bool() {
				*q = intstr.FromInt32(c.Int31n(8) + 1)
			} else {
				*q = intstr.FromString("2")
			}
		},
		func(q *resource.Quantity, c randfill.Continue) {
			*q = *resource.NewMilliQuantity(c.Int63n(1000), resource.DecimalSI)
		},
		func(tm *metav1.Time, c randfill.Continue) {
			*tm = metav1.Unix(c.Int63n(1<<31), 0).Rfc3339Copy()
		},
		func(d *gputaskv1.Duration, c randfill.Continue) {
			*d = gputaskv1.Duration{Duration: time.Duration(c.Int63n(3600)) * time.Second}
		},
		func(m *metav1.ObjectMeta, c randfill.Continue) {
			m.Name = "x"
			m.Namespace = "default"
		},
		func(tm *metav1.TypeMeta, c randfill.Continue) {},
		// EnvVar has deep optional sources; a name and value are enough to
		// show that the list round-trips.
		func(e *corev1.EnvVar, c randfill.Continue) {
			e.Name = c.String(8) + "v"
			e.Value = c.String(8)
		},
		func(s *corev1.SecretKeySelector, c randfill.Continue) {
			s.Name = "secret"
			s.Key = "key"
		},
	)
}

// TestCRDMatchesGoTypes proves that every field of the Go types survives the
// API server's pruning of unknown fields, so the CRD and the types agree.
func TestCRDMatchesGoTypes(t *testing.T) {
	for _, tc := range []struct {
		file string
		kind string
		obj  func() any
	}{
		{"gputask.io_gputasks.yaml", "GPUTask", func() any { return &gputaskv1.GPUTask{} }},
		{"gputask.io_gputasksets.yaml", "GPUTaskSet", func() any { return &gputaskv1.GPUTaskSet{} }},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			crd, structural, _ := crdSchema(t, tc.file)
			if crd.Spec.Names.Kind != tc.kind {
				t.Fatalf("CRD kind %q, want %q", crd.Spec.Names.Kind, tc.kind)
			}
			for seed := int64(0); seed < 50; seed++ {
				original := tc.obj()
				filler(seed).Fill(original)
				raw, err := json.Marshal(original)
				if err != nil {
					t.Fatal(err)
				}
				// Decode numbers as json.Number so that int64 fields keep every digit.
				var u map[string]any
				dec := json.NewDecoder(bytes.NewReader(raw))
				dec.UseNumber()
				if err := dec.Decode(&u); err != nil {
					t.Fatal(err)
				}
				pruned := pruning.PruneWithOptions(u, structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
				if len(pruned) > 0 {
					sort.Strings(pruned)
					t.Fatalf("the CRD schema drops Go fields: %s", strings.Join(pruned, ", "))
				}
				back := tc.obj()
				raw, _ = json.Marshal(u)
				if err := json.Unmarshal(raw, back); err != nil {
					t.Fatal(err)
				}
				if !equality.Semantic.DeepEqual(original, back) {
					t.Fatalf("object changed through the schema:\n%#v\n%#v", original, back)
				}
			}
		})
	}
}

// TestCRDSchemaValidation checks the schema's rules on typical objects: what
// users write is accepted, and each rule rejects what it should.
func TestCRDSchemaValidation(t *testing.T) {
	_, _, validator := crdSchema(t, "gputask.io_gputasks.yaml")
	for _, tc := range []struct {
		name  string
		spec  string
		valid bool
	}{
		{"strings as in existing GPUTask YAML", `{"memory":"4Gi","gpu":"A100","gpu-amount":"2","cpu":"2","priority":"high"}`, true},
		{"numbers", `{"memory":"4Gi","gpu-amount":2,"cpu":2}`, true},
		{"millicores", `{"cpu":"500m","memory":"512Mi"}`, true},
		{"gpu-amount zero string", `{"gpu-amount":"0"}`, false},
		{"gpu-amount fraction", `{"gpu-amount":"1.5"}`, false},
		{"gpu-amount word", `{"gpu-amount":"abc"}`, false},
		{"gpu-amount float", `{"gpu-amount":1.5}`, false},
		{"cpu word", `{"cpu":"abc"}`, false},
		{"memory word", `{"memory":"lots"}`, false},
		{"reschedule policy", `{"reschedulePolicy":"Sometimes"}`, false},
		{"gpu model with spaces (a DRA model attribute)", `{"gpu":"NVIDIA A100-SXM4-80GB"}`, true},
		{"gpu model with a space at the end", `{"gpu":"A100 "}`, false},
		{"gpu model with a slash", `{"gpu":"A/100"}`, false},
		{"gpu allocation", `{"gpuAllocation":"DRA","deviceSelectors":["device.attributes[\"gpu.nvidia.com\"].index < 4"]}`, true},
		{"gpu allocation unknown", `{"gpuAllocation":"Magic"}`, false},
		{"empty device selector", `{"gpuAllocation":"DRA","deviceSelectors":[""]}`, false},
		{"gpu alternatives", `{"gpu":"A100","gpuAlternatives":["H100","L40S"]}`, true},
		{"gpu alternative with spaces", `{"gpu":"A100","gpuAlternatives":["NVIDIA H100 80GB HBM3"]}`, true},
		{"gpu alternative with a tab", `{"gpu":"A100","gpuAlternatives":["H\t100"]}`, false},
		{"template", `{"template":{"metadata":{"labels":{"kueue.x-k8s.io/queue-name":"q"}},"spec":{"restartPolicy":"OnFailure","volumes":[{"name":"shm","emptyDir":{"medium":"Memory"}}]}}}`, true},
		{"template container without name", `{"template":{"spec":{"containers":[{"image":"x"}]}}}`, false},
		{"template volume of wrong type", `{"template":{"spec":{"volumes":{"name":"shm"}}}}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var spec map[string]any
			if err := json.Unmarshal([]byte(tc.spec), &spec); err != nil {
				t.Fatal(err)
			}
			obj := map[string]any{
				"apiVersion": "gputask.io/v1", "kind": "GPUTask",
				"metadata": map[string]any{"name": "t"}, "spec": spec,
			}
			errs := apivalidation.ValidateCustomResource(nil, obj, validator)
			if tc.valid && len(errs) > 0 {
				t.Fatalf("want valid, got %v", errs.ToAggregate())
			}
			if !tc.valid && len(errs) == 0 {
				t.Fatalf("want invalid, schema accepted %s", tc.spec)
			}
		})
	}
}

// TestCRDNames checks what kubectl users type: short names, categories,
// subresources and printer columns.
func TestCRDNames(t *testing.T) {
	for _, tc := range []struct {
		file, short string
		scale       bool
		columns     []string
	}{
		{"gputask.io_gputasks.yaml", "gt", false, []string{"GPU", "AMOUNT", "PHASE", "NODE", "SCHEDULED", "AGE"}},
		{"gputask.io_gputasksets.yaml", "gts", true, []string{"DESIRED", "CURRENT", "READY", "RUNNING", "STARTING", "DRAINING", "NODES", "LOAD", "PREDICTED-WAIT", "PREDICTED-TTFT", "STOPPED", "ABLE", "AGE"}},
	} {
		crd, _, _ := crdSchema(t, tc.file)
		if !reflect.DeepEqual(crd.Spec.Names.ShortNames, []string{tc.short}) || !reflect.DeepEqual(crd.Spec.Names.Categories, []string{"gpu"}) {
			t.Errorf("%s: short names %v categories %v", tc.file, crd.Spec.Names.ShortNames, crd.Spec.Names.Categories)
		}
		v := crd.Spec.Versions[0]
		if v.Subresources == nil || v.Subresources.Status == nil {
			t.Errorf("%s: no status subresource", tc.file)
		}
		if tc.scale && (v.Subresources == nil || v.Subresources.Scale == nil || v.Subresources.Scale.SpecReplicasPath != ".spec.replicas") {
			t.Errorf("%s: no scale subresource on .spec.replicas", tc.file)
		}
		var got []string
		for _, c := range v.AdditionalPrinterColumns {
			got = append(got, c.Name)
		}
		if !reflect.DeepEqual(got, tc.columns) {
			t.Errorf("%s: printer columns %v, want %v", tc.file, got, tc.columns)
		}
	}
}

// TestStoppedAndAbleColumns evaluates the STOPPED and ABLE printer columns
// as the API server does, so that `kubectl get gts` shows a stopped set.
func TestStoppedAndAbleColumns(t *testing.T) {
	crd, _, _ := crdSchema(t, "gputask.io_gputasksets.yaml")
	set := map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{gputaskv1.AnnotationStopped: "true"}},
		"status": map[string]any{"conditions": []any{
			map[string]any{"type": gputaskv1.ConditionScalingActive, "reason": "ValidMetricFound"},
			map[string]any{"type": gputaskv1.ConditionAbleToScale, "reason": "Stopped"},
		}},
	}
	want := map[string]string{"STOPPED": "true", "ABLE": "Stopped"}
	for _, c := range crd.Spec.Versions[0].AdditionalPrinterColumns {
		w, ok := want[c.Name]
		if !ok {
			continue
		}
		jp := jsonpath.New(c.Name)
		if err := jp.Parse("{" + c.JSONPath + "}"); err != nil {
			t.Fatalf("column %s: parsing %q: %v", c.Name, c.JSONPath, err)
		}
		var buf bytes.Buffer
		if err := jp.Execute(&buf, set); err != nil {
			t.Fatalf("column %s: %v", c.Name, err)
		}
		if buf.String() != w {
			t.Errorf("column %s = %q, want %q", c.Name, buf.String(), w)
		}
	}
}

// TestPredictedWaitColumn evaluates the PREDICTED-WAIT printer column as
// the API server does: it shows the SLO policy's predicted wait, a scalar
// of the last decision, and nothing for a set without one.
func TestPredictedWaitColumn(t *testing.T) {
	testPredictedColumn(t, "PREDICTED-WAIT", "predictedWait")
}

// TestPredictedTTFTColumn: the SLO policy's predicted time to first token
// shows beside the count, as the predicted wait does.
func TestPredictedTTFTColumn(t *testing.T) {
	testPredictedColumn(t, "PREDICTED-TTFT", "predictedTTFT")
}

func testPredictedColumn(t *testing.T, name, field string) {
	t.Helper()
	// Both predictions are set, so that a column reading the other shows
	// the wrong one.
	sloDecision := map[string]any{"reason": "SLOScaleUp", "predictedWait": "9s", "predictedTTFT": "9s"}
	sloDecision[field] = "4.2s"
	crd, _, _ := crdSchema(t, "gputask.io_gputasksets.yaml")
	var column *apiextensionsv1.CustomResourceColumnDefinition
	for i, c := range crd.Spec.Versions[0].AdditionalPrinterColumns {
		if c.Name == name {
			column = &crd.Spec.Versions[0].AdditionalPrinterColumns[i]
		}
	}
	if column == nil || column.Type != "string" || column.Priority != 0 {
		t.Fatalf("%s column = %+v, want a string column shown by default", name, column)
	}
	jp := jsonpath.New(column.Name).AllowMissingKeys(true)
	if err := jp.Parse("{" + column.JSONPath + "}"); err != nil {
		t.Fatalf("parsing %q: %v", column.JSONPath, err)
	}
	for _, tc := range []struct {
		name   string
		status map[string]any
		want   string
	}{
		{"SLO decision", map[string]any{"lastDecision": sloDecision}, "4.2s"},
		{"slots cannot keep up", map[string]any{"lastDecision": map[string]any{field: "unbounded"}}, "unbounded"},
		{"Step decision", map[string]any{"lastDecision": map[string]any{"reason": "AboveUpThreshold"}}, ""},
		{"no decision", map[string]any{}, ""},
	} {
		var buf bytes.Buffer
		if err := jp.Execute(&buf, map[string]any{"status": tc.status}); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if buf.String() != tc.want {
			t.Errorf("%s: column = %q, want %q", tc.name, buf.String(), tc.want)
		}
	}
}

// TestNodesColumn: `kubectl get gts -o wide` shows status.nodes, the
// nodes that hold the set's tasks; the default view leaves it out.
func TestNodesColumn(t *testing.T) {
	crd, _, _ := crdSchema(t, "gputask.io_gputasksets.yaml")
	var column *apiextensionsv1.CustomResourceColumnDefinition
	for i, c := range crd.Spec.Versions[0].AdditionalPrinterColumns {
		if c.Name == "NODES" {
			column = &crd.Spec.Versions[0].AdditionalPrinterColumns[i]
		}
	}
	if column == nil || column.Type != "integer" || column.Priority != 1 {
		t.Fatalf("NODES column = %+v, want an integer column shown with -o wide only", column)
	}
	jp := jsonpath.New(column.Name)
	if err := jp.Parse("{" + column.JSONPath + "}"); err != nil {
		t.Fatalf("parsing %q: %v", column.JSONPath, err)
	}
	var buf bytes.Buffer
	if err := jp.Execute(&buf, map[string]any{"status": map[string]any{"replicas": int64(5), "nodes": int64(2)}}); err != nil {
		t.Fatal(err)
	}
	if buf.String() != "2" {
		t.Errorf("column = %q, want 2", buf.String())
	}
}

// TestWorkloadExamples checks that every example in
// artifacts/examples/workloads, the DRA examples' tasks and sets, and the
// Kueue example's set, pass the schema and lose no field to pruning.
func TestWorkloadExamples(t *testing.T) {
	examples := filepath.Join("..", "..", "..", "..", "artifacts", "examples")
	files, err := filepath.Glob(filepath.Join(examples, "workloads", "*.yaml"))
	if err != nil || len(files) < 4 {
		t.Fatalf("want at least 4 workload examples, got %v (%v)", files, err)
	}
	dra, err := filepath.Glob(filepath.Join(examples, "dra", "gputask*.yaml"))
	if err != nil || len(dra) != 2 {
		t.Fatalf("want the DRA task and set examples, got %v (%v)", dra, err)
	}
	files = append(files, dra...)
	files = append(files, filepath.Join(examples, "kueue", "gputaskset.yaml"))
	crds := map[string]string{"GPUTask": "gputask.io_gputasks.yaml", "GPUTaskSet": "gputask.io_gputasksets.yaml"}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var obj map[string]any
			if err := yaml.Unmarshal(raw, &obj); err != nil {
				t.Fatal(err)
			}
			kind, _ := obj["kind"].(string)
			_, structural, validator := crdSchema(t, crds[kind])
			if errs := apivalidation.ValidateCustomResource(nil, obj, validator); len(errs) > 0 {
				t.Fatalf("invalid: %v", errs.ToAggregate())
			}
			if pruned := pruning.PruneWithOptions(obj, structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true}); len(pruned) > 0 {
				t.Fatalf("the CRD schema drops fields: %v", pruned)
			}
		})
	}
}

// TestLoadIndexSourceRules runs the GPUTaskSet schema and its CEL rules, as
// the API server does, on the fields a tenant could turn against the
// controller's network position: valueLocation is a plain path, and
// identity and hop-by-hop headers are refused whatever their case.
func TestLoadIndexSourceRules(t *testing.T) {
	_, structural, validator := crdSchema(t, "gputask.io_gputasksets.yaml")
	celValidator := cel.NewValidator(structural, true, celconfig.PerCallLimit)
	for _, tc := range []struct {
		name  string
		http  string
		valid bool
	}{
		{"plain path", `{"url":"http://x","valueLocation":"data.load_balance"}`, true},
		{"index", `{"url":"http://x","valueLocation":"items.0.v"}`, true},
		{"escaped dot", `{"url":"http://x","valueLocation":"data.gpu\\.util"}`, true},
		{"colon and dash", `{"url":"http://x","valueLocation":"job:load.x-y_z"}`, true},
		{"filter", `{"url":"http://x","valueLocation":"[@this].#(SecretAccessKey>=\"kZ9\")#|#"}`, false},
		{"query", `{"url":"http://x","valueLocation":"items.#(..)"}`, false},
		{"count", `{"url":"http://x","valueLocation":"items.#"}`, false},
		{"modifier", `{"url":"http://x","valueLocation":"@reverse"}`, false},
		{"pipe", `{"url":"http://x","valueLocation":"a|b"}`, false},
		{"multipath", `{"url":"http://x","valueLocation":"{a,b}"}`, false},
		{"star", `{"url":"http://x","valueLocation":"a*"}`, false},
		{"question mark", `{"url":"http://x","valueLocation":"a?"}`, false},
		{"empty segment", `{"url":"http://x","valueLocation":"a..b"}`, false},
		{"ordinary header", `{"url":"http://x","headers":[{"name":"X-Api-Key","value":"k"}]}`, true},
		{"Authorization from a Secret", `{"url":"http://x","headers":[{"name":"Authorization","valueFrom":{"name":"s","key":"k"}}]}`, true},
		{"Authorization inline", `{"url":"http://x","headers":[{"name":"authorization","value":"Bearer x"}]}`, false},
		{"X-Forwarded-For", `{"url":"http://x","headers":[{"name":"X-Forwarded-For","value":"1.2.3.4"}]}`, false},
		{"x-forwarded-host lower case", `{"url":"http://x","headers":[{"name":"x-forwarded-host","value":"a"}]}`, false},
		{"Forwarded", `{"url":"http://x","headers":[{"name":"FORWARDED","value":"for=1.2.3.4"}]}`, false},
		{"X-Real-IP", `{"url":"http://x","headers":[{"name":"X-Real-Ip","value":"1.2.3.4"}]}`, false},
		{"X-Remote-User", `{"url":"http://x","headers":[{"name":"X-Remote-User","value":"admin"}]}`, false},
		{"X-Remote-Group", `{"url":"http://x","headers":[{"name":"x-remote-group","value":"system:masters"}]}`, false},
		{"Impersonate-User", `{"url":"http://x","headers":[{"name":"Impersonate-User","value":"admin"}]}`, false},
		{"Impersonate-Group from a Secret", `{"url":"http://x","headers":[{"name":"Impersonate-Group","valueFrom":{"name":"s","key":"k"}}]}`, false},
		{"Host", `{"url":"http://x","headers":[{"name":"Host","value":"kubernetes.default"}]}`, false},
		{"Connection", `{"url":"http://x","headers":[{"name":"Connection","value":"close"}]}`, false},
		{"Proxy-Authorization", `{"url":"http://x","headers":[{"name":"Proxy-Authorization","value":"x"}]}`, false},
		{"Te", `{"url":"http://x","headers":[{"name":"TE","value":"trailers"}]}`, false},
		{"Trailer", `{"url":"http://x","headers":[{"name":"Trailer","value":"x"}]}`, false},
		{"Transfer-Encoding", `{"url":"http://x","headers":[{"name":"Transfer-Encoding","value":"chunked"}]}`, false},
		{"Upgrade", `{"url":"http://x","headers":[{"name":"Upgrade","value":"websocket"}]}`, false},
		{"Keep-Alive", `{"url":"http://x","headers":[{"name":"Keep-Alive","value":"timeout=5"}]}`, false},
		{"header name with a space", `{"url":"http://x","headers":[{"name":"X Api","value":"k"}]}`, false},
		{"header name with a colon", `{"url":"http://x","headers":[{"name":"Host:","value":"k"}]}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var source map[string]any
			if err := json.Unmarshal([]byte(tc.http), &source); err != nil {
				t.Fatal(err)
			}
			obj := map[string]any{
				"apiVersion": "gputask.io/v1", "kind": "GPUTaskSet",
				"metadata": map[string]any{"name": "s"},
				"spec": map[string]any{
					"template": map[string]any{"spec": map[string]any{"gpu": "A100"}},
					"autoscaling": map[string]any{"maxReplicas": int64(2),
						"metrics": []any{map[string]any{"name": "load", "http": source}}},
				},
			}
			errs := apivalidation.ValidateCustomResource(nil, obj, validator)
			celErrs, _ := celValidator.Validate(context.Background(), nil, structural, obj, nil, celconfig.RuntimeCELCostBudget)
			errs = append(errs, celErrs...)
			if tc.valid && len(errs) > 0 {
				t.Fatalf("want valid, got %v", errs.ToAggregate())
			}
			if !tc.valid && len(errs) == 0 {
				t.Fatalf("want invalid, the CRD accepted %s", tc.http)
			}
		})
	}
}

// TestSLOPolicyRules runs the GPUTaskSet schema and its CEL rules on the
// SLO policy: the objective's bounds, and the roles its metrics must have.
func TestSLOPolicyRules(t *testing.T) {
	_, structural, validator := crdSchema(t, "gputask.io_gputasksets.yaml")
	celValidator := cel.NewValidator(structural, true, celconfig.PerCallLimit)
	metric := func(name, role string) string {
		m := `{"name":"` + name + `","prometheus":{"serverAddress":"http://p","query":"q"}`
		if role != "" {
			m += `,"role":"` + role + `"`
		}
		return m + `}`
	}
	roles := `[` + metric("arrivals", "Arrivals") + `,` + metric("running", "Running") + `]`
	engineRoles := `[` + metric("arrivals", "Arrivals") + `,` + metric("running", "Running") + `,` + metric("ttft", "TTFTPercentile") + `,` +
		metric("itl", "InterTokenLatency") + `,` + metric("prompt", "PromptTokens") + `,` + metric("gen", "GenerationTokens") + `,` + metric("kv", "KVCacheUsage") + `]`
	slo := func(s string) string { return `{"type":"SLO","slo":` + s + `}` }
	const ok = `{"wait":"10s","percentile":95,"slotsPerTask":8}`
	for _, tc := range []struct {
		name, policy, metrics, extra string
		wantErr                      string // empty: valid
	}{
		{name: "the documented example", policy: slo(ok), metrics: roles},
		{name: "percentile as a string with a fraction", policy: slo(`{"wait":"1s","percentile":"99.9","slotsPerTask":1}`), metrics: roles},
		{name: "percentile 50, variability set", policy: slo(`{"wait":"1h","percentile":"50","slotsPerTask":100000,"serviceTimeVariability":"2.5"}`), metrics: roles},
		{name: "defaults", policy: slo(`{"wait":"10s","slotsPerTask":8}`), metrics: roles},
		{name: "all five roles", policy: slo(ok), metrics: `[` + metric("done", "Completions") + `,` + metric("a", "Arrivals") + `,` +
			metric("running", "Running") + `,` + metric("waiting", "Waiting") + `,` + metric("p95", "WaitPercentile") + `]`},
		{name: "completions instead of arrivals", policy: slo(ok), metrics: `[` + metric("done", "Completions") + `,` + metric("running", "Running") + `]`},
		{name: "wait under 1s", policy: slo(`{"wait":"500ms","slotsPerTask":8}`), metrics: roles, wantErr: "wait must be between 1s and 1h"},
		{name: "wait over 1h", policy: slo(`{"wait":"2h","slotsPerTask":8}`), metrics: roles, wantErr: "wait must be between 1s and 1h"},
		{name: "no objective", policy: slo(`{"slotsPerTask":8}`), metrics: roles, wantErr: "slo needs at least one of wait, ttft or itl"},
		{name: "ttft and itl from a profile", policy: slo(`{"ttft":"2s","itl":"50ms","percentile":95,"engine":{"profile":"h100-llama-3.1-8b"}}`), metrics: engineRoles},
		{name: "itl learned from the workers", policy: slo(`{"itl":"50ms"}`), metrics: `[` + metric("arrivals", "Arrivals") + `,` + metric("running", "Running") + `,` + metric("itl", "InterTokenLatency") + `]`},
		{name: "profile from a ConfigMap", policy: slo(`{"itl":"50ms","engine":{"configMapRef":{"name":"h100","key":"profile.json"}}}`), metrics: `[` + metric("arrivals", "Arrivals") + `,` + metric("running", "Running") + `,` + metric("kv", "KVCacheUsage") + `]`},
		{name: "profile with slotsPerTask needs no KV usage", policy: slo(`{"itl":"50ms","slotsPerTask":64,"engine":{"profile":"h200-llama-3.1-8b"}}`), metrics: roles},
		{name: "ttft without TTFTPercentile", policy: slo(`{"ttft":"2s","slotsPerTask":8}`), metrics: roles, wantErr: "slo.ttft needs a metric of role TTFTPercentile"},
		{name: "itl without engine or InterTokenLatency", policy: slo(`{"itl":"50ms"}`), metrics: roles, wantErr: "slo.itl needs an engine profile (slo.engine) or a metric of role InterTokenLatency"},
		{name: "profile capacity without KVCacheUsage", policy: slo(`{"itl":"50ms","engine":{"profile":"h100-llama-3.1-8b"}}`), metrics: roles, wantErr: "the capacity from an engine profile needs a metric of role KVCacheUsage"},
		{name: "no capacity: neither slotsPerTask nor itl", policy: slo(`{"wait":"10s"}`), metrics: roles, wantErr: "set slo.itl or slo.slotsPerTask"},
		{name: "unknown profile", policy: slo(`{"itl":"50ms","slotsPerTask":8,"engine":{"profile":"b200-mystery"}}`), metrics: roles, wantErr: "Unsupported value"},
		{name: "profile and ConfigMap both", policy: slo(`{"itl":"50ms","slotsPerTask":8,"engine":{"profile":"h100-llama-3.1-8b","configMapRef":{"name":"a","key":"b"}}}`), metrics: roles, wantErr: "exactly one of profile or configMapRef must be set"},
		{name: "engine naming nothing", policy: slo(`{"itl":"50ms","slotsPerTask":8,"engine":{}}`), metrics: roles, wantErr: "exactly one of profile or configMapRef must be set"},
		{name: "ConfigMap without key", policy: slo(`{"itl":"50ms","slotsPerTask":8,"engine":{"configMapRef":{"name":"a"}}}`), metrics: roles, wantErr: "key"},
		{name: "ttft under 10ms", policy: slo(`{"ttft":"5ms","slotsPerTask":8}`), metrics: engineRoles, wantErr: "ttft must be between 10ms and 1h"},
		{name: "itl over 10s", policy: slo(`{"itl":"11s","slotsPerTask":8}`), metrics: engineRoles, wantErr: "itl must be between 1ms and 10s"},
		{name: "percentile under 50", policy: slo(`{"wait":"10s","percentile":49,"slotsPerTask":8}`), metrics: roles, wantErr: "percentile must be between 50 and 99.9"},
		{name: "percentile over 99.9", policy: slo(`{"wait":"10s","percentile":"99.95","slotsPerTask":8}`), metrics: roles, wantErr: "percentile must be between 50 and 99.9"},
		{name: "percentile 100", policy: slo(`{"wait":"10s","percentile":100,"slotsPerTask":8}`), metrics: roles, wantErr: "percentile must be between 50 and 99.9"},
		{name: "percentile not a number", policy: slo(`{"wait":"10s","percentile":"high","slotsPerTask":8}`), metrics: roles, wantErr: "percentile"},
		{name: "slotsPerTask 0 without itl", policy: slo(`{"wait":"10s","slotsPerTask":0}`), metrics: roles, wantErr: "set slo.itl or slo.slotsPerTask"},
		{name: "slotsPerTask negative", policy: slo(`{"wait":"10s","slotsPerTask":-1}`), metrics: roles, wantErr: "slotsPerTask"},
		{name: "variability negative", policy: slo(`{"wait":"10s","slotsPerTask":8,"serviceTimeVariability":"-1"}`), metrics: roles, wantErr: "serviceTimeVariability must be between 0 and 100"},
		{name: "variability over 100", policy: slo(`{"wait":"10s","slotsPerTask":8,"serviceTimeVariability":101}`), metrics: roles, wantErr: "serviceTimeVariability must be between 0 and 100"},
		{name: "SLO without slo", policy: `{"type":"SLO"}`, metrics: roles, wantErr: "slo is required by the SLO policy and read by it only"},
		{name: "slo on Step", policy: `{"type":"Step","slo":` + ok + `}`, metrics: `[` + metric("load", "") + `]`, wantErr: "slo is required by the SLO policy and read by it only"},
		{name: "a metric without a role", policy: slo(ok), metrics: `[` + metric("arrivals", "Arrivals") + `,` + metric("running", "Running") + `,` + metric("load", "") + `]`, wantErr: "every metric needs a role with the SLO policy"},
		{name: "a role on Step", policy: `{"type":"Step"}`, metrics: `[` + metric("load", "Running") + `]`, wantErr: "metric roles are read by the SLO policy only"},
		{name: "a role on the default policy", policy: `{}`, metrics: `[` + metric("load", "Arrivals") + `]`, wantErr: "metric roles are read by the SLO policy only"},
		{name: "no Running", policy: slo(ok), metrics: `[` + metric("arrivals", "Arrivals") + `,` + metric("waiting", "Waiting") + `]`, wantErr: "needs a metric of role Running and one of role Arrivals or Completions"},
		{name: "no arrivals or completions", policy: slo(ok), metrics: `[` + metric("running", "Running") + `,` + metric("p95", "WaitPercentile") + `]`, wantErr: "needs a metric of role Running and one of role Arrivals or Completions"},
		{name: "a role twice", policy: slo(ok), metrics: `[` + metric("arrivals", "Arrivals") + `,` + metric("running", "Running") + `,` + metric("again", "Running") + `]`, wantErr: "each role may be given to one metric only"},
		{name: "an unknown role", policy: slo(ok), metrics: `[` + metric("arrivals", "Arrivals") + `,` + metric("running", "Running") + `,` + metric("load", "Load") + `]`, wantErr: "Unsupported value"},
		{name: "burst with SLO", policy: slo(ok), metrics: roles, extra: `"burst":{"factor":"2"}`, wantErr: "burst applies to the Step and Proportional policies"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			autoscaling := `{"maxReplicas":10,"policy":` + tc.policy + `,"metrics":` + tc.metrics
			if tc.extra != "" {
				autoscaling += `,` + tc.extra
			}
			autoscaling += `}`
			// As the API server decodes: whole numbers are int64.
			var as map[string]any
			if err := utiljson.Unmarshal([]byte(autoscaling), &as); err != nil {
				t.Fatal(err)
			}
			obj := map[string]any{
				"apiVersion": "gputask.io/v1", "kind": "GPUTaskSet",
				"metadata": map[string]any{"name": "s"},
				"spec": map[string]any{
					"template":    map[string]any{"spec": map[string]any{"gpu": "A100"}},
					"autoscaling": as,
				},
			}
			errs := apivalidation.ValidateCustomResource(nil, obj, validator)
			celErrs, _ := celValidator.Validate(context.Background(), nil, structural, obj, nil, celconfig.RuntimeCELCostBudget)
			errs = append(errs, celErrs...)
			if tc.wantErr == "" {
				if len(errs) > 0 {
					t.Fatalf("want valid, got %v", errs.ToAggregate())
				}
				return
			}
			if len(errs) == 0 {
				t.Fatalf("want %q, the CRD accepted %s", tc.wantErr, autoscaling)
			}
			if msg := errs.ToAggregate().Error(); !strings.Contains(msg, tc.wantErr) {
				t.Fatalf("want %q, got %s", tc.wantErr, msg)
			}
		})
	}
}

// TestSLODocExample checks that the SLO policy's example in
// docs/autoscaling.md passes the schema and its CEL rules, and loses no
// field to pruning.
func TestSLODocExample(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "docs", "autoscaling.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	start := strings.Index(doc, "## Scaling to a wait SLO")
	if start < 0 {
		t.Fatal("docs/autoscaling.md has no SLO section")
	}
	block := doc[start:]
	open := strings.Index(block, "```yaml\n")
	if open < 0 {
		t.Fatal("the SLO section has no YAML example")
	}
	block = block[open+len("```yaml\n"):]
	block = block[:strings.Index(block, "```")]
	var spec map[string]any
	if err := yaml.Unmarshal([]byte(block), &spec); err != nil {
		t.Fatalf("the example is not YAML: %v", err)
	}
	spec["template"] = map[string]any{"spec": map[string]any{"gpu": "A100"}}
	obj := map[string]any{"apiVersion": "gputask.io/v1", "kind": "GPUTaskSet", "metadata": map[string]any{"name": "s"}, "spec": spec}
	// As the API server decodes: whole numbers are int64.
	js, _ := json.Marshal(obj)
	obj = nil
	if err := utiljson.Unmarshal(js, &obj); err != nil {
		t.Fatal(err)
	}
	_, structural, validator := crdSchema(t, "gputask.io_gputasksets.yaml")
	errs := apivalidation.ValidateCustomResource(nil, obj, validator)
	celErrs, _ := cel.NewValidator(structural, true, celconfig.PerCallLimit).Validate(context.Background(), nil, structural, obj, nil, celconfig.RuntimeCELCostBudget)
	if errs = append(errs, celErrs...); len(errs) > 0 {
		t.Fatalf("invalid: %v", errs.ToAggregate())
	}
	if pruned := pruning.PruneWithOptions(obj, structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true}); len(pruned) > 0 {
		t.Fatalf("the CRD schema drops fields: %v", pruned)
	}
	as := obj["spec"].(map[string]any)["autoscaling"].(map[string]any)
	if p := as["policy"].(map[string]any); p["type"] != "SLO" || len(as["metrics"].([]any)) != 11 {
		t.Fatalf("the example is not the SLO policy with vLLM's eleven metrics: %v", as)
	}
}

// TestCELRuleCosts compiles every CEL rule of each CRD as the API server
// does when the CRD is created, and checks each rule's estimated cost,
// times the most times it can run (the maxItems of the lists around it),
// against the API server's per-rule and per-CRD limits: a rule over them
// would make the API server refuse the CRD.
func TestCELRuleCosts(t *testing.T) {
	const perRuleLimit, perCRDLimit = 10_000_000, 100_000_000
	envSet := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
	for _, file := range []string{"gputask.io_gputasks.yaml", "gputask.io_gputasksets.yaml"} {
		_, structural, _ := crdSchema(t, file)
		var total uint64
		var walk func(s *structuralschema.Structural, path string, cardinality uint64, root bool)
		walk = func(s *structuralschema.Structural, path string, cardinality uint64, root bool) {
			if s == nil {
				return
			}
			if len(s.XValidations) > 0 {
				results, err := cel.Compile(s, model.SchemaDeclType(s, root), celconfig.PerCallLimit, envSet, cel.NewExpressionsEnvLoader())
				if err != nil {
					t.Fatalf("%s %s: %v", file, path, err)
				}
				for i, r := range results {
					if r.Error != nil {
						t.Errorf("%s %s rule %d: %v", file, path, i, r.Error)
						continue
					}
					runs := cardinality
					if runs == 0 {
						runs = r.MaxCardinality
					}
					cost := r.MaxCost * runs
					if runs != 0 && cost/runs != r.MaxCost || cost > perRuleLimit {
						t.Errorf("%s %s rule %q: estimated cost %d × %d runs is over the API server's limit of %d", file, path, s.XValidations[i].Rule, r.MaxCost, runs, perRuleLimit)
					}
					total += cost
				}
			}
			for name, p := range s.Properties {
				walk(&p, path+"."+name, cardinality, false)
			}
			if s.Items != nil {
				c := uint64(0)
				if s.ValueValidation != nil && s.ValueValidation.MaxItems != nil && cardinality != 0 {
					c = cardinality * uint64(*s.ValueValidation.MaxItems)
				}
				walk(s.Items, path+"[]", c, false)
			}
			if s.AdditionalProperties != nil && s.AdditionalProperties.Structural != nil {
				walk(s.AdditionalProperties.Structural, path+"{}", 0, false)
			}
		}
		walk(structural, "", 1, true)
		if total > perCRDLimit {
			t.Errorf("%s: estimated cost of all rules %d is over the API server's limit of %d", file, total, perCRDLimit)
		}
		t.Logf("%s: estimated cost of all rules %d", file, total)
	}
}

// TestAutoscalingExamples: every set in artifacts/examples/autoscaling
// passes the schema and its CEL rules as the API server runs them, loses
// no field to pruning, and passes the checks the controllers run.
func TestAutoscalingExamples(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "..", "artifacts", "examples", "autoscaling", "*.yaml"))
	if err != nil || len(files) < 4 {
		t.Fatalf("want at least 4 autoscaling examples, got %v (%v)", files, err)
	}
	_, structural, validator := crdSchema(t, "gputask.io_gputasksets.yaml")
	celValidator := cel.NewValidator(structural, true, celconfig.PerCallLimit)
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var obj map[string]any
			if err := yaml.Unmarshal(raw, &obj); err != nil {
				t.Fatal(err)
			}
			// As the API server decodes: whole numbers are int64.
			data, err := json.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			obj = nil
			if err := utiljson.Unmarshal(data, &obj); err != nil {
				t.Fatal(err)
			}
			errs := apivalidation.ValidateCustomResource(nil, obj, validator)
			celErrs, _ := celValidator.Validate(context.Background(), nil, structural, obj, nil, celconfig.RuntimeCELCostBudget)
			if errs = append(errs, celErrs...); len(errs) > 0 {
				t.Fatalf("invalid: %v", errs.ToAggregate())
			}
			if pruned := pruning.PruneWithOptions(obj, structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true}); len(pruned) > 0 {
				t.Fatalf("the CRD schema drops fields: %v", pruned)
			}
			var set gputaskv1.GPUTaskSet
			if err := yaml.UnmarshalStrict(raw, &set); err != nil {
				t.Fatal(err)
			}
			if errs := gputaskv1.ValidateTaskSetSpec(&set.Spec); len(errs) > 0 {
				t.Fatalf("the controllers refuse it: %v", errs.ToAggregate())
			}
		})
	}
}
