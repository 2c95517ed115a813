package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/framework"
)

// The names artifacts/deploy installs.
const (
	deployNamespace      = "gputask-system"
	deployServiceAccount = "gputask-controller"
	deployLease          = "gputask-controller"
)

// TestDeployRBAC checks the shipped manifests on a control plane of its own:
// the whole kustomization passes a server-side dry run, and the controller,
// running with exactly the rights of its ServiceAccount (impersonated, so
// RBAC is enforced), does the end-to-end job with leader election in
// gputask-system and without a single Forbidden, while an action it does
// not need is refused.
func TestDeployRBAC(t *testing.T) {
	t.Parallel()
	c := startCluster(t, gpuNode{"a100-1", "A100", 8}, gpuNode{"a100-2", "A100", 8})
	ctx := context.Background()
	dir := filepath.Join(c.Root, "artifacts", "deploy")

	dryRunDeploy(t, c, dir)
	applyDeployWithoutDeployment(t, c, dir)

	user, groups := framework.ServiceAccountUser(deployNamespace, deployServiceAccount)
	kubeconfig, err := c.KubeconfigAs("controller-sa", user, groups...)
	if err != nil {
		t.Fatal(err)
	}
	controller := c.StartControllerT(t, "--kubeconfig="+kubeconfig, "--workers=4",
		"--leader-elect", "--leader-elect-resource-namespace="+deployNamespace)
	framework.Poll(t, 30*time.Second, "lease "+deployNamespace+"/"+deployLease+" held", func(ctx context.Context) (bool, string) {
		lease, err := c.Kube.CoordinationV1().Leases(deployNamespace).Get(ctx, deployLease, metav1.GetOptions{})
		if err != nil {
			return false, err.Error() + "; controller log:\n" + controller.LogTail(5)
		}
		return ptr.Deref(lease.Spec.HolderIdentity, "") != "", "no holder"
	})

	runDeployScenario(t, c)
	runDeployDRAScenario(t, c)

	if bad := forbiddenLines(controller); len(bad) > 0 {
		t.Errorf("the controller was refused something as its ServiceAccount:\n%s", strings.Join(bad, "\n"))
	}

	// What the controller must not be able to do.
	sa, err := kubernetes.NewForConfig(c.ConfigAs(user, groups...))
	if err != nil {
		t.Fatal(err)
	}
	refused := map[string]error{
		"delete a node":          sa.CoreV1().Nodes().Delete(ctx, "a100-1", metav1.DeleteOptions{}),
		"delete a ResourceSlice": sa.ResourceV1().ResourceSlices().Delete(ctx, "dra-1-"+framework.DRADriver, metav1.DeleteOptions{}),
		"delete a ResourceClaim": sa.ResourceV1().ResourceClaims("default").Delete(ctx, "any", metav1.DeleteOptions{}),
		"list secrets": func() error {
			_, err := sa.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
			return err
		}(),
		"create a deployment": func() error {
			_, err := sa.AppsV1().Deployments("default").Create(ctx, &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Name: "not-allowed"},
				Spec: appsv1.DeploymentSpec{
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}},
					Template: corev1.PodTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"a": "b"}},
						Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
					},
				},
			}, metav1.CreateOptions{})
			return err
		}(),
		"update a gputaskset's spec": func() error {
			_, err := sa.CoreV1().RESTClient().Get().AbsPath("/apis/gputask.io/v1/gputasksets").DoRaw(ctx)
			if err != nil {
				return fmt.Errorf("listing gputasksets should be allowed: %w", err)
			}
			_, err = sa.CoreV1().RESTClient().Patch("application/merge-patch+json").
				AbsPath("/apis/gputask.io/v1/namespaces/default/gputasksets/any").
				Body([]byte(`{"spec":{"replicas":1}}`)).DoRaw(ctx)
			return err
		}(),
	}
	for what, err := range refused {
		if !apierrors.IsForbidden(err) {
			t.Errorf("as %s, %s: got %v, want Forbidden", user, what, err)
		}
	}
}

// dryRunDeploy runs `kubectl apply --dry-run=server -k artifacts/deploy`. A
// server-side dry run creates nothing, so the namespaced objects fail while
// gputask-system does not exist; the namespace is then created first, as a
// GitOps tool applying the Namespace in an earlier wave would.
func dryRunDeploy(t *testing.T, c *framework.ControlPlane, dir string) {
	t.Helper()
	ctx := context.Background()
	out, err := c.Kubectl(ctx, "apply", "--dry-run=server", "-k", dir)
	if err != nil {
		if !strings.Contains(err.Error(), fmt.Sprintf("namespaces %q not found", deployNamespace)) {
			t.Fatalf("server dry run of %s: %v", dir, err)
		}
		t.Logf("server dry run without namespace %s fails as expected (%v); creating it first", deployNamespace, lineWith(err.Error(), "not found"))
		if err := c.CreateNamespace(ctx, deployNamespace); err != nil {
			t.Fatal(err)
		}
		if out, err = c.Kubectl(ctx, "apply", "--dry-run=server", "-k", dir); err != nil {
			t.Fatalf("server dry run of %s: %v", dir, err)
		}
	}
	for _, want := range []string{
		"deployment.apps/gputask-controller", "clusterrole.rbac.authorization.k8s.io/gputask-controller",
		"serviceaccount/gputask-controller", "role.rbac.authorization.k8s.io/gputask-controller-leader-election",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("server dry run output lacks %s:\n%s", want, out)
		}
	}
	t.Logf("kubectl apply --dry-run=server -k artifacts/deploy:\n%s", out)
}

