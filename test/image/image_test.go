//go:build image

package image

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	gputaskv1 "github.com/gputask/gputask-controller/pkg/apis/gputask/v1"
	"github.com/gputask/gputask-controller/test/framework"
)

// The images the test makes, in its own storage.
const (
	controllerImage = "localhost/gputask-controller:test"
)

// nonrootUser is the image's USER, as in distroless's nonroot images.
const nonrootUser = "65532:65532"

// settleTimeout bounds each wait for the controller or the cluster.
const settleTimeout = 2 * time.Minute

// TestImageRunsAsTheDeployment builds the image from the Dockerfile and runs
// it as artifacts/deploy runs it: the Deployment's args, env, user,
// read-only root filesystem, no capabilities and the ServiceAccount's token
// at the in-cluster path, with exactly the rights of the shipped RBAC. The
// controller must then run a GPUTask end to end, answer its probes and
// /metrics without a single Forbidden, and exit 0 on SIGTERM within the
// grace period.
func TestImageRunsAsTheDeployment(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	pm := newPodman(t, root)
	buildImage(t, pm, root)

	cp := framework.StartT(t, framework.Options{Scheduler: true, Kwok: true})
	cp.CreateGPUNodeT(t, "a100-1", "A100", 8)
	deploy := applyDeploy(t, cp)
	sa := deploy.Spec.Template.Spec.ServiceAccountName
	secretDir := serviceAccountFiles(t, cp, deploy.Namespace, sa)

	apiServer, err := url.Parse(cp.APIServerURL)
	if err != nil {
		t.Fatal(err)
	}
	ctr, err := containerFromDeployment(deploy, hostEnv{
		apiServerHost: apiServer.Hostname(),
		apiServerPort: apiServer.Port(),
		secretDir:     secretDir,
		freePort:      framework.FreePort,
	})
	if err != nil {
		t.Fatal(err)
	}

	name := "gputask-controller-" + randomSuffix()
	runArgs := append([]string{"run", "--detach", "--name=" + name}, ctr.runFlags...)
	runArgs = append(append(runArgs, controllerImage), ctr.args...)
	t.Logf("podman %s", strings.Join(runArgs, " "))
	started := time.Now()
	pm.PodmanT(t, runArgs...)
	t.Cleanup(func() { removeContainer(t, pm, name, cp.Dir) })

	// The container runs as the Deployment says.
	inspect := pm.PodmanT(t, "inspect", name, "--format",
		"{{.Config.User}} readonly={{.HostConfig.ReadonlyRootfs}} caps={{.EffectiveCaps}} nnp={{.HostConfig.SecurityOpt}}")
	t.Logf("container: %s", inspect)
	if want := "readonly=true"; !strings.Contains(inspect, want) {
		t.Errorf("container %s: want %s", inspect, want)
	}
	if want := "caps=[]"; !strings.Contains(inspect, want) {
		t.Errorf("container %s: want no capabilities (%s)", inspect, want)
	}

	// The probes and /metrics answer once the caches have synced.
	waitHTTP(t, pm, name, ctr.readiness, "ok")
	ready := time.Since(started)
	waitHTTP(t, pm, name, ctr.liveness, "ok")
	waitHTTP(t, pm, name, ctr.metrics, "workqueue_")
	t.Logf("/readyz answered 200 %s after podman run", ready.Round(time.Millisecond))

	// It leads: the Lease in its own namespace names it.
	poll(t, pm, name, "the lease held", func(ctx context.Context) (bool, string) {
		lease, err := cp.Kube.CoordinationV1().Leases(deploy.Namespace).Get(ctx, "gputask-controller", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return ptr.Deref(lease.Spec.HolderIdentity, "") != "", "no holder"
	})

	// A GPUTask end to end: a pod placed on the kwok node, the task Running.
	ns := cp.NamespaceT(t)
	amount := intstr.FromInt32(2)
	task := &gputaskv1.GPUTask{
		ObjectMeta: metav1.ObjectMeta{Name: "train"},
		Spec:       gputaskv1.GPUTaskSpec{GPU: "A100", GPUAmount: &amount},
	}
	created := time.Now()
	if _, err := cp.GPUTask.GputaskV1().GPUTasks(ns).Create(context.Background(), task, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, pm, name, "gputask "+ns+"/train Running", func(ctx context.Context) (bool, string) {
		got, err := cp.GPUTask.GputaskV1().GPUTasks(ns).Get(ctx, "train", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return got.Status.Phase == gputaskv1.GPUTaskRunning, fmt.Sprintf("phase %q", got.Status.Phase)
	})
	toRunning := time.Since(created)
	pods, err := cp.Kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: gputaskv1.LabelTask + "=train"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 || pods.Items[0].Spec.NodeName != "a100-1" {
		t.Fatalf("want one pod of train on a100-1, got %s", podSummary(pods.Items))
	}
	t.Logf("gputask %s/train Running %s after its creation, pod %s on %s",
		ns, toRunning.Round(time.Millisecond), pods.Items[0].Name, pods.Items[0].Spec.NodeName)

	// SIGTERM, as the kubelet sends it, with the pod's grace period. podman
	// sends SIGKILL when the grace period runs out, which would show as exit
	// code 137; 0 means the controller stopped on its own, in time.
	stopping := time.Now()
	pm.PodmanT(t, "stop", "--time="+strconv.FormatInt(ctr.gracePeriod, 10), name)
	stopped := time.Since(stopping)
	exit := pm.PodmanT(t, "inspect", name, "--format", "{{.State.ExitCode}}")
	t.Logf("podman stop --time=%d: exit code %s after %s", ctr.gracePeriod, exit, stopped.Round(time.Millisecond))
	if exit != "0" {
		t.Errorf("exit code after SIGTERM: %s, want 0; log:\n%s", exit, logTail(pm, name, 30))
	}

	log := containerLog(pm, name)
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(strings.ToLower(line), "forbidden") {
			t.Errorf("the controller was refused something as its ServiceAccount: %s", line)
		}
	}
	if !strings.Contains(log, "Controller stopped") {
		t.Errorf("the log does not end with a clean stop:\n%s", logTail(pm, name, 30))
	}
}

// buildImage assembles the base images and builds the Dockerfile on them
// without network: the module cache is filled on the host first (through
// the Go module proxy) and mounted read-only, with GOPROXY=off.
func buildImage(t *testing.T, pm *podman, root string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), framework.PodmanCommandTimeout)
	defer cancel()
	started := time.Now()
	if err := pm.BuildControllerImage(ctx, controllerImage); err != nil {
		t.Fatal(err)
	}
	t.Logf("podman build: %s", time.Since(started).Round(time.Second))

	for _, image := range []string{framework.BuilderImage, framework.RuntimeImage, controllerImage} {
		size := pm.PodmanT(t, "image", "inspect", image, "--format", "{{.Size}}")
		bytes, err := strconv.ParseInt(size, 10, 64)
		if err != nil {
			t.Fatalf("size of %s: %q", image, size)
		}
		t.Logf("image %s: %.1f MB", image, float64(bytes)/1e6)
	}
	config := pm.PodmanT(t, "image", "inspect", controllerImage, "--format", "{{.Config.User}} {{.Config.Entrypoint}}")
	if want := nonrootUser + " [/gputask-controller]"; config != want {
		t.Errorf("image config %q, want %q", config, want)
	}
}

