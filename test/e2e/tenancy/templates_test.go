package tenancy

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/pkg/generated/clientset/versioned"
	"github.com/gputask/gputask-controller/test/framework"
)

// The users of the template policy's test.
const (
	// podlessTenant may manage tasks and sets but may not create pods.
	podlessTenant = "carol"
	// podCreator may also create pods in the namespace.
	podCreator = "dave"
	// statusWriter may write GPUTask status, as the controller does.
	statusWriter = "gputask-controller-like"
)

// templateField is one pod-template setting that the policy keeps from a
// user who may not create pods.
type templateField struct {
	name string
	set  func(*corev1.PodSpec)
}

func templateFields() []templateField {
	sc := func(edit func(*corev1.SecurityContext)) func(*corev1.PodSpec) {
		return func(p *corev1.PodSpec) {
			p.Containers[0].SecurityContext = &corev1.SecurityContext{}
			edit(p.Containers[0].SecurityContext)
		}
	}
	return []templateField{
		{"hostNetwork", func(p *corev1.PodSpec) { p.HostNetwork = true }},
		{"hostPID", func(p *corev1.PodSpec) { p.HostPID = true }},
		{"hostIPC", func(p *corev1.PodSpec) { p.HostIPC = true }},
		{"hostUsers: false", func(p *corev1.PodSpec) { p.HostUsers = ptr.To(false) }},
		{"hostPath", func(p *corev1.PodSpec) {
			p.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		}},
		{"privileged", sc(func(s *corev1.SecurityContext) { s.Privileged = ptr.To(true) })},
		{"privileged init container", func(p *corev1.PodSpec) {
			p.InitContainers = []corev1.Container{{Name: "init", Image: "busybox",
				SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}
		}},
		{"allowPrivilegeEscalation", sc(func(s *corev1.SecurityContext) { s.AllowPrivilegeEscalation = ptr.To(true) })},
		{"capabilities add", sc(func(s *corev1.SecurityContext) {
			s.Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}}
		})},
		{"nodeName", func(p *corev1.PodSpec) { p.NodeName = "gpu-node-1" }},
		{"serviceAccountName", func(p *corev1.PodSpec) { p.ServiceAccountName = "admin" }},
		{"serviceAccount", func(p *corev1.PodSpec) { p.DeprecatedServiceAccount = "admin" }},
		{"toleration of every taint", func(p *corev1.PodSpec) {
			p.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
		}},
		{"toleration of the GPU key for every effect", func(p *corev1.PodSpec) {
			p.Tolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}}
		}},
		{"toleration of a control-plane taint", func(p *corev1.PodSpec) {
			p.Tolerations = []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		}},
	}
}

// harmlessFields are settings every tenant may use.
func harmlessFields() []templateField {
	return []templateField{
		{"nothing", func(*corev1.PodSpec) {}},
		{"GPU toleration", func(p *corev1.PodSpec) {
			p.Tolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		}},
		{"default ServiceAccount", func(p *corev1.PodSpec) { p.ServiceAccountName = "default" }},
		{"host namespaces off", func(p *corev1.PodSpec) { p.HostNetwork, p.HostPID, p.HostIPC = false, false, false }},
		{"no privilege escalation, capabilities dropped", func(p *corev1.PodSpec) {
			p.Containers[0].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), Privileged: ptr.To(false),
				Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
		}},
		{"emptyDir", func(p *corev1.PodSpec) {
			p.Volumes = []corev1.Volume{{Name: "shm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}}
		}},
	}
}

func podTemplate(f templateField) *gputaskv1.PodTemplate {
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}
	f.set(&spec)
	return &gputaskv1.PodTemplate{Spec: spec}
}

func templateTask(name string, f templateField) *gputaskv1.GPUTask {
	return &gputaskv1.GPUTask{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       gputaskv1.GPUTaskSpec{GPU: "A100", Template: podTemplate(f)},
	}
}

