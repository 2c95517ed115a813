package image

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// serviceAccountMountPath is where the kubelet mounts a pod's ServiceAccount
// token, CA bundle and namespace, and where in-cluster config reads them.
const serviceAccountMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"

// defaultTerminationGracePeriod is the pod's default
// terminationGracePeriodSeconds.
const defaultTerminationGracePeriod = 30

// container is how the test runs the Deployment's container with podman, and
// where it reaches the container's probes.
type container struct {
	// runArgs are the arguments of `podman run` after the image, the
	// container's args.
	runFlags, args []string
	// hostPorts maps each containerPort to the loopback port it is served on.
	hostPorts map[int32]int
	// liveness and readiness are the probes' URLs; metrics is the metrics port's.
	liveness, readiness, metrics string
	// gracePeriod is terminationGracePeriodSeconds.
	gracePeriod int64
}

// hostEnv is what the kubelet would provide and the test supplies instead.
type hostEnv struct {
	// apiServerHost and apiServerPort become KUBERNETES_SERVICE_HOST and
	// KUBERNETES_SERVICE_PORT.
	apiServerHost, apiServerPort string
	// secretDir holds token, ca.crt and namespace.
	secretDir string
	// freePort returns a free loopback port.
	freePort func() (int, error)
}

// bindAddressArg is a flag whose value binds every interface on a port, such
// as --metrics-bind-address=:8080.
var bindAddressArg = regexp.MustCompile(`^(--?[a-z0-9-]+=):([0-9]+)$`)

// containerFromDeployment translates the Deployment's single container and
// pod securityContext into podman flags, as the kubelet would run it:
//   - runAsUser/runAsGroup become --user, and runAsNonRoot requires a
//     non-zero user;
//   - readOnlyRootFilesystem becomes --read-only, without the tmpfs mounts
//     podman would add and the kubelet does not;
//   - dropped capabilities become --cap-drop, allowPrivilegeEscalation: false
//     becomes no-new-privileges, and RuntimeDefault seccomp is podman's
//     default profile;
//   - the memory limit becomes --memory and the CPU request --cpu-shares;
//   - env, with fieldRef metadata.namespace, and $(VAR) in args expanded;
//   - the ServiceAccount files are mounted read-only at the in-cluster path.
//
// The one change: the container shares the host's network, because the
// control plane listens on 127.0.0.1 only. Args that bind every interface on
// a containerPort (":8080") are bound to 127.0.0.1 on a free port instead, so
// nothing listens on a public address and no fixed port collides.
func containerFromDeployment(d *appsv1.Deployment, env hostEnv) (*container, error) {
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 || len(pod.InitContainers) != 0 {
		return nil, fmt.Errorf("deployment %s: want exactly one container, got %d (and %d init containers)", d.Name, len(pod.Containers), len(pod.InitContainers))
	}
	c := pod.Containers[0]
	out := &container{
		hostPorts:   map[int32]int{},
		gracePeriod: ptr.Deref(pod.TerminationGracePeriodSeconds, defaultTerminationGracePeriod),
	}
	flags := []string{"--network=host"}

	user, err := runAsUser(pod.SecurityContext, c.SecurityContext)
	if err != nil {
		return nil, err
	}
	flags = append(flags, "--user="+user)
	sc := c.SecurityContext
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	if ptr.Deref(sc.ReadOnlyRootFilesystem, false) {
		flags = append(flags, "--read-only", "--read-only-tmpfs=false")
	}
	if sc.Capabilities != nil {
		for _, drop := range sc.Capabilities.Drop {
			flags = append(flags, "--cap-drop="+string(drop))
		}
		for _, add := range sc.Capabilities.Add {
			flags = append(flags, "--cap-add="+string(add))
		}
	}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		flags = append(flags, "--security-opt=no-new-privileges")
	}
	if err := checkSeccomp(pod.SecurityContext, c.SecurityContext); err != nil {
		return nil, err
	}
	if mem, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		flags = append(flags, "--memory="+strconv.FormatInt(mem.Value(), 10))
	}
	if cpu, ok := c.Resources.Requests[corev1.ResourceCPU]; ok {
		// The kubelet's conversion from millicores to cgroup v1 shares.
		flags = append(flags, "--cpu-shares="+strconv.FormatInt(max(cpu.MilliValue()*1024/1000, 2), 10))
	}

	vars := map[string]string{}
	for _, e := range c.Env {
		value, err := envValue(d, e)
		if err != nil {
			return nil, err
		}
		vars[e.Name] = value
		flags = append(flags, "--env="+e.Name+"="+value)
	}
	flags = append(flags,
		"--env=KUBERNETES_SERVICE_HOST="+env.apiServerHost,
		"--env=KUBERNETES_SERVICE_PORT="+env.apiServerPort,
	)
	if ptr.Deref(pod.AutomountServiceAccountToken, true) {
		flags = append(flags, "--volume="+env.secretDir+":"+serviceAccountMountPath+":ro")
	}
	flags = append(flags, "--stop-timeout="+strconv.FormatInt(out.gracePeriod, 10))
	out.runFlags = flags

	containerPorts := map[int32]bool{}
	for _, port := range c.Ports {
		containerPorts[port.ContainerPort] = true
	}
	for _, arg := range c.Args {
		arg = expand(arg, vars)
		if m := bindAddressArg.FindStringSubmatch(arg); m != nil {
			port, err := strconv.ParseInt(m[2], 10, 32)
			if err == nil && containerPorts[int32(port)] {
				hostPort, err := env.freePort()
				if err != nil {
					return nil, err
				}
				out.hostPorts[int32(port)] = hostPort
				arg = m[1] + "127.0.0.1:" + strconv.Itoa(hostPort)
			}
		}
		out.args = append(out.args, arg)
	}

	if out.liveness, err = probeURL(c, c.LivenessProbe, out.hostPorts); err != nil {
		return nil, fmt.Errorf("liveness probe: %w", err)
	}
	if out.readiness, err = probeURL(c, c.ReadinessProbe, out.hostPorts); err != nil {
		return nil, fmt.Errorf("readiness probe: %w", err)
	}
	metricsPort, err := resolvePort(c, intstr.FromString("metrics"), out.hostPorts)
	if err != nil {
		return nil, fmt.Errorf("metrics port: %w", err)
	}
	out.metrics = fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)
	return out, nil
}