// applyDeploy applies what `kubectl kustomize artifacts/deploy` renders,
// less the Deployment, and returns the rendered Deployment: the container
// stands in for its pod.
func applyDeploy(t *testing.T, cp *framework.ControlPlane) *appsv1.Deployment {
	t.Helper()
	rendered := cp.KubectlT(t, "kustomize", filepath.Join(cp.Root, "artifacts", "deploy"))
	var kept []string
	var deploy *appsv1.Deployment
	for _, doc := range strings.Split(rendered, "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("decoding a rendered document: %v\n%s", err, doc)
		}
		if meta.Kind != "Deployment" {
			kept = append(kept, doc)
			continue
		}
		if deploy != nil {
			t.Fatal("more than one Deployment in artifacts/deploy")
		}
		deploy = &appsv1.Deployment{}
		if err := yaml.UnmarshalStrict([]byte(doc), deploy); err != nil {
			t.Fatalf("decoding the Deployment: %v", err)
		}
	}
	if deploy == nil {
		t.Fatalf("no Deployment in artifacts/deploy:\n%s", rendered)
	}
	out, err := cp.KubectlWithInput(context.Background(), []byte(strings.Join(kept, "\n---\n")), "apply", "-f", "-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("applied artifacts/deploy without the Deployment:\n%s", strings.TrimSpace(out))
	return deploy
}