func templateSet(name string, f templateField) *gputaskv1.GPUTaskSet {
	return &gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: gputaskv1.GPUTaskSetSpec{
			Replicas: ptr.To[int32](0),
			Template: gputaskv1.GPUTaskTemplateSpec{Spec: gputaskv1.GPUTaskSpec{GPU: "A100", Template: podTemplate(f)}},
		},
	}
}

// TestTaskTemplatePolicy runs the ValidatingAdmissionPolicy
// artifacts/crds/task-templates-policy.yaml on an API server: a tenant who
// may not create pods is refused each host-level setting, in a GPUTask and
// in a GPUTaskSet, and a user who may create pods keeps them all. Reserved
// labels are refused for both. No controller runs: what is stored is all
// that matters, and it is counted.
func TestTaskTemplatePolicy(t *testing.T) {
	// The controller manager runs only the controller that type-checks
	// admission policies against the schemas of what they match.
	c := framework.StartT(t, framework.Options{
		ControllerManager: true, Controllers: []string{"validatingadmissionpolicy-status-controller"}})
	ctx := context.Background()
	ns := c.NamespaceT(t)
	grantTemplateUsers(t, c, ns)
	c.KubectlT(t, "apply", "-f", filepath.Join(c.Root, "artifacts", "crds", "task-templates-policy.yaml"))
	carol, dave := clientAs(t, c, podlessTenant), clientAs(t, c, podCreator)
	checkTypeChecking(t, c, "gputask-task-templates")

	// The policy applies a moment after it is created.
	probe := templateTask("probe", templateFields()[0])
	framework.Poll(t, tenancyTimeout, "the policy to refuse carol's hostNetwork task", func(ctx context.Context) (bool, string) {
		_, err := carol.GputaskV1().GPUTasks(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err), fmt.Sprintf("dry-run create: %v", err)
	})

	fields := templateFields()
	var refused, allowed int
	for i, f := range fields {
		taskName, setName := fmt.Sprintf("task-%d", i), fmt.Sprintf("set-%d", i)
		_, err := carol.GputaskV1().GPUTasks(ns).Create(ctx, templateTask(taskName, f), metav1.CreateOptions{})
		refused += countRefusal(t, "carol's task with "+f.name, err)
		_, err = carol.GputaskV1().GPUTaskSets(ns).Create(ctx, templateSet(setName, f), metav1.CreateOptions{})
		refused += countRefusal(t, "carol's set with "+f.name, err)
		if _, err := dave.GputaskV1().GPUTasks(ns).Create(ctx, templateTask(taskName, f), metav1.CreateOptions{}); err != nil {
			t.Errorf("dave, who may create pods, was refused a task with %s: %v", f.name, err)
		} else {
			allowed++
		}
		if _, err := dave.GputaskV1().GPUTaskSets(ns).Create(ctx, templateSet(setName, f), metav1.CreateOptions{}); err != nil {
			t.Errorf("dave, who may create pods, was refused a set with %s: %v", f.name, err)
		} else {
			allowed++
		}
	}
	if refused != 2*len(fields) || allowed != 2*len(fields) {
		t.Errorf("carol refused %d times and dave allowed %d times, want both %d", refused, allowed, 2*len(fields))
	}

	// Every tenant keeps what a pod of their own could do.
	for i, f := range harmlessFields() {
		if _, err := carol.GputaskV1().GPUTasks(ns).Create(ctx, templateTask(fmt.Sprintf("carol-task-%d", i), f), metav1.CreateOptions{}); err != nil {
			t.Errorf("carol's task with %s was refused: %v", f.name, err)
		}
		if _, err := carol.GputaskV1().GPUTaskSets(ns).Create(ctx, templateSet(fmt.Sprintf("carol-set-%d", i), f), metav1.CreateOptions{}); err != nil {
			t.Errorf("carol's set with %s was refused: %v", f.name, err)
		}
	}
	checkStored(t, c, ns, 2*len(fields)+2*len(harmlessFields()))

	testTemplateUpdates(t, c, ns, carol)
	testReservedLabels(t, c, ns, carol, dave)
}