// runAsUser returns "uid:gid" from the container's securityContext over the
// pod's, and refuses what the kubelet would refuse or what would run as root.
func runAsUser(pod *corev1.PodSecurityContext, c *corev1.SecurityContext) (string, error) {
	var uid, gid *int64
	nonRoot := false
	if pod != nil {
		uid, gid, nonRoot = pod.RunAsUser, pod.RunAsGroup, ptr.Deref(pod.RunAsNonRoot, false)
	}
	if c != nil {
		if c.RunAsUser != nil {
			uid = c.RunAsUser
		}
		if c.RunAsGroup != nil {
			gid = c.RunAsGroup
		}
		if c.RunAsNonRoot != nil {
			nonRoot = *c.RunAsNonRoot
		}
	}
	if uid == nil || gid == nil {
		return "", fmt.Errorf("the Deployment must set runAsUser and runAsGroup (got %v, %v)", uid, gid)
	}
	if !nonRoot || *uid == 0 {
		return "", fmt.Errorf("the Deployment must run as non-root: runAsNonRoot=%v, runAsUser=%d", nonRoot, *uid)
	}
	return fmt.Sprintf("%d:%d", *uid, *gid), nil
}

// checkSeccomp accepts RuntimeDefault, which podman applies by default.
func checkSeccomp(pod *corev1.PodSecurityContext, c *corev1.SecurityContext) error {
	var profile *corev1.SeccompProfile
	if pod != nil {
		profile = pod.SeccompProfile
	}
	if c != nil && c.SeccompProfile != nil {
		profile = c.SeccompProfile
	}
	if profile == nil || profile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		return fmt.Errorf("the Deployment must use the RuntimeDefault seccomp profile, got %v", profile)
	}
	return nil
}