var kindDeployment = regexp.MustCompile(`(?m)^kind: Deployment$`)

// runDeployDRAScenario is the DRA part of the job, for the rights it
// needs: a DRA task (its ResourceClaimTemplate made, its claim read) and a
// capacity-aware DRA set (DeviceClasses, ResourceSlices and claims read),
// on a node of two devices.
func runDeployDRAScenario(t *testing.T, c *framework.ControlPlane) {
	t.Helper()
	ctx := context.Background()
	ns := c.NamespaceT(t)
	const model = "NVIDIA A100-SXM4-80GB"
	c.KubectlT(t, "apply", "-f", filepath.Join(c.Root, "artifacts", "examples", "dra", "deviceclass.yaml"))
	if _, err := c.CreateDRANode(ctx, "dra-1", "dra", model, 2); err != nil {
		t.Fatal(err)
	}
	createTask(t, c, ns, newTask("dra-job", model, 1, func(s *gputaskv1.GPUTaskSpec) { s.GPUAllocation = gputaskv1.GPUAllocationDRA }))
	waitTask(t, c, ns, "dra-job", "Running with its device", func(tk *gputaskv1.GPUTask) bool {
		return taskRunning(tk) && len(tk.Status.Devices) == 1
	})
	load := newLoadServer(t, loadHigh)
	set := httpSet("dra-pool", model, load.URL(), 4, time.Second)
	set.Spec.Template.Spec.GPUAllocation = gputaskv1.GPUAllocationDRA
	set.Spec.Autoscaling.CapacityAware = true
	if _, err := c.GPUTask.GputaskV1().GPUTaskSets(ns).Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, waitTimeout, "the DRA set capped at the one free device", func(ctx context.Context) (bool, string) {
		s, err := c.GPUTask.GputaskV1().GPUTaskSets(ns).Get(ctx, "dra-pool", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return ptr.Deref(s.Status.CapacityReplicas, -1) == 1 && s.Status.ReadyReplicas == 1, describeStatus(s)
	})
}

// runDeployScenario is the end-to-end job: tasks that fill the GPUs with
// the overflow Pending, a set of three, deletes that free GPUs and remove
// the set's tasks.
func runDeployScenario(t *testing.T, c *framework.ControlPlane) {
	t.Helper()
	ctx := context.Background()
	ns := c.NamespaceT(t)
	for i := range 6 {
		createTask(t, c, ns, newTask(fmt.Sprintf("job-%d", i), "A100", 3))
	}
	running, pending := waitPhases(t, c, ns, "", 4, 2)

	set := &gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: "pool"},
		Spec: gputaskv1.GPUTaskSetSpec{
			Replicas: ptr.To[int32](3),
			Template: gputaskv1.GPUTaskTemplateSpec{Spec: newTask("", "A100", 1).Spec},
		},
	}
	setNS := c.NamespaceT(t)
	if _, err := c.GPUTask.GputaskV1().GPUTaskSets(setNS).Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPhases(t, c, setNS, gputaskv1.LabelTaskSet+"=pool", 3, 0)
	framework.Poll(t, waitTimeout, "set status 3 running", func(ctx context.Context) (bool, string) {
		got, err := c.GPUTask.GputaskV1().GPUTaskSets(setNS).Get(ctx, "pool", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return got.Status.Replicas == 3 && got.Status.RunningReplicas == 3, fmt.Sprintf("%+v", got.Status)
	})

	// A deleted task frees its 3 GPUs; one Pending task takes them.
	if err := c.GPUTask.GputaskV1().GPUTasks(ns).Delete(ctx, running[0], metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPhases(t, c, ns, "", 4, 1)
	t.Logf("deleted %s; one of %v took its GPUs", running[0], pending)

	// Deleting the set removes its tasks (garbage collection) and their pods.
	if err := c.GPUTask.GputaskV1().GPUTaskSets(setNS).Delete(ctx, "pool", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, waitTimeout, "the set's tasks and pods gone", func(ctx context.Context) (bool, string) {
		tasks, err := c.GPUTask.GputaskV1().GPUTasks(setNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		pods, err := c.Kube.CoreV1().Pods(setNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var left []string
		for _, t := range tasks.Items {
			left = append(left, describeDeleting("task", &t.ObjectMeta))
		}
		for _, p := range pods.Items {
			left = append(left, describeDeleting("pod", &p.ObjectMeta)+" on "+p.Spec.NodeName+" "+string(p.Status.Phase))
		}
		return len(left) == 0, strings.Join(left, "; ")
	})
}

// describeDeleting says where an object that should be gone stands in its
// deletion: whether it is deleting yet, what holds it and who owns it.
func describeDeleting(kind string, m *metav1.ObjectMeta) string {
	deleting := "not deleting"
	if m.DeletionTimestamp != nil {
		deleting = "deleting since " + m.DeletionTimestamp.UTC().Format(time.TimeOnly)
	}
	var owners []string
	for _, o := range m.OwnerReferences {
		owners = append(owners, o.Kind+"/"+o.Name)
	}
	return fmt.Sprintf("%s %s (%s, finalizers %v, owners %v)", kind, m.Name, deleting, m.Finalizers, owners)
}
