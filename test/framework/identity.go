package framework

import (
	"fmt"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// ServiceAccountUser returns the user name and groups the apiserver gives a
// ServiceAccount's token, for impersonating it.
func ServiceAccountUser(namespace, name string) (string, []string) {
	return fmt.Sprintf("system:serviceaccount:%s:%s", namespace, name),
		[]string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
}

// ConfigAs returns a REST config that impersonates user in groups. The admin
// may impersonate anyone, and the apiserver then authorizes every request
// with RBAC as that user, so a test sees exactly what a Role grants.
func (cp *ControlPlane) ConfigAs(user string, groups ...string) *rest.Config {
	cfg := rest.CopyConfig(cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	return cfg
}

// KubeconfigAs writes a kubeconfig that impersonates user in groups and
// returns its path, to run the controller binary (a later --kubeconfig flag
// wins) or kubectl with only the rights RBAC gives that user.
func (cp *ControlPlane) KubeconfigAs(name, user string, groups ...string) (string, error) {
	cfg, err := clientcmd.LoadFromFile(cp.KubeconfigPath)
	if err != nil {
		return "", fmt.Errorf("loading the admin kubeconfig: %w", err)
	}
	for _, auth := range cfg.AuthInfos {
		auth.Impersonate = user
		auth.ImpersonateGroups = groups
	}
	path := filepath.Join(cp.Dir, "kubeconfig-"+name)
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return path, nil
}
