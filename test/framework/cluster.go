package framework

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CreateNamespace creates a namespace and its "default" ServiceAccount. The
// ServiceAccount admission plugin rejects pods in a namespace without one,
// and kube-controller-manager's ServiceAccount controller, which would make
// it, may not run or may not have got there yet. An existing namespace or
// ServiceAccount is fine.
func (cp *ControlPlane) CreateNamespace(ctx context.Context, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := cp.Kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: name}}
	if _, err := cp.Kube.CoreV1().ServiceAccounts(name).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the default ServiceAccount of %s: %w", name, err)
	}
	return nil
}

// DeleteNamespace deletes a namespace without waiting; the namespace
// controller (kube-controller-manager) empties and removes it.
func (cp *ControlPlane) DeleteNamespace(ctx context.Context, name string) error {
	err := cp.Kube.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting namespace %s: %w", name, err)
	}
	return nil
}

// Kubectl runs bin/kubectl with the admin kubeconfig and returns its stdout.
// The error carries stderr.
func (cp *ControlPlane) Kubectl(ctx context.Context, args ...string) (string, error) {
	return cp.KubectlWithInput(ctx, nil, args...)
}

// KubectlWithInput is Kubectl with stdin, for `kubectl apply -f -`.
func (cp *ControlPlane) KubectlWithInput(ctx context.Context, stdin []byte, args ...string) (string, error) {
	full := append([]string{"--kubeconfig=" + cp.KubeconfigPath}, args...)
	cmd := exec.CommandContext(ctx, filepath.Join(cp.BinDir, BinKubectl), full...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}