// envValue resolves an env entry the way the kubelet does, for what the
// Deployment uses.
func envValue(d *appsv1.Deployment, e corev1.EnvVar) (string, error) {
	switch {
	case e.ValueFrom == nil:
		return e.Value, nil
	case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
		if d.Namespace == "" {
			return "", fmt.Errorf("env %s: the rendered Deployment has no namespace", e.Name)
		}
		return d.Namespace, nil
	default:
		return "", fmt.Errorf("env %s: the test does not know how to supply %+v", e.Name, e.ValueFrom)
	}
}

// expand replaces $(NAME) with the value of an env var defined before, as
// the kubelet does in args; an unknown reference is kept as written.
func expand(s string, vars map[string]string) string {
	for name, value := range vars {
		s = strings.ReplaceAll(s, "$("+name+")", value)
	}
	return s
}

// probeURL returns the HTTP URL of an httpGet probe on the host port.
func probeURL(c corev1.Container, probe *corev1.Probe, hostPorts map[int32]int) (string, error) {
	if probe == nil || probe.HTTPGet == nil {
		return "", fmt.Errorf("container %s: want an httpGet probe, got %+v", c.Name, probe)
	}
	port, err := resolvePort(c, probe.HTTPGet.Port, hostPorts)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("http://127.0.0.1:%d%s", port, probe.HTTPGet.Path), nil
}

// resolvePort maps a port, by name or number, to the host port serving it.
func resolvePort(c corev1.Container, port intstr.IntOrString, hostPorts map[int32]int) (int, error) {
	containerPort := port.IntVal
	if port.Type == intstr.String {
		containerPort = 0
		for _, p := range c.Ports {
			if p.Name == port.StrVal {
				containerPort = p.ContainerPort
			}
		}
		if containerPort == 0 {
			return 0, fmt.Errorf("container %s has no port named %q", c.Name, port.StrVal)
		}
	}
	hostPort, ok := hostPorts[containerPort]
	if !ok {
		return 0, fmt.Errorf("no arg binds containerPort %d: nothing would answer there", containerPort)
	}
	return hostPort, nil
}

// TestContainerFromDeployment translates the shipped Deployment, so that
// `make test` already fails when the Deployment loses a setting the image
// test relies on, before anyone runs `make test-image`.
func TestContainerFromDeployment(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "artifacts", "deploy", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	deploy := &appsv1.Deployment{}
	if err := yaml.UnmarshalStrict(data, deploy); err != nil {
		t.Fatal(err)
	}
	// kustomize sets the namespace.
	deploy.Namespace = "gputask-system"
	ports := []int{40001, 40002}
	ctr, err := containerFromDeployment(deploy, hostEnv{
		apiServerHost: "127.0.0.1",
		apiServerPort: "6443",
		secretDir:     "/tmp/sa",
		freePort: func() (int, error) {
			port := ports[0]
			ports = ports[1:]
			return port, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"--network=host",
		"--user=65532:65532",
		"--read-only",
		"--read-only-tmpfs=false",
		"--cap-drop=ALL",
		"--security-opt=no-new-privileges",
		"--memory=536870912",
		"--cpu-shares=102",
		"--env=POD_NAMESPACE=gputask-system",
		"--env=KUBERNETES_SERVICE_HOST=127.0.0.1",
		"--env=KUBERNETES_SERVICE_PORT=6443",
		"--volume=/tmp/sa:" + serviceAccountMountPath + ":ro",
		"--stop-timeout=30",
	} {
		if !slices.Contains(ctr.runFlags, want) {
			t.Errorf("podman flags lack %s: %q", want, ctr.runFlags)
		}
	}
	for _, want := range []string{
		"--leader-elect=true",
		"--leader-elect-resource-namespace=gputask-system",
		"--metrics-bind-address=127.0.0.1:40001",
		"--health-probe-bind-address=127.0.0.1:40002",
	} {
		if !slices.Contains(ctr.args, want) {
			t.Errorf("args lack %s: %q", want, ctr.args)
		}
	}
	if ctr.liveness != "http://127.0.0.1:40002/healthz" || ctr.readiness != "http://127.0.0.1:40002/readyz" || ctr.metrics != "http://127.0.0.1:40001/metrics" {
		t.Errorf("probes %s %s, metrics %s", ctr.liveness, ctr.readiness, ctr.metrics)
	}
}
