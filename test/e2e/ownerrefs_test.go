package e2e

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/framework"
)

// TestOwnerReferencesPermissionEnforcement runs the controller as its
// ServiceAccount, with the RBAC of artifacts/deploy, on an API server with
// the OwnerReferencesPermissionEnforcement admission plugin. That plugin
// lets a client set blockOwnerDeletion on an owner reference only if it may
// update the owner's finalizers; the controller sets it on each task's pod
// and on each set's tasks. A task and a set of two reach Running, with no
// request refused, and a user without that right is refused the same pod,
// which shows the plugin was on.
func TestOwnerReferencesPermissionEnforcement(t *testing.T) {
	t.Parallel()
	c := framework.StartT(t, framework.Options{Scheduler: true, ControllerManager: true, Kwok: true,
		ExtraArgs: map[string][]string{framework.BinAPIServer: {"--enable-admission-plugins=OwnerReferencesPermissionEnforcement"}}})
	c.CreateGPUNodeT(t, "a100-1", "A100", 8)
	ctx := context.Background()
	dir := filepath.Join(c.Root, "artifacts", "deploy")
	if err := c.CreateNamespace(ctx, deployNamespace); err != nil {
		t.Fatal(err)
	}
	applyDeployWithoutDeployment(t, c, dir)
	publishAPIServerSlice(t, c)

	user, groups := framework.ServiceAccountUser(deployNamespace, deployServiceAccount)
	kubeconfig, err := c.KubeconfigAs("controller-sa", user, groups...)
	if err != nil {
		t.Fatal(err)
	}
	controller := c.StartControllerT(t, "--kubeconfig="+kubeconfig, "--workers=2")

	ns := c.NamespaceT(t)
	createTask(t, c, ns, newTask("solo", "A100", 1))
	set := &gputaskv1.GPUTaskSet{
		ObjectMeta: metav1.ObjectMeta{Name: "pool"},
		Spec: gputaskv1.GPUTaskSetSpec{
			Replicas: ptr.To[int32](2),
			Template: gputaskv1.GPUTaskTemplateSpec{Spec: newTask("", "A100", 1).Spec},
		},
	}
	if _, err := c.GPUTask.GputaskV1().GPUTaskSets(ns).Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running, _ := waitPhases(t, c, ns, "", 3, 0)
	framework.Poll(t, waitTimeout, "set status 2 running", func(ctx context.Context) (bool, string) {
		got, err := c.GPUTask.GputaskV1().GPUTaskSets(ns).Get(ctx, "pool", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return got.Status.Replicas == 2 && got.Status.RunningReplicas == 2, fmt.Sprintf("%+v", got.Status)
	})
	checkBlockingOwnerRefs(t, c, ns, running)
	if bad := forbiddenLines(controller); len(bad) > 0 {
		t.Errorf("the controller was refused something as its ServiceAccount:\n%s", strings.Join(bad, "\n"))
	}
	// It read the API server's EndpointSlice, and watches it, with the
	// ServiceAccount's rights.
	if line := lineWith(readLog(controller), "Could not read the API server's endpoints"); line != "" {
		t.Errorf("the controller could not read the EndpointSlice default/kubernetes: %s", line)
	}

	// Control: without update on gputasks/finalizers, the same pod is
	// refused, so the plugin did enforce what the controller passed.
	pod := refusedOwnerRefPod(t, c, ns, "solo")
	tenant := podCreatorWithoutFinalizers(t, c, ns)
	framework.Poll(t, 30*time.Second, "the plugin to refuse a blocking owner reference", func(ctx context.Context) (bool, string) {
		_, err := tenant.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "blockOwnerDeletion"), fmt.Sprintf("%v", err)
	})
}

// publishAPIServerSlice writes the EndpointSlice default/kubernetes that an
// API server with an endpoint reconciler keeps, so that the controller reads
// and watches it as it would in a cluster. An EndpointSlice may not hold a
// loopback address, so it names a documentation address (192.0.2.0/24),
// which the controller only adds to what it refuses and never dials.
func publishAPIServerSlice(t *testing.T, c *framework.ControlPlane) {
	t.Helper()
	u, err := url.Parse(c.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "kubernetes", Namespace: metav1.NamespaceDefault},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.10"}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	_, err = c.Kube.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Create(context.Background(), slice, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// checkBlockingOwnerRefs: every task of the set and every pod has a
// controller reference that blocks its owner's deletion, the case the
// plugin checks.
func checkBlockingOwnerRefs(t *testing.T, c *framework.ControlPlane, ns string, tasks []string) {
	t.Helper()
	ctx := context.Background()
	blocking := 0
	for _, name := range tasks {
		pod, err := c.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ref := metav1.GetControllerOf(pod); ref != nil && ptr.Deref(ref.BlockOwnerDeletion, false) {
			blocking++
		}
		task, err := c.GPUTask.GputaskV1().GPUTasks(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ref := metav1.GetControllerOf(task); ref != nil && ptr.Deref(ref.BlockOwnerDeletion, false) {
			blocking++
		}
	}
	// Three pods, and the set's two tasks.
	if blocking != 5 {
		t.Errorf("%d owner references block deletion, want 5 (3 pods, 2 tasks of the set)", blocking)
	}
}

// refusedOwnerRefPod is a pod owned by the task, as the controller makes it.
func refusedOwnerRefPod(t *testing.T, c *framework.ControlPlane, ns, task string) *corev1.Pod {
	t.Helper()
	owner, err := c.GPUTask.GputaskV1().GPUTasks(ns).Get(context.Background(), task, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "by-hand",
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(owner, gputaskv1.SchemeGroupVersion.WithKind("GPUTask"))}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
}

// podCreatorWithoutFinalizers returns a client of a user who may create pods
// in ns and nothing else.
func podCreatorWithoutFinalizers(t *testing.T, c *framework.ControlPlane, ns string) kubernetes.Interface {
	t.Helper()
	ctx := context.Background()
	const user = "pod-creator"
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: user},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"}}}}
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
	client, err := kubernetes.NewForConfig(c.ConfigAs(user, "system:authenticated"))
	if err != nil {
		t.Fatal(err)
	}
	return client
}