// serviceAccountFiles writes what the kubelet projects into a pod: a bound
// token of the ServiceAccount (TokenRequest, one hour, as the kubelet asks),
// the cluster's CA bundle and the namespace, readable by the nonroot user.
func serviceAccountFiles(t *testing.T, cp *framework.ControlPlane, namespace, name string) string {
	t.Helper()
	token, err := cp.Kube.CoreV1().ServiceAccounts(namespace).CreateToken(context.Background(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token for ServiceAccount %s/%s: %v", namespace, name, err)
	}
	dir := t.TempDir()
	files := map[string][]byte{
		"token":     []byte(token.Status.Token),
		"ca.crt":    cp.Config.CAData,
		"namespace": []byte(namespace),
	}
	for file, data := range files {
		if len(data) == 0 {
			t.Fatalf("no data for %s", file)
		}
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// waitHTTP waits until url answers 200 with a body containing want.
func waitHTTP(t *testing.T, pm *podman, name, url, want string) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	poll(t, pm, name, "GET "+url, func(ctx context.Context) (bool, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err.Error()
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			return false, err.Error()
		}
		return resp.StatusCode == http.StatusOK && strings.Contains(string(body), want),
			fmt.Sprintf("%s: %.200s", resp.Status, body)
	})
}

// poll waits until cond holds, and fails the test with the last state and the
// container's log if it does not within settleTimeout or the container exits.
func poll(t *testing.T, pm *podman, name, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, settleTimeout, true, func(ctx context.Context) (bool, error) {
		var ok bool
		if ok, last = cond(ctx); ok {
			return true, nil
		}
		state, err := pm.Exec(ctx, "inspect", name, "--format", "{{.State.Status}}")
		if err == nil && strings.TrimSpace(state) != "running" {
			return false, fmt.Errorf("container %s is %s", name, strings.TrimSpace(state))
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%s: %v; last seen: %s; container log:\n%s", what, err, last, logTail(pm, name, 30))
	}
}

// containerLog returns the container's output: klog writes to stderr.
func containerLog(pm *podman, name string) string {
	out, err := pm.ExecCombined(context.Background(), "logs", name)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	return out
}

func logTail(pm *podman, name string, n int) string {
	lines := strings.Split(strings.TrimRight(containerLog(pm, name), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// removeContainer keeps the container's log with the control plane's logs,
// which are kept when the test fails, and removes the container before the
// control plane stops.
func removeContainer(t *testing.T, pm *podman, name, dir string) {
	if err := os.WriteFile(filepath.Join(dir, name+".log"), []byte(containerLog(pm, name)), 0o644); err != nil {
		t.Logf("saving the container log: %v", err)
	}
	if out, err := pm.Exec(context.Background(), "rm", "--force", "--time=0", name); err != nil {
		t.Errorf("removing container %s: %v\n%s", name, err, out)
	}
}

func podSummary(pods []corev1.Pod) string {
	var parts []string
	for _, pod := range pods {
		parts = append(parts, pod.Name+" on "+pod.Spec.NodeName)
	}
	return fmt.Sprintf("%d pods %v", len(pods), parts)
}

func randomSuffix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