// testTemplateUpdates: an edit of the spec is checked as a create is; an
// edit of the metadata alone (as the garbage collector and the controller
// make) is not, even on a task whose template carol could not have written.
func testTemplateUpdates(t *testing.T, c *framework.ControlPlane, ns string, carol versioned.Interface) {
	t.Helper()
	ctx := context.Background()
	tasks := carol.GputaskV1().GPUTasks(ns)
	own, err := tasks.Get(ctx, "carol-task-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	own.Spec.Template.Spec.HostNetwork = true
	if _, err := tasks.Update(ctx, own, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("carol's update to hostNetwork: %v, want Forbidden", err)
	}
	daves, err := tasks.Get(ctx, "task-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	metav1.SetMetaDataAnnotation(&daves.ObjectMeta, "example.com/note", "seen")
	if _, err := tasks.Update(ctx, daves, metav1.UpdateOptions{}); err != nil {
		t.Errorf("carol's metadata-only update of dave's hostNetwork task: %v, want it allowed", err)
	}
	daves, err = tasks.Get(ctx, "task-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	daves.Spec.Image = "busybox:2"
	if _, err := tasks.Update(ctx, daves, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("carol's spec update of dave's hostNetwork task: %v, want Forbidden", err)
	}
}

// testReservedLabels: gputask.io/ label keys are refused in a task's labels
// and in the templates' labels, to carol and to dave alike; the controller
// (a writer of GPUTask status) may label the tasks it makes for a set, and
// carol may still edit such a task without touching those labels.
func testReservedLabels(t *testing.T, c *framework.ControlPlane, ns string, carol, dave versioned.Interface) {
	t.Helper()
	ctx := context.Background()
	reserved := map[string]string{gputaskv1.LabelTaskSet: "someone-elses-set"}
	harmless := harmlessFields()[0]
	cases := map[string]func(name string) (*gputaskv1.GPUTask, *gputaskv1.GPUTaskSet){
		"task labels": func(name string) (*gputaskv1.GPUTask, *gputaskv1.GPUTaskSet) {
			task := templateTask(name, harmless)
			task.Labels = reserved
			return task, nil
		},
		"task's pod template labels": func(name string) (*gputaskv1.GPUTask, *gputaskv1.GPUTaskSet) {
			task := templateTask(name, harmless)
			task.Spec.Template.Metadata.Labels = map[string]string{"gputask.io/task": "x"}
			return task, nil
		},
		"set's task template labels": func(name string) (*gputaskv1.GPUTask, *gputaskv1.GPUTaskSet) {
			set := templateSet(name, harmless)
			set.Spec.Template.Metadata.Labels = reserved
			return nil, set
		},
		"set's pod template labels": func(name string) (*gputaskv1.GPUTask, *gputaskv1.GPUTaskSet) {
			set := templateSet(name, harmless)
			set.Spec.Template.Spec.Template.Metadata.Labels = map[string]string{"gputask.io/anything": "x"}
			return nil, set
		},
	}
	refused := 0
	for what, build := range cases {
		for user, client := range map[string]versioned.Interface{podlessTenant: carol, podCreator: dave} {
			task, set := build("reserved-" + user)
			var err error
			if task != nil {
				_, err = client.GputaskV1().GPUTasks(ns).Create(ctx, task, metav1.CreateOptions{})
			} else {
				_, err = client.GputaskV1().GPUTaskSets(ns).Create(ctx, set, metav1.CreateOptions{})
			}
			if apierrors.IsInvalid(err) && strings.Contains(err.Error(), "reserved") {
				refused++
			} else {
				t.Errorf("%s's %s with a reserved key: %v, want Invalid", user, what, err)
			}
		}
	}
	if want := 2 * len(cases); refused != want {
		t.Errorf("%d refusals of reserved labels, want %d", refused, want)
	}

	// The controller labels the tasks it makes; carol's later edits that
	// keep those labels pass, and a change of them does not.
	controllerLike := clientAs(t, c, statusWriter)
	owned := templateTask("owned-by-set", harmless)
	owned.Labels = map[string]string{gputaskv1.LabelTaskSet: "carol-set-0"}
	if _, err := controllerLike.GputaskV1().GPUTasks(ns).Create(ctx, owned, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the controller's create of a set's task: %v", err)
	}
	got, err := carol.GputaskV1().GPUTasks(ns).Get(ctx, owned.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.Spec.Image = "busybox:2"
	got.Labels["team"] = "ml"
	if _, err := carol.GputaskV1().GPUTasks(ns).Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("carol's edit that keeps the set's label: %v", err)
	}
	got, err = carol.GputaskV1().GPUTasks(ns).Get(ctx, owned.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.Labels[gputaskv1.LabelTaskSet] = "another-set"
	if _, err := carol.GputaskV1().GPUTasks(ns).Update(ctx, got, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("carol's change of the set's label: %v, want Invalid", err)
	}
}

// checkTypeChecking waits for the API server's type check of the policy
// against the GPUTask and GPUTaskSet schemas and fails on any warning it
// reports. (A misspelt field inside has() passes that check; the refusals
// counted in TestTaskTemplatePolicy catch it.)
func checkTypeChecking(t *testing.T, c *framework.ControlPlane, name string) {
	t.Helper()
	framework.Poll(t, tenancyTimeout, "the type check of policy "+name, func(ctx context.Context) (bool, string) {
		p, err := c.Kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.ObservedGeneration == p.Generation && p.Status.TypeChecking != nil, toJSON(p.Status)
	})
	p, err := c.Kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range p.Status.TypeChecking.ExpressionWarnings {
		t.Errorf("policy %s: %s: %s", name, w.FieldRef, w.Warning)
	}
}

// countRefusal returns 1 for a Forbidden refusal by the template policy and
// reports anything else.
func countRefusal(t *testing.T, what string, err error) int {
	t.Helper()
	if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "may not create pods") {
		return 1
	}
	t.Errorf("%s: %v, want Forbidden by the template policy", what, err)
	return 0
}

// checkStored counts the tasks and sets in ns: only what was allowed.
func checkStored(t *testing.T, c *framework.ControlPlane, ns string, want int) {
	t.Helper()
	ctx := context.Background()
	tasks, err := c.GPUTask.GputaskV1().GPUTasks(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sets, err := c.GPUTask.GputaskV1().GPUTaskSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(tasks.Items) + len(sets.Items); got != want {
		t.Errorf("%d tasks and sets stored, want %d", got, want)
	}
}

// grantTemplateUsers: carol may manage tasks and sets; dave may also
// create pods; the controller-like user may also write task status.
func grantTemplateUsers(t *testing.T, c *framework.ControlPlane, ns string) {
	t.Helper()
	ctx := context.Background()
	gputasks := rbacv1.PolicyRule{APIGroups: []string{"gputask.io"}, Resources: []string{"gputasks", "gputasksets"},
		Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}
	pods := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"}}
	status := rbacv1.PolicyRule{APIGroups: []string{"gputask.io"}, Resources: []string{"gputasks/status"}, Verbs: []string{"update", "patch"}}
	for user, rules := range map[string][]rbacv1.PolicyRule{
		podlessTenant: {gputasks}, podCreator: {gputasks, pods}, statusWriter: {gputasks, pods, status},
	} {
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: rules}
		if _, err := c.Kube.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		binding := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		}
		if _, err := c.Kube.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, user := range []string{podlessTenant, podCreator, statusWriter} {
		framework.Poll(t, tenancyTimeout, user+"'s RBAC", func(ctx context.Context) (bool, string) {
			_, err := clientAs(t, c, user).GputaskV1().GPUTasks(ns).List(ctx, metav1.ListOptions{})
			return err == nil, fmt.Sprintf("list as %s: %v", user, err)
		})
	}
}
